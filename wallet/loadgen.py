"""``dagchain-wallet load``: fund N accounts, send at a fixed rate, measure what the DAG confirms.

Phases, each bounded in time and count:

1. **Fund.** From the wallet (or the devnet faucet) a two-stage fan-out: stage A txs split source
   coins into "intermediate" outputs of account 0, stage B txs split each intermediate into up to
   64 coins of ``utxo_amount`` units, dealt round-robin to the N accounts. No unconfirmed parents
   (§7.5), so each stage waits for its confirmations.
2. **Send.** Slot i is due at ``start + i / rate``; each slot spends one funded coin of account a
   to account a+1 (one input, one output, ``fee`` units). At most ``max_in_flight`` POSTs run at
   once; when they are all busy the sender falls behind and the offered rate shows it. A
   confirmed tx's output goes back into the coin pool (recycling), so the funding covers about
   ``RECYCLE_WINDOW_S`` seconds of load.
3. **Wait** until every accepted tx is confirmed or ``confirm_timeout_s`` passes.

Tracking: an accepted tx still unconfirmed after ``RECHECK_AFTER_S`` is looked up with
``GET /v1/txs/{txid}``. ``unknown`` (the node dropped it, e.g. a restart: the pool is not kept, or
a reorganisation returned more txs than the pool holds) or ``invalid`` (a block's copy of it is
INVALID, e.g. a stale branch's block ordered with ``sortition``, while the tx itself may still
confirm) is resubmitted; a 503 (pool full) or a 409 ``missing-input`` (its parent is unconfirmed
again) is asked again later; if its inputs are spent elsewhere (another 409), it is abandoned:
a load tx's coin goes back to the pool if the owner's UTXOs still list it, a funding tx is built
again from other source coins. Each round of such repairs is one progress line.

Confirmations come from the node's best chain: a poller walks each new milestone's level set
(``GET /v1/milestones/{h}/level-set``) and its blocks (``GET /v1/blocks/{hash}``: txids and
``tx_status``), so it sees every inclusion, VALID or not. The duplicate rate is the simulator's
``duplicate_tx_rate``: inclusions of a txid after its first, over all inclusions of load txs.
"""

import asyncio
import contextlib
import math
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from apiclient import ApiError, NodeApi
from apiclient.models import BlockResponse
from dagchain.crypto import encode_address
from dagchain.params import ConsensusParams
from dagchain.types import Address, TxId
from wallet.coins import (
    Keys,
    Utxo,
    WalletError,
    address_of,
    api_error,
    build_spend,
    fetch_utxos,
    select_coins,
)

__all__ = [
    "DEFAULT_LOAD_FEE",
    "ConfirmationTracker",
    "LoadConfig",
    "LoadReport",
    "duplicate_rate",
    "fanout_plan",
    "percentile",
    "run_load",
]

DEFAULT_LOAD_FEE = 100
UTXO_AMOUNT = 1_000_000
RECYCLE_WINDOW_S = 60.0
MAX_FUND_COINS = 200_000
FAN_OUT = 64
"""Outputs per stage-B tx (``max_tx_outputs``); stage A keeps one output for change."""
POLL_INTERVAL_S = 0.25
BLOCK_FETCHES = 16
"""Concurrent ``GET /v1/blocks`` of the confirmation poller."""
PROGRESS_INTERVAL_S = 5.0
RECHECK_AFTER_S = 5.0
"""An accepted tx unconfirmed this long after its (re)submission is looked up (``GET /v1/txs``)."""
RECHECK_INTERVAL_S = 1.0
DEFAULT_BATCH = 64
"""``--batch``'s default: at 1,024 tx/s on 3 nodes it cut the load node's CPU from 36 % to 23 % of
a core and the load's from 43 % to 26 % against one POST per tx (docs/benchmarks.md)."""
BATCH_WAIT_S = 0.05
"""With ``--batch``: a batch leaves this long after its first tx was signed, full or not."""
RECHECK_BATCH = 64
"""At most this many lookups per round (the oldest first)."""


# ------------------------------------------------------------------------------ pure helpers


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) with linear interpolation between closest ranks; 0 if empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def duplicate_rate(inclusions: Counter[TxId]) -> float:
    """Inclusions that repeat an earlier one, over all inclusions (0 if none)."""
    total = sum(inclusions.values())
    return (total - len(inclusions)) / total if total else 0.0


