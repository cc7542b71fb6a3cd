"""The miner: block templates, the nonce search and ``dagchain-miner``."""

__all__: list[str] = []
