"""dagchain consensus core: pure, synchronous rules of PROTOCOL.md (no I/O, no clock, no threads)."""

__all__: list[str] = []
