"""``dagchain-wallet``: keystore, payments and the load generator, all HTTP clients of a node.

Imports ``dagchain`` (transactions, addresses) and ``apiclient`` only, never ``node``, ``miner``
or ``simulator`` (an import-linter contract): the wallet is not part of the daemon.
"""
