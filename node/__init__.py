"""The node daemon: peer-to-peer, HTTP API, explorer and wallet (``dagchain-node``)."""

__all__: list[str] = []
