"""The miner: block templates and the nonce search (arrives with a later issue)."""

__all__: list[str] = []
