"""The node daemon: peer-to-peer, HTTP API, wallet (arrives with a later issue)."""

__all__: list[str] = []