def fanout_plan(coins: int, fan_out: int = FAN_OUT) -> tuple[list[int], list[int]]:
    """How to make ``coins`` coins in two stages.

    Returns:
        (stage A: intermediate outputs per stage-A tx (each <= fan_out - 1, change aside),
        stage B: coins per intermediate (each <= fan_out)), with ``sum(stage B) == coins``.
    """
    if coins <= 0:
        return [], []
    stage_b = [fan_out] * (coins // fan_out) + ([coins % fan_out] if coins % fan_out else [])
    per_a = fan_out - 1
    n = len(stage_b)
    stage_a = [per_a] * (n // per_a) + ([n % per_a] if n % per_a else [])
    return stage_a, stage_b


def coins_needed(rate: float, duration_s: float, accounts: int) -> int:
    """Funded coins: enough for the whole run or ``RECYCLE_WINDOW_S`` of it (then recycled)."""
    want = math.ceil(rate * min(duration_s, RECYCLE_WINDOW_S) * 1.1) + accounts
    return min(MAX_FUND_COINS, want)


def requests_in_flight(max_in_flight: int, batch: int) -> int:
    """Requests the sender keeps in flight: ``max_in_flight`` single-tx POSTs, or with batches
    about ``max_in_flight`` txs (at least 2 batches, so one is signed while one is answered).

    Counting batches as single requests put 384 x 64 = 24,576 txs in flight against devnet's
    5,000-tx pool: the node answered them in bursts (its pool full and refusing, then drained
    and idle), 959 confirmed tx/s against 1,180 with 4 batches in flight (docs/benchmarks.md).
    """
    if batch <= 1:
        return max_in_flight
    return max(2, math.ceil(max_in_flight / batch))


@dataclass(frozen=True, slots=True)
class LoadConfig:
    """Options of one load run (see the module docstring)."""

    rate: float
    duration_s: float
    accounts: int = 16
    max_in_flight: int = 64
    batch: int = 1
    """Txs per request: 1 is ``POST /v1/txs`` per tx; more is ``POST /v1/txs/batch`` with up to
    this many (a batch leaves once full or ``BATCH_WAIT_S`` after its first tx)."""
    fee: int = DEFAULT_LOAD_FEE
    confirm_timeout_s: float = 60.0
    fund_timeout_s: float = 180.0
    utxo_amount: int = UTXO_AMOUNT


@dataclass(slots=True)
class Coin:
    """A spendable output and the account that owns it (-1: the source wallet)."""

    utxo: Utxo
    owner: int


@dataclass(slots=True)
class SentTx:
    """A tx built by the load generator."""

    txid: TxId
    fee: int
    kind: str  # "fund" or "load"
    sent_at: float
    accepted: bool = False
    status: int = 0
    """HTTP status of the POST (0: no answer)."""
    output: Coin | None = None
    raw: bytes = b""
    inputs: tuple[Coin, ...] = ()
    payments: tuple[tuple[Address, int], ...] = ()
    checked_at: float = 0.0
    """Last (re)submission or lookup that found it alive (monotonic)."""
    resubmits: int = 0
    abandoned: bool = False
    """Unknown and unspendable, or invalid: it will never confirm; its coin was dealt with."""


# ------------------------------------------------------------------------------ confirmations


class ConfirmationTracker:
    """Follows the node's best chain from a start height and records inclusions of watched txs.

    ``poll`` processes every milestone above the last one seen; when the milestone at the last
    processed height is no longer on the best chain (a reorganisation), the inclusions of the
    abandoned heights are forgotten and those heights are walked again.
    """

    def __init__(self, client: NodeApi, start_height: int, clock: Callable[[], float]) -> None:
        self.client = client
        self.clock = clock
        self.watched: dict[TxId, SentTx] = {}
        self.inclusions: Counter[TxId] = Counter()
        self.valid: Counter[TxId] = Counter()
        self.confirmed_at: dict[TxId, float] = {}
        self._height = start_height  # last processed height
        self._ms: dict[int, str] = {}
        self._per_height: dict[int, list[tuple[TxId, bool]]] = {}
        self.on_confirm: Callable[[SentTx], None] = lambda sent: None
        self.reorgs = 0

    async def poll(self) -> None:
        """Catch up with the node's best milestone (one status call when idle)."""
        status = await self.client.status()
        best = status.best_milestone.height
        await self._unwind(best)
        for height in range(self._height + 1, best + 1):
            await self._process(height)
            self._height = height

    async def _unwind(self, best: int) -> None:
        while self._height in self._ms and (
            self._height > best or await self._milestone_at(self._height) != self._ms[self._height]
        ):
            self.reorgs += 1
            for txid, is_valid in self._per_height.pop(self._height, []):
                self.inclusions[txid] -= 1
                if is_valid:
                    self.valid[txid] -= 1
                    if self.valid[txid] == 0:
                        self.confirmed_at.pop(txid, None)
            del self._ms[self._height]
            self._height -= 1

    async def _milestone_at(self, height: int) -> str:
        rows = await self.client.milestones(height, 1)
        return rows[0].hash if rows else ""

    async def _process(self, height: int) -> None:
        ids = await self.client.level_set(height)
        gate = asyncio.Semaphore(BLOCK_FETCHES)

        async def fetch(block_hash: str) -> BlockResponse:
            async with gate:
                return await self.client.block(block_hash)

        blocks = await asyncio.gather(*(fetch(h) for h in ids))
        now = self.clock()
        record: list[tuple[TxId, bool]] = []
        for block in blocks:
            for txid_hex, label in zip(block.txids, block.tx_status, strict=True):
                txid = TxId(bytes.fromhex(txid_hex))
                sent = self.watched.get(txid)
                if sent is None:
                    continue
                is_valid = label == "valid"
                record.append((txid, is_valid))
                self.inclusions[txid] += 1
                if is_valid:
                    self.valid[txid] += 1
                    if txid not in self.confirmed_at:
                        self.confirmed_at[txid] = now
                        self.on_confirm(sent)
        self._per_height[height] = record
        self._ms[height] = str(ids[-1]) if ids else ""

    def is_confirmed(self, txid: TxId) -> bool:
        """True if the tx is VALID in the best chain as seen so far."""
        return self.valid[txid] > 0


# ------------------------------------------------------------------------------ report


@dataclass(slots=True)
class LoadReport:
    """Counts and timings of one run; ``summary_lines`` ends with ``confirmed_tps: N``."""

    network: str
    source: str
    accounts: list[str]
    funded_coins: int
    send_window_s: float
    attempts: int
    starved: int
    accepted: int
    rejected: Counter[str]
    errors: int
    confirmed: int
    exactly_once: int
    confirmed_window_s: float
    latencies_s: list[float]
    duplicate_rate: float
    reorgs: int
    resubmitted: int = 0
    released: int = 0
    lost: int = 0
    requests: int = 0
    """Requests the send phase made (``POST /v1/txs`` or ``POST /v1/txs/batch``)."""
    txs: list[SentTx] = field(default_factory=list)
    valid_counts: dict[TxId, int] = field(default_factory=dict)
    confirmed_at: dict[TxId, float] = field(default_factory=dict)
    """When the tracker first saw each confirmed tx VALID (``time.monotonic()``)."""

    @property
    def offered_tps(self) -> float:
        return self.attempts / self.send_window_s if self.send_window_s > 0 else 0.0

    @property
    def confirmed_tps(self) -> float:
        return self.confirmed / self.confirmed_window_s if self.confirmed_window_s > 0 else 0.0

    def summary_lines(self) -> list[str]:
        lat = self.latencies_s
        rejected = ", ".join(f"{k}={v}" for k, v in sorted(self.rejected.items())) or "none"
        return [
            f"network: {self.network}",
            f"accounts: {len(self.accounts)} funded coins: {self.funded_coins}",
            f"sent: {self.attempts} in {self.send_window_s:.1f} s (starved slots {self.starved}, "
            f"{self.requests} requests)",
            f"accepted: {self.accepted} rejected: {rejected} errors: {self.errors}",
            f"confirmed: {self.confirmed} (exactly once: {self.exactly_once})",
            f"offered_tps: {self.offered_tps:.2f}",
            f"latency_s: p50 {percentile(lat, 0.5):.2f} p90 {percentile(lat, 0.9):.2f} "
            f"p99 {percentile(lat, 0.99):.2f}",
            f"duplicate_rate: {self.duplicate_rate:.4f}",
            f"reorgs_seen: {self.reorgs}",
            f"resubmitted: {self.resubmitted} coins released: {self.released} lost: {self.lost}",
            f"confirmed_tps: {self.confirmed_tps:.2f}",
        ]

    def to_json(self) -> dict[str, Any]:
        lat = self.latencies_s
        return {
            "network": self.network,
            "source": self.source,
            "accounts": self.accounts,
            "funded_coins": self.funded_coins,
            "offered_tps": self.offered_tps,
            "confirmed_tps": self.confirmed_tps,
            "attempts": self.attempts,
            "starved": self.starved,
            "requests": self.requests,
            "accepted": self.accepted,
            "rejected": dict(self.rejected),
            "errors": self.errors,
            "confirmed": self.confirmed,
            "exactly_once": self.exactly_once,
            "latency_s": {
                q: percentile(lat, v) for q, v in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
            },
            "duplicate_rate": self.duplicate_rate,
            "reorgs": self.reorgs,
            "resubmitted": self.resubmitted,
            "released": self.released,
            "lost": self.lost,
            "txs": [
                {
                    "txid": t.txid.hex(),
                    "kind": t.kind,
                    "fee": t.fee,
                    "accepted": t.accepted,
                    "valid_inclusions": self.valid_counts.get(t.txid, 0),
                    # time.monotonic(), system-wide on Linux: comparable with another process's
                    "sent_at": round(t.sent_at, 3),
                    "confirmed_at": _rounded(self.confirmed_at.get(t.txid)),
                }
                for t in self.txs
            ],
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


# ------------------------------------------------------------------------------ the run


class _Run:
    """State of one load run (one event loop task; no locks needed)."""

    def __init__(
        self,
        client: NodeApi,
        params: ConsensusParams,
        secret: bytes,
        config: LoadConfig,
        progress: Callable[[str], None],
    ) -> None:
        self.client = client
        self.params = params
        self.config = config
        self.progress = progress
        self.source_secret = secret
        self.secrets = [os.urandom(32) for _ in range(config.accounts)]
        self.addresses = [address_of(s) for s in self.secrets]
        self._keys: dict[bytes, Keys] = {}
        self.pool: deque[Coin] = deque()
        self.sent: dict[TxId, SentTx] = {}
        self.rejected: Counter[str] = Counter()
        self.errors = 0
        self.tracker: ConfirmationTracker | None = None
        self.stop = asyncio.Event()
        self.poll_errors = 0
        self.funded_coins = 0
        self.polled = asyncio.Event()
        self.resubmitted = 0
        self.requests = 0
        self.released = 0
        self.lost = 0
        self.source_free: list[Utxo] = []
        """Source coins not yet tried by a funding tx (refunds take from here)."""

    def hrp(self, address: Address) -> str:
        return encode_address(self.params.hrp, address)

    def secret_of(self, owner: int) -> bytes:
        return self.source_secret if owner < 0 else self.secrets[owner]

    def build(
        self,
        coins: Sequence[Coin],
        payments: list[tuple[Address, int]],
        change: int,
        fee: int,
        kind: str,
    ) -> SentTx:
        """Sign one tx and record it (before it is sent: it may be accepted whatever we hear)."""
        secret = self.secret_of(coins[0].owner)
        keys = self._keys.get(secret)
        if keys is None:  # one address derivation per account, not one per payment
            keys = self._keys[secret] = Keys.single(secret)
        tx = build_spend(self.params, keys, [c.utxo for c in coins], payments, change)
        now = time.monotonic()
        sent = SentTx(tx.txid, fee, kind, now, raw=tx.raw, inputs=tuple(coins), checked_at=now)
        sent.payments = tuple(payments)
        self.sent[tx.txid] = sent
        if self.tracker is not None:
            self.tracker.watched[tx.txid] = sent
        return sent

    def answered(self, sent: SentTx, status: int, code: str) -> None:
        """Record the node's answer to one tx: 202 accepted, else the status and error code."""
        sent.status = status
        if status == 202:
            sent.accepted = True
        else:
            self.rejected[f"{status}:{code}"] += 1

    async def submit(
        self,
        coins: Sequence[Coin],
        payments: list[tuple[Address, int]],
        change: int,
        fee: int,
        kind: str,
    ) -> SentTx:
        """Sign and POST one tx; record it whatever the answer (it may be accepted anyway)."""
        sent = self.build(coins, payments, change, fee, kind)
        await self.post(sent)
        return sent

    async def post(self, sent: SentTx) -> None:
        """``POST /v1/txs`` one built tx and record the answer (none: counted as an error)."""
        try:
            await self.client.submit_tx(sent.raw)
        except ApiError as exc:
            if exc.status == 0:
                self.errors += 1
            else:
                self.answered(sent, exc.status, exc.code)
            return
        self.answered(sent, 202, "")

    # -------------------------------------------------------------- tracking

    def unsettled(self) -> list[SentTx]:
        """Accepted txs not yet confirmed nor abandoned, oldest check first."""
        tracker = self.tracker
        rows = [
            s
            for s in self.sent.values()
            if s.accepted
            and not s.abandoned
            and not (tracker is not None and tracker.is_confirmed(s.txid))
        ]
        return sorted(rows, key=lambda s: s.checked_at)

    async def recheck(self) -> None:
        """One round: look up stale unconfirmed txs, resubmit or abandon them (module doc)."""
        now = time.monotonic()
        due = [s for s in self.unsettled() if now - s.checked_at >= RECHECK_AFTER_S]
        due = due[:RECHECK_BATCH]
        gate = asyncio.Semaphore(BLOCK_FETCHES)
        resubmitted: list[SentTx] = []
        abandoned: list[SentTx] = []

        async def one(sent: SentTx) -> None:
            async with gate:
                answer = await self.client.tx(sent.txid.hex())
                if answer.status in ("unknown", "invalid"):
                    # "invalid" names a copy in some block (a stale block's sortition, say);
                    # the tx itself may still confirm: rebroadcast it, as a wallet would
                    try:
                        await self.client.submit_tx(sent.raw)
                    except ApiError as exc:
                        if exc.status == 0:
                            raise
                        if exc.status == 503 or exc.code == "missing-input":
                            # pool full, or its parent is unconfirmed again (a reorganisation
                            # sent it back to the pool): ask again later
                            sent.checked_at = time.monotonic()
                            return
                        if (await self.client.tx(sent.txid.hex())).status == "confirmed":
                            sent.checked_at = time.monotonic()
                            return  # confirmed between the two calls
                        abandoned.append(sent)
                        return
                    sent.resubmits += 1
                    resubmitted.append(sent)
                sent.checked_at = time.monotonic()

        await asyncio.gather(*(one(s) for s in due))
        if resubmitted:
            self.resubmitted += len(resubmitted)
            self.progress(
                f"resubmitted {len(resubmitted)} txs the node no longer had (unknown, or "
                f"invalid copies), "
                f"e.g. {resubmitted[0].txid.hex()}"
            )
        for sent in abandoned:
            await self.abandon(sent)

    async def abandon(self, sent: SentTx) -> None:
        """``sent`` will never confirm: give its coin back, or fund its payments again."""
        sent.abandoned = True
        if sent.kind == "fund":
            return  # fund() sees it and builds a replacement (wait_confirmed)
        coin = sent.inputs[0]
        owner = self.hrp(self.addresses[coin.owner]) if coin.owner >= 0 else ""
        spendable = False
        if owner:
            _, _, utxos = await fetch_utxos(self.client, owner)
            spendable = coin.utxo.outpoint in {u.outpoint for u in utxos}
        if spendable:
            self.released += 1
            self.pool.append(coin)
            what = "its coin is unspent: released back to the pool"
        else:
            self.lost += 1
            what = "its coin is spent elsewhere: lost to the load"
        self.progress(f"tx {sent.txid.hex()} can no longer confirm; {what}")

    async def replace_fund_tx(self, sent: SentTx) -> SentTx:
        """A new funding tx paying what abandoned ``sent`` paid."""
        payments = list(sent.payments)
        if sent.inputs[0].owner < 0:
            new, self.source_free = await self.fund_tx(self.source_free, payments, sent.fee)
        else:  # stage B: its intermediate coin, if it is still there
            coin = sent.inputs[0]
            _, _, utxos = await fetch_utxos(self.client, self.hrp(self.addresses[coin.owner]))
            if coin.utxo.outpoint not in {u.outpoint for u in utxos}:
                raise WalletError(f"funding tx {sent.txid.hex()} lost its input coin")
            new = await self.submit([coin], payments, 0, sent.fee, "fund")
        if not new.accepted:
            raise WalletError(f"funding tx refused by the node: {dict(self.rejected)}")
        self.progress(
            f"funding tx {sent.txid.hex()} can no longer confirm: replaced by {new.txid.hex()}"
        )
        return new

    # -------------------------------------------------------------- funding

    async def fund(self, coins: int) -> None:
        stage_a, stage_b = fanout_plan(coins)
        self.funded_coins = coins
        amount, fee = self.config.utxo_amount, self.config.fee
        fund_fee = fee * 20
        inter_value = [n * amount + fund_fee for n in stage_b]
        _, _, utxos = await fetch_utxos(self.client, self.hrp(address_of(self.source_secret)))
        need = sum(inter_value) + fund_fee * len(stage_a)
        have = sum(u.amount for u in utxos)
        if have < need:
            raise WalletError(f"insufficient funds for this load: need {need} units, have {have}")
        self.progress(
            f"funding {coins} coins for {len(self.secrets)} accounts: "
            f"{len(stage_a)} + {len(stage_b)} txs"
        )
        self.source_free = list(utxos)
        a0 = self.addresses[0]
        pos = 0
        stage_a_txs: list[SentTx] = []
        for n in stage_a:
            values = inter_value[pos : pos + n]
            pos += n
            payments = [(a0, v) for v in values]
            sent, self.source_free = await self.fund_tx(self.source_free, payments, fund_fee)
            if not sent.accepted:
                raise WalletError(f"funding tx refused by the node: {dict(self.rejected)}")
            stage_a_txs.append(sent)
        await self.wait_confirmed(stage_a_txs, "stage A funding")
        intermediates = [
            Coin(Utxo(sent.txid, j, v), 0)
            for sent in stage_a_txs
            for j, (_, v) in enumerate(sent.payments)
        ]
        stage_b_txs: list[SentTx] = []
        dealt = 0
        for inter, n in zip(intermediates, stage_b, strict=True):
            owners = [(dealt + k) % len(self.secrets) for k in range(n)]
            dealt += n
            sent = await self.submit(
                [inter], [(self.addresses[o], amount) for o in owners], 0, fund_fee, "fund"
            )
            if not sent.accepted:
                raise WalletError(f"funding tx refused by the node: {dict(self.rejected)}")
            stage_b_txs.append(sent)
        await self.wait_confirmed(stage_b_txs, "stage B funding")
        owner_of = {a: o for o, a in enumerate(self.addresses)}
        for sent in stage_b_txs:
            self.pool.extend(
                Coin(Utxo(sent.txid, j, v), owner_of[a]) for j, (a, v) in enumerate(sent.payments)
            )

    async def fund_tx(
        self, free: list[Utxo], payments: list[tuple[Address, int]], fee: int
    ) -> tuple[SentTx, list[Utxo]]:
        """One stage-A tx from the source wallet's ``free`` coins; returns it and the coins left.

        The node's address answer lists confirmed coins, also those a pool tx already spends
        (an earlier ``send`` or another load still pending); such a coin gets 409 and is set
        aside, and the next coins are tried: at most one attempt per coin, then the
        ``insufficient funds`` error of :func:`select_coins`.
        """
        need = sum(amount for _, amount in payments) + fee
        for _ in range(len(free) + 1):
            chosen, change = select_coins(free, need, self.params.max_tx_inputs)
            chosen_set = {u.outpoint for u in chosen}
            free = [u for u in free if u.outpoint not in chosen_set]
            sent = await self.submit([Coin(u, -1) for u in chosen], payments, change, fee, "fund")
            if sent.accepted or sent.status != 409:
                return sent, free
        raise WalletError("every source coin is spent by pending txs")  # pragma: no cover

    async def wait_confirmed(self, txs: list[SentTx], what: str) -> None:
        """Wait until every tx of ``txs`` is confirmed; an abandoned one is replaced in place."""
        tracker = self.tracker
        if tracker is None:  # pragma: no cover - set before funding
            raise RuntimeError("no tracker")

        def done() -> bool:
            return all(tracker.is_confirmed(t.txid) for t in txs) or any(t.abandoned for t in txs)

        deadline = time.monotonic() + self.config.fund_timeout_s
        while await self.wait_for(done, deadline - time.monotonic()):
            stale = [i for i, t in enumerate(txs) if t.abandoned]
            if not stale:
                return
            for i in stale:
                txs[i] = await self.replace_fund_tx(txs[i])
        if not all(tracker.is_confirmed(t.txid) for t in txs):
            raise WalletError(
                f"{what}: txs not confirmed within {self.config.fund_timeout_s:.0f} s "
                "(is a miner running?)"
            )

    # -------------------------------------------------------------- sending

    def on_confirm(self, sent: SentTx) -> None:
        if sent.kind == "load" and sent.output is not None:
            self.pool.append(sent.output)

    def build_load(self, coin: Coin) -> SentTx:
        """A load tx spending ``coin`` to the next account (one input, one output)."""
        to = (coin.owner + 1) % len(self.secrets)
        value = coin.utxo.amount - self.config.fee
        sent = self.build([coin], [(self.addresses[to], value)], 0, self.config.fee, "load")
        sent.output = Coin(Utxo(sent.txid, 0, value), to)
        return sent

    def after_load(self, sent: SentTx) -> None:
        """What a load tx's answer means for the coin pool."""
        if not sent.accepted:
            if sent.status == 503:  # mempool full: the coin is unspent, use it again later
                self.pool.append(sent.inputs[0])
            return
        tracker = self.tracker
        if tracker is not None and tracker.is_confirmed(sent.txid) and sent.output is not None:
            self.pool.append(sent.output)  # confirmed before the answer arrived

    async def send_one(self, coin: Coin) -> None:
        sent = self.build_load(coin)
        self.requests += 1
        await self.post(sent)
        self.after_load(sent)

    async def send_batch(self, batch: list[SentTx]) -> None:
        """``POST /v1/txs/batch``: one answer per tx, as ``POST /v1/txs`` would give it."""
        self.requests += 1
        try:
            answer = await self.client.submit_tx_batch([s.raw for s in batch])
        except ApiError as exc:
            if exc.status == 0:  # no answer: any of them may be in the pool (tracking tells)
                self.errors += len(batch)
            else:
                for sent in batch:
                    self.answered(sent, exc.status, exc.code)
                    self.after_load(sent)
            return
        for sent, result in zip(batch, answer.results, strict=True):
            self.answered(sent, result.status, result.reason or "")
            self.after_load(sent)

    async def send_phase(self) -> tuple[int, int, float]:
        """Send at the configured rate; returns (attempts, starved slots, window seconds)."""
        cfg = self.config
        gate = asyncio.Semaphore(requests_in_flight(cfg.max_in_flight, cfg.batch))
        tasks: set[asyncio.Task[None]] = set()
        slots = math.ceil(cfg.rate * cfg.duration_s)
        attempts = starved = 0
        batch: list[SentTx] = []
        start = time.monotonic()
        deadline = start + cfg.duration_s
        next_progress = start + PROGRESS_INTERVAL_S
        for slot in range(slots):
            due = start + slot / cfg.rate
            now = time.monotonic()
            if now >= deadline:
                break
            if due > now:
                await asyncio.sleep(due - now)
            if now >= next_progress:
                next_progress += PROGRESS_INTERVAL_S
                self.progress(self.status_line(now - start, attempts))
            if not self.pool:
                starved += 1
                continue
            if cfg.batch > 1:  # a batch takes its place in flight when it leaves
                attempts += 1
                batch.append(self.build_load(self.pool.popleft()))
                if len(batch) >= cfg.batch or time.monotonic() - batch[0].sent_at >= BATCH_WAIT_S:
                    await self.flush(batch, gate, tasks)
                    batch = []
                continue
            try:
                await asyncio.wait_for(gate.acquire(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                break
            attempts += 1
            task = asyncio.create_task(self.send_one(self.pool.popleft()))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            task.add_done_callback(lambda _: gate.release())
        if batch:
            await self.flush(batch, gate, tasks)
        window = time.monotonic() - start
        if tasks:
            await asyncio.wait(tasks, timeout=30.0)
        return attempts, starved, window

    async def flush(
        self, batch: list[SentTx], gate: asyncio.Semaphore, tasks: set[asyncio.Task[None]]
    ) -> None:
        """Send ``batch`` as one request once a place in flight is free."""
        await gate.acquire()
        task = asyncio.create_task(self.send_batch(batch))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        task.add_done_callback(lambda _: gate.release())

    def status_line(self, elapsed: float, attempts: int) -> str:
        """``confirmed/offered`` load txs, and what tracking repaired so far."""
        tracker = self.tracker
        load = [s for s in self.sent.values() if s.kind == "load"]
        confirmed = sum(1 for s in load if tracker is not None and tracker.is_confirmed(s.txid))
        accepted = sum(1 for s in load if s.accepted)
        return (
            f"t={elapsed:.0f}s confirmed/offered={confirmed}/{attempts} accepted={accepted} "
            f"resubmitted={self.resubmitted} released={self.released} lost={self.lost} "
            f"coins={len(self.pool)}"
        )

    async def wait_phase(self) -> None:
        tracker = self.tracker
        if tracker is None:  # pragma: no cover
            return
        accepted = [s for s in self.sent.values() if s.accepted and s.kind == "load"]
        await self.wait_for(
            lambda: all(tracker.is_confirmed(s.txid) or s.abandoned for s in accepted),
            self.config.confirm_timeout_s,
        )

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Re-check ``predicate`` after each poll until it holds or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.polled.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.polled.wait(), min(left, 5 * POLL_INTERVAL_S))
        return True

    async def poll_forever(self) -> None:
        tracker = self.tracker
        if tracker is None:  # pragma: no cover
            return
        next_recheck = time.monotonic() + RECHECK_INTERVAL_S
        while not self.stop.is_set():
            try:
                await tracker.poll()
                if time.monotonic() >= next_recheck:
                    next_recheck = time.monotonic() + RECHECK_INTERVAL_S
                    await self.recheck()
            except (ApiError, WalletError) as exc:  # a busy or restarting node: next round
                self.poll_errors += 1
                if self.poll_errors % 20 == 1:
                    reason = api_error(exc) if isinstance(exc, ApiError) else exc
                    self.progress(f"confirmation poll failed: {reason}")
            self.polled.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), POLL_INTERVAL_S)

    def report(self, attempts: int, starved: int, window: float, first: float) -> LoadReport:
        tracker = self.tracker
        if tracker is None:  # pragma: no cover
            raise RuntimeError("no tracker")
        load = [s for s in self.sent.values() if s.kind == "load"]
        accepted = [s for s in load if s.accepted]
        confirmed = [s for s in accepted if tracker.is_confirmed(s.txid)]
        times = [tracker.confirmed_at[s.txid] for s in confirmed]
        load_incl = Counter(
            {s.txid: tracker.inclusions[s.txid] for s in load if tracker.inclusions[s.txid] > 0}
        )
        return LoadReport(
            network=self.params.network_id,
            source=self.hrp(address_of(self.source_secret)),
            accounts=[self.hrp(a) for a in self.addresses],
            funded_coins=self.funded_coins,
            send_window_s=window,
            attempts=attempts,
            starved=starved,
            accepted=len(accepted),
            rejected=self.rejected,
            errors=self.errors,
            confirmed=len(confirmed),
            exactly_once=sum(1 for s in confirmed if tracker.valid[s.txid] == 1),
            confirmed_window_s=max(window, (max(times) - first) if times else 0.0),
            latencies_s=[tracker.confirmed_at[s.txid] - s.sent_at for s in confirmed],
            duplicate_rate=duplicate_rate(load_incl),
            reorgs=tracker.reorgs,
            resubmitted=self.resubmitted,
            released=self.released,
            lost=self.lost,
            requests=self.requests,
            txs=list(self.sent.values()),
            valid_counts={t: tracker.valid[t] for t in self.sent},
            confirmed_at={s.txid: tracker.confirmed_at[s.txid] for s in confirmed},
        )


async def run_load(
    client: NodeApi,
    params: ConsensusParams,
    secret: bytes,
    config: LoadConfig,
    progress: Callable[[str], None] = lambda line: None,
) -> LoadReport:
    """Fund, send, wait and report (module docstring).

    Raises:
        WalletError: insufficient funds, unconfirmed funding, or an unreachable node.
    """
    run = _Run(client, params, secret, config, progress)
    try:
        status = await client.status()
    except ApiError as exc:
        raise api_error(exc) from None
    run.tracker = ConfirmationTracker(client, status.best_milestone.height, time.monotonic)
    run.tracker.on_confirm = run.on_confirm
    poller = asyncio.create_task(run.poll_forever())
    try:
        await run.fund(coins_needed(config.rate, config.duration_s, config.accounts))
        progress(f"funded; sending {config.rate:g} tx/s for {config.duration_s:g} s")
        first = time.monotonic()
        attempts, starved, window = await run.send_phase()
        progress(f"sent {attempts}; waiting up to {config.confirm_timeout_s:g} s for confirmations")
        await run.wait_phase()
    finally:
        run.stop.set()
        await asyncio.wait([poller], timeout=10.0)
        if not poller.done():
            poller.cancel()
    return run.report(attempts, starved, window, first)
