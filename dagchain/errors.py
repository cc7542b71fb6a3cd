"""The dagchain error tree and the ledger reason codes (PROTOCOL.md verdict table, §7.4)."""

from enum import IntEnum


class DagchainError(Exception):
    """Base of every error the core raises on purpose."""


class EncodingError(DagchainError):
    """Bytes that are not a canonical encoding (E3-E6)."""


class InvalidBlock(DagchainError):
    """A block that fails a rule; ``rule`` is the PROTOCOL.md rule id (e.g. ``"H4"``)."""

    def __init__(self, rule: str, message: str, block_id: bytes | None = None) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule
        self.message = message
        self.block_id = block_id


class MalformedBlock(InvalidBlock):
    """MALFORMED verdict (H1, H7): discard and penalise, but do not remember the id."""


class RejectedBlock(InvalidBlock):
    """REJECT verdict: discard, remember the id in the invalid cache, penalise."""


class NotYetValid(DagchainError):
    """DROP verdict (H11 future timestamp): may become valid later; never penalise."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule
        self.message = message


class InvalidTransaction(DagchainError):
    """A transaction failing a stateless rule (T1-T7) or a mempool ledger check (V7, V8)."""

    def __init__(self, rule: str, message: str, txid: bytes | None = None) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule
        self.message = message
        self.txid = txid


class StorageError(DagchainError):
    """The store is unusable: unknown schema, wrong network, corruption."""


class Reason(IntEnum):
    """Per-transaction verdict codes of a level set (§7.4). Only VALID/INVALID is consensus."""

    VALID = 0
    WARMUP = 1
    SORTITION = 2
    MISSING_INPUT = 3
    DOUBLE_SPEND = 4
    WRONG_KEY = 5
    OVERSPEND = 6
    BAD_ANCHOR = 7
    ALREADY_REDEEMED = 8
    EXCEEDS_REWARD = 9
    REDEEM_WRONG_KEY = 10

    @property
    def label(self) -> str:
        """The reason's text as PROTOCOL.md and the API spell it (``double-spend``)."""
        return self.name.lower().replace("_", "-")


__all__ = [
    "DagchainError",
    "EncodingError",
    "InvalidBlock",
    "InvalidTransaction",
    "MalformedBlock",
    "NotYetValid",
    "Reason",
    "RejectedBlock",
    "StorageError",
]
