"""The peer-to-peer protocol engine (PROTOCOL.md §11), sans-I/O: imports ``dagchain`` only.

The daemon (``node/net/``) and the simulator drive these same objects; neither holds a protocol
rule of its own (docs/architecture.md).
"""
