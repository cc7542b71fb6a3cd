"""How a peer's behaviour is scored (PROTOCOL.md §11.7): the score table, decaying scores and
bans, the inbound token bucket, the missing-input limit of §7.5, and the one ``Penalty`` type
every part of the engine hands to its shell.

Pure: time arrives as ``now_ms``; the shell (the daemon's peer manager, the simulator's nodes)
applies the penalties and closes the connections.
"""

from collections import deque
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import NamedTuple

from dagchain.crypto import hash32
from dagchain.errors import InvalidBlock, MalformedBlock, NotYetValid, RejectedBlock
from p2p import wire

TOKEN_RATE_PER_S = 500
TOKEN_BURST = 2000
BAN_THRESHOLD = 100
DECAY_MS = 60_000
"""Scores decay by 1 per minute (§11.7)."""
# §11.7 score table (the wire codec owns the frame-level rows)
SCORE_BLOCK_INVALID = 100
SCORE_ORPHAN_OVER_LIMIT = 5
SCORE_TX_INVALID = 10
SCORE_TX_WRONG_KEY = 5
SCORE_RATE = 1
SCORE_BIG_ADDR = 20
SCORE_UNSOLICITED = 10
SCORE_BAD_MILESTONES = 100
SCORE_BAD_LEVEL_SET = 50
MISSING_INPUT_MAX = 100
MISSING_INPUT_WINDOW_MS = 60_000
"""§7.5/§11.7: at most 100 missing-input txs per peer per minute are examined."""


def score_block_error(exc: InvalidBlock | NotYetValid) -> int:
    """§11.7: MALFORMED and REJECT cost 100; H11 (DROP) costs nothing."""
    if isinstance(exc, MalformedBlock | RejectedBlock):
        return SCORE_BLOCK_INVALID
    return 0


def score_tx_rule(rule: str) -> int:
    """§11.7 for a relayed tx: T1-T7 +10, V7 +5; missing inputs, V8, conflicts, full pool 0."""
    if rule.startswith("T"):
        return SCORE_TX_INVALID
    if rule == "V7":
        return SCORE_TX_WRONG_KEY
    return 0


class Penalty(NamedTuple):
    """Misbehaviour points for the shell to add to one peer (§11.7)."""

    key: str
    score: int
    reason: str


class Misbehaviour:
    """A connection's score: points add up, decay by 1 per minute, ban at the threshold."""

    def __init__(self, threshold: int = BAN_THRESHOLD) -> None:
        self.threshold = threshold
        self._score = 0
        self._since_ms: int | None = None

    def value(self, now_ms: int) -> int:
        """The decayed score."""
        self._decay(now_ms)
        return self._score

    def add(self, points: int, now_ms: int) -> bool:
        """Add points; True if the score reached the ban threshold."""
        self._decay(now_ms)
        self._score += points
        return self._score >= self.threshold

    def _decay(self, now_ms: int) -> None:
        if self._since_ms is None or self._score == 0:
            self._since_ms = now_ms
            return
        steps = (now_ms - self._since_ms) // DECAY_MS
        if steps > 0:
            self._score = max(0, self._score - steps)
            self._since_ms += steps * DECAY_MS


class TokenBucket:
    """§11.7 inbound message rate: 500/s with a burst of 2000."""

    def __init__(self, rate_per_s: int = TOKEN_RATE_PER_S, burst: int = TOKEN_BURST) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._milli_tokens = burst * 1000
        self._last_ms: int | None = None

    def take(self, now_ms: int) -> bool:
        """Spend one token; False if the bucket is empty (drop the message, +1)."""
        if self._last_ms is not None and now_ms > self._last_ms:
            refill = (now_ms - self._last_ms) * self.rate_per_s
            self._milli_tokens = min(self.burst * 1000, self._milli_tokens + refill)
        self._last_ms = now_ms if self._last_ms is None else max(self._last_ms, now_ms)
        if self._milli_tokens < 1000:
            return False
        self._milli_tokens -= 1000
        return True


