"""dagchain consensus core: the pure, synchronous rules of PROTOCOL.md (no I/O, clock, threads)."""

__all__: list[str] = []
