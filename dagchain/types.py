"""Named types for consensus values (see STYLE.md rule 1)."""

from typing import NewType

BlockId = NewType("BlockId", bytes)
"""BLAKE2b-256 of a 150-byte header; also its proof-of-work hash (PROTOCOL.md §1)."""
TxId = NewType("TxId", bytes)
"""BLAKE2b-256 of a transaction's canonical bytes (§2.2)."""
Address = NewType("Address", bytes)
"""BLAKE2b-256 of a 32-byte x-only public key (E8)."""
TimestampMs = NewType("TimestampMs", int)
Height = NewType("Height", int)

NULL_ID = BlockId(bytes(32))
"""The null id: 32 zero bytes, used only by genesis links (§1)."""

__all__ = ["NULL_ID", "Address", "BlockId", "Height", "TimestampMs", "TxId"]