def is_solicited_reply(
    msg: object, pending_items: AbstractSet[bytes], requests: Mapping[str, object]
) -> bool:
    """True if ``msg`` answers one of our outstanding requests to its sender.

    ``tx``/``block``/``notfound`` answer our ``getdata`` when they carry an item we asked for
    (``pending_items``); ``milestones``, ``levelset`` and ``pending`` answer our request of that
    kind (``requests``). Such replies are not charged to the inbound token bucket: the bucket is
    there against floods, and a peer answering what we asked is not flooding (docs/p2p.md).
    """
    if isinstance(msg, wire.TxMsg):
        return bool(pending_items) and hash32(msg.data) in pending_items
    if isinstance(msg, wire.BlockMsg):
        return bool(pending_items) and wire.block_frame_id(msg.data) in pending_items
    if isinstance(msg, wire.NotFound):
        return any(
            item in pending_items or (kind == wire.InvKind.LEVEL_SET and "levelset" in requests)
            for kind, item in msg.items
        )
    if isinstance(msg, wire.Milestones):
        return "milestones" in requests
    if isinstance(msg, wire.LevelSet):
        return "levelset" in requests
    if isinstance(msg, wire.Pending):
        return "pending" in requests
    return False


def charge_inbound(bucket: TokenBucket, solicited: bool, now_ms: int) -> int:
    """§11.7 for one inbound message after the handshake: the score (0, or +1 beyond the
    bucket). Solicited replies are free and take no token."""
    if solicited or bucket.take(now_ms):
        return 0
    return SCORE_RATE


class MissingInputLimiter:
    """§7.5/§11.7: one peer's txs that turned out to have a missing input, over the last minute.

    Once 100 were examined within 60 s, the peer's further txs with an input we do not have
    are dropped unexamined (no score: docs/protocol.md decision 35) until the oldest of those 100
    leaves the window.
    """

    def __init__(
        self, limit: int = MISSING_INPUT_MAX, window_ms: int = MISSING_INPUT_WINDOW_MS
    ) -> None:
        self.limit = limit
        self.window_ms = window_ms
        self._times: deque[int] = deque()

    def exhausted(self, now_ms: int) -> bool:
        """True if ``limit`` missing-input txs were examined in the last ``window_ms``."""
        while self._times and now_ms - self._times[0] >= self.window_ms:
            self._times.popleft()
        return len(self._times) >= self.limit

    def record(self, now_ms: int) -> None:
        """An examined tx had a missing input."""
        self._times.append(now_ms)


class BanList:
    """Banned keys (an IP, or a node id on loopback) with their expiry."""

    def __init__(self) -> None:
        self._until: dict[str, int] = {}

    def ban(self, key: str, now_ms: int, duration_ms: int) -> None:
        """Ban ``key`` until now + duration."""
        self._until[key] = max(self._until.get(key, 0), now_ms + duration_ms)

    def is_banned(self, key: str, now_ms: int) -> bool:
        """True while the ban lasts (expired bans are forgotten)."""
        until = self._until.get(key)
        if until is None:
            return False
        if now_ms >= until:
            del self._until[key]
            return False
        return True

    def active(self, now_ms: int) -> dict[str, int]:
        """Every live ban and its expiry."""
        return {k: v for k, v in self._until.items() if self.is_banned(k, now_ms)}


def ban_key(host: str, node_id: bytes) -> str:
    """§11.7: ban the peer's IP, or its node id on loopback."""
    if host in ("127.0.0.1", "::1", "localhost") or host.startswith("127."):
        return "node:" + node_id.hex()
    return "ip:" + host


__all__ = [
    "BAN_THRESHOLD",
    "DECAY_MS",
    "MISSING_INPUT_MAX",
    "MISSING_INPUT_WINDOW_MS",
    "SCORE_BAD_LEVEL_SET",
    "SCORE_BAD_MILESTONES",
    "SCORE_BIG_ADDR",
    "SCORE_BLOCK_INVALID",
    "SCORE_ORPHAN_OVER_LIMIT",
    "SCORE_RATE",
    "SCORE_TX_INVALID",
    "SCORE_TX_WRONG_KEY",
    "SCORE_UNSOLICITED",
    "TOKEN_BURST",
    "TOKEN_RATE_PER_S",
    "BanList",
    "Misbehaviour",
    "MissingInputLimiter",
    "Penalty",
    "TokenBucket",
    "ban_key",
    "charge_inbound",
    "is_solicited_reply",
    "score_block_error",
    "score_tx_rule",
]
