"""The daemon's network shell: aiohttp peers, the peer manager, the address book, the signature
worker pool. The protocol itself lives in ``p2p/``."""
