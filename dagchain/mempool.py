"""The in-memory transaction pool: admission, eviction, conflicts, templates (§7.5, §3.4).

Pure policy, no I/O. The caller (the Chain) runs the §7.5 checks that need the ledger (T1-T7, every
input unspent in the best chain, V7, V8) before ``Mempool.add`` and passes the fee it computed;
this module enforces the rest of §7.5: first seen wins on a pool conflict (no replacement in v1),
the bounds ``mempool_max_txs``, ``mempool_max_bytes`` and ``mempool_expiry``, and eviction once a tx
or a conflict of it is VALID in the best chain. ``Mempool.select_for_template`` picks the "other
txs" of a §3.4 block template: S1-S5 for the previous link, best fee per byte first.

Ordering never uses floats. A fee rate ``fee / size`` is turned into the integer key
``fee * M // size`` with ``M = 2**(2 * max_bytes.bit_length())``. Every admitted tx has
``size <= max_bytes < 2**b`` (b = that bit length), so two distinct rates differ by at least
``1 / (s1 * s2) > 1 / M`` and therefore never share a key, and the key order is the exact order
of the rationals. Each entry carries one integer ``order = (-rate_key << 64) | seq`` (``seq``, its
unique arrival number, is below ``2**64``), and one list of the entries sorted by it serves both
ends: its head is the template order (best rate, then earliest arrival) and its tail the
eviction order (lowest rate, then newest arrival). A pool holds per tx only the entry, that
integer, its slots in the list and the dict, and one dict slot per input (the keys are the tx's
own ``outpoints``; the pools of a simulator's run share that index, :class:`SharedSpenders`).
There is no expiry index: ``expire`` scans the pool when its earliest arrival may be due.

Eviction leaves a floor: after evicting, the pool refuses any tx whose rate is not strictly above
the highest evicted rate, so the free bytes left by a large victim are not refilled by cheaper
txs than the ones just thrown out (Bitcoin Core's rolling minimum fee, without the time decay).
The floor is lifted once confirmation, expiry or removal shrinks the pool to half of both caps.
"""

import sys
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import ClassVar, Literal, final

from dagchain.errors import DagchainError
from dagchain.params import ConsensusParams
from dagchain.sortition import SortitionWindow, assignment_bound, compute_sortition_distance
from dagchain.transactions import Transaction
from dagchain.types import TxId

__all__ = [
    "Mempool",
    "MempoolConflict",
    "MempoolDuplicate",
    "MempoolEntry",
    "MempoolError",
    "MempoolErrorCode",
    "MempoolFull",
    "Outpoint",
    "SharedSpenders",
]

Outpoint = tuple[bytes, int]
"""(txid, out_index) of a spent output; the same shape as ``dagchain.ledger.Outpoint``."""
MempoolErrorCode = Literal["conflict", "full", "duplicate"]

_SEQ_BITS = 64
"""``MempoolEntry.order`` is ``(-rate_key << _SEQ_BITS) | seq``: ascending is template order,
descending eviction order; ``seq`` is unique, so two entries never share it."""
_SEQ_MASK = (1 << _SEQ_BITS) - 1
_FIT_BYTES_PER_TX = 400
"""A pool's dicts are rebuilt after removals once their tables hold more than this many bytes
per entry left (a right-sized dict holds 30-60, a churning one up to about 120)."""
_FIT_FLOOR = 1 << 16
_ORDER = attrgetter("order")


def _arrival_order(entry: "MempoolEntry") -> tuple[int, int]:
    return entry.arrival_ms, entry.order & _SEQ_MASK


class MempoolError(DagchainError):
    """A tx the pool does not take (§7.5); the pool is unchanged. ``code`` names the cause."""

    code: ClassVar[MempoolErrorCode]

    def __init__(self, message: str, txid: TxId) -> None:
        super().__init__(f"{self.code}: {message}")
        self.message = message
        self.txid = txid


class MempoolDuplicate(MempoolError):
    """The tx is already in the pool."""

    code = "duplicate"


class MempoolConflict(MempoolError):
    """An input outpoint is already spent by a pool tx: first seen wins, no replacement (§7.5)."""

    code = "conflict"

    def __init__(self, message: str, txid: TxId, conflicting_txid: TxId) -> None:
        super().__init__(message, txid)
        self.conflicting_txid = conflicting_txid


class MempoolFull(MempoolError):
    """No room: the fee rate does not beat what would have to be evicted, or the tx is too big."""

    code = "full"


@dataclass(frozen=True, slots=True)
class MempoolEntry:
    """A pool tx with the fee the caller computed (V3), its byte size and arrival order.

    ``seq`` is read out of ``order``, so an entry holds one integer of its own beside the
    caller's (a simulator holds thousands of pools).
    """

    tx: Transaction
    fee: int
    size: int
    """``len(tx.raw)``: the canonical size the fee rate and the byte caps count."""
    arrival_ms: int
    order: int
    """``(-rate_key << 64) | seq``: the pool's sort key (module docstring)."""

    @property
    def seq(self) -> int:
        """Arrival sequence number, unique per pool: the tie-break of equal fee rates."""
        return self.order & _SEQ_MASK


@final
class SharedSpenders:
    """Which pooled txs spend an outpoint, one index for many pools of one process.

    A simulator's full nodes (``engine.share_results``) hold mostly the same txs: each pool's
    own outpoint -> spender dict repeats the same rows. Pools made with one ``SharedSpenders``
    register the txs they hold here instead (a count of pools per txid) and ask it for the
    candidates, keeping those they hold: since a pool holds at most one spender of an outpoint
    (first seen wins), what it finds is exactly what its own dict would hold. An entry lives
    while some pool holds its tx.
    """

    __slots__ = ("_by_outpoint", "_held")

    def __init__(self) -> None:
        self._by_outpoint: dict[Outpoint, TxId | list[TxId]] = {}
        self._held: dict[TxId, int] = {}

    def __len__(self) -> int:
        """How many distinct txs some pool holds."""
        return len(self._held)

    def candidates(self, outpoint: Outpoint) -> TxId | list[TxId] | None:
        """The txs some pool holds that spend ``outpoint``: one txid, several, or None."""
        return self._by_outpoint.get(outpoint)

    def add(self, tx: Transaction) -> None:
        """One more pool holds ``tx``."""
        held, txid = self._held, tx.txid
        count = held.get(txid)
        if count is not None:
            held[txid] = count + 1
            return
        held[txid] = 1
        by_outpoint = self._by_outpoint
        for outpoint in tx.outpoints:
            found = by_outpoint.get(outpoint)
            if found is None:
                by_outpoint[outpoint] = txid
            elif isinstance(found, list):
                found.append(txid)
            else:
                by_outpoint[outpoint] = [found, txid]

    def discard(self, tx: Transaction) -> None:
        """One pool fewer holds ``tx`` (which it held)."""
        held, txid = self._held, tx.txid
        count = held[txid] - 1
        if count:
            held[txid] = count
            return
        del held[txid]
        by_outpoint = self._by_outpoint
        for outpoint in tx.outpoints:
            found = by_outpoint[outpoint]
            if type(found) is not list:
                del by_outpoint[outpoint]
            else:
                found.remove(txid)
                if len(found) == 1:
                    by_outpoint[outpoint] = found[0]


@final
class Mempool:
    """Unconfirmed TRANSFERs waiting for a block (§7.5 bounds, §3.4 selection).

    Args:
        params: Network parameters; supply the default caps and expiry.
        max_txs: Cap on the number of txs (default ``params.mempool_max_txs``).
        max_bytes: Cap on the sum of ``len(tx.raw)`` (default ``params.mempool_max_bytes``).
        expiry_ms: A tx older than this is dropped by ``expire`` (default
            ``params.mempool_expiry_ms``).
        spenders: Index the outpoints this pool's txs spend in this shared index instead of a
            dict of its own (the same answers; see :class:`SharedSpenders`).

    Raises:
        ValueError: a negative cap or expiry.
    """

    def __init__(
        self,
        params: ConsensusParams,
        max_txs: int | None = None,
        max_bytes: int | None = None,
        expiry_ms: int | None = None,
        spenders: SharedSpenders | None = None,
    ) -> None:
        self.params = params
        self.max_txs = params.mempool_max_txs if max_txs is None else max_txs
        self.max_bytes = params.mempool_max_bytes if max_bytes is None else max_bytes
        self.expiry_ms = params.mempool_expiry_ms if expiry_ms is None else expiry_ms
        if min(self.max_txs, self.max_bytes, self.expiry_ms) < 0:
            raise ValueError("mempool caps and expiry must not be negative")
        self._rate_scale = 1 << (2 * self.max_bytes.bit_length())
        self._entries: dict[TxId, MempoolEntry] = {}
        self._order: list[MempoolEntry] | None = None
        """Every entry, sorted by ``order``; built on first use (:meth:`_sorted`: a template,
        an eviction, a listing) and kept sorted from then on. A pool nobody reads in fee order
        (a node that does not mine, while its pool has room: most of a simulator's full nodes)
        never pays for the sorted insert."""
        self._spenders: dict[Outpoint, TxId] = {}
        """Outpoint -> the pool tx spending it (empty with a shared index)."""
        self._shared = spenders
        self._oldest_ms: int | None = None
        """At most the earliest arrival in the pool (None: empty since the last scan): ``expire``
        scans the pool only once this is old enough, so its usual call costs nothing and the
        pool keeps no expiry index (no heap slot, no stale entries per tx)."""
        self._total_bytes = 0
        self._next_seq = 0
        self._floor: tuple[int, int, int] | None = None  # (rate_key, fee, size) of an evicted tx

    # ------------------------------------------------------------------ queries

    def __contains__(self, txid: object) -> bool:
        return txid in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, txid: bytes) -> MempoolEntry | None:
        """The entry of ``txid``, if it is in the pool."""
        return self._entries.get(TxId(txid))

    @property
    def total_bytes(self) -> int:
        """Sum of ``len(tx.raw)`` over the pool."""
        return self._total_bytes

    @property
    def min_fee_rate(self) -> tuple[int, int] | None:
        """``(fee, size)`` of the eviction floor: a new tx needs a strictly higher fee per byte.

        None when no eviction floor is in force (the pool still refuses a tx that would need
        to evict a tx of an equal or higher rate).
        """
        return None if self._floor is None else (self._floor[1], self._floor[2])

    def spender_of(self, outpoint: Outpoint) -> TxId | None:
        """The pool tx that spends ``outpoint``, if any."""
        if self._shared is None:
            return self._spenders.get(outpoint)
        found = self._shared.candidates(outpoint)
        if found is None:
            return None
        if type(found) is not list:
            return found if found in self._entries else None
        entries = self._entries
        for txid in found:
            if txid in entries:
                return txid
        return None

    def conflicts_with(self, outpoints: Iterable[Outpoint]) -> TxId | None:
        """The pool tx spending the first of ``outpoints`` that a pool tx spends, if any."""
        if self._shared is None:
            find = self._spenders.get
            for outpoint in outpoints:
                spender = find(outpoint)
                if spender is not None:
                    return spender
            return None
        candidates, entries = self._shared.candidates, self._entries
        for outpoint in outpoints:  # spender_of, inlined: most outpoints have no candidate
            found = candidates(outpoint)
            if found is None:
                continue
            if type(found) is not list:
                if found in entries:
                    return found
                continue
            for txid in found:
                if txid in entries:
                    return txid
        return None

    def txids_by_fee_rate(self, limit: int | None = None) -> list[TxId]:
        """Pool txids, best fee per byte first (ties: earlier arrival, then txid)."""
        order = self._sorted()
        entries = order if limit is None else order[: max(0, limit)]
        return [entry.tx.txid for entry in entries]

    # ------------------------------------------------------------------ admission

    def add(self, tx: Transaction, fee: int, now_ms: int) -> list[TxId]:
        """Admit a tx the caller has checked against the best chain (§7.5).

        Evicts the lowest fee rates (ties: newest arrival first), only as many as needed to
        respect ``max_txs`` and ``max_bytes``, and only txs of a strictly lower rate.

        Args:
            tx: A TRANSFER that passed T1-T7, the best-chain UTXO check, V7 and V8.
            fee: Its fee, Σ inputs - Σ outputs (V3); at least 0.
            now_ms: Arrival time, for ``expire``.

        Returns:
            The txids evicted to make room, lowest fee rate first.

        Raises:
            MempoolDuplicate: the tx is already in the pool.
            MempoolConflict: an input outpoint is spent by a pool tx (first seen wins).
            MempoolFull: the tx is larger than ``max_bytes``, its fee rate is not above the
                eviction floor, or making room would evict a tx of an equal or higher rate.
            ValueError: a negative fee.
        """
        if tx.txid in self._entries:
            raise MempoolDuplicate("transaction already in the mempool", tx.txid)
        conflict = self.conflicts_with(tx.outpoints)
        if conflict is not None:
            raise MempoolConflict(
                f"an input is already spent by mempool tx {conflict.hex()}", tx.txid, conflict
            )
        if fee < 0:
            raise ValueError("a fee cannot be negative")
        size = len(tx.raw)
        rate_key = self._rate_key(fee, size)
        victims = self._victims_for(tx.txid, size, rate_key)
        for victim in victims:
            self._raise_floor(self._entries[victim])
            self._remove_entry(victim)
        seq = self._next_seq
        self._insert(MempoolEntry(tx, fee, size, now_ms, (-rate_key << _SEQ_BITS) | seq))
        self._next_seq = seq + 1
        return victims

    def check_room(self, tx: Transaction, fee: int) -> None:
        """Would :meth:`add` find room for ``tx`` at ``fee``? Nothing changes either way.

        The admission path asks before the signature check (docs/protocol.md decision 41): a
        full pool refuses a tx without the costliest check, as Bitcoin Core's mempool checks
        its minimum fee rate before scripts.

        Raises:
            MempoolFull: as :meth:`add` would (too big, not above the eviction floor, or it
                would have to evict a tx of an equal or higher rate).
        """
        if fee >= 0:
            size = len(tx.raw)
            self._victims_for(tx.txid, size, self._rate_key(fee, size))

    def _rate_key(self, fee: int, size: int) -> int:
        # Exact for size <= max_bytes (module docstring); larger txs are refused before use.
        return fee * self._rate_scale // max(1, size)

    def _victims_for(self, txid: TxId, size: int, rate_key: int) -> list[TxId]:
        """The txs to evict so that a tx of this size and rate fits; raises MempoolFull."""
        if size > self.max_bytes or self.max_txs == 0:
            raise MempoolFull(f"a {size}-byte tx never fits this mempool", txid)
        if self._floor is not None and rate_key <= self._floor[0]:
            raise MempoolFull("fee rate not above the mempool's eviction floor", txid)
        excess_bytes = self._total_bytes + size - self.max_bytes
        excess_txs = len(self._entries) + 1 - self.max_txs
        victims: list[TxId] = []
        if excess_bytes <= 0 and excess_txs <= 0:
            return victims  # room enough: the fee order is not needed
        order = self._sorted()
        position = len(order)
        while excess_bytes > 0 or excess_txs > 0:
            position -= 1
            entry = order[position]
            if -(entry.order >> _SEQ_BITS) >= rate_key:
                raise MempoolFull("fee rate not above the lowest it would have to evict", txid)
            victims.append(entry.tx.txid)
            excess_bytes -= entry.size
            excess_txs -= 1
        return victims

    def _sorted(self) -> list[MempoolEntry]:
        """Every entry by ``order`` (best fee rate first), sorting the pool on first use."""
        order = self._order
        if order is None:
            order = self._order = sorted(self._entries.values(), key=_ORDER)
        return order

    def _raise_floor(self, entry: MempoolEntry) -> None:
        rate_key = self._rate_key(entry.fee, entry.size)
        if self._floor is None or rate_key > self._floor[0]:
            self._floor = (rate_key, entry.fee, entry.size)

    def _insert(self, entry: MempoolEntry) -> None:
        txid = entry.tx.txid
        self._entries[txid] = entry
        if self._order is not None:
            insort(self._order, entry, key=_ORDER)
        if self._shared is None:
            spenders = self._spenders
            for outpoint in entry.tx.outpoints:
                spenders[outpoint] = txid
        else:
            self._shared.add(entry.tx)
        oldest = self._oldest_ms
        if oldest is None or entry.arrival_ms < oldest:
            self._oldest_ms = entry.arrival_ms
        self._total_bytes += entry.size

    # ------------------------------------------------------------------ removal

    def remove(self, txid: bytes) -> bool:
        """Drop a tx (e.g. it sits in a newly accepted block, §3.4); False if it was absent."""
        if TxId(txid) not in self._entries:
            return False
        self._remove_entry(TxId(txid))
        self._after_shrink()
        return True

    def remove_where(self, doomed: Callable[[Transaction], bool]) -> list[Transaction]:
        """Drop every pool tx for which ``doomed`` holds; returns them best fee rate first.

        The pool is left as removing them one by one in the order of :meth:`txids_by_fee_rate`
        would leave it. Only the dropped txs are sorted: a pool that nobody reads in fee order
        stays unsorted.
        """
        gone = sorted((entry for entry in self._entries.values() if doomed(entry.tx)), key=_ORDER)
        for entry in gone:
            self._remove_entry(entry.tx.txid)
        if gone:
            self._after_shrink()
        return [entry.tx for entry in gone]

    def clear(self) -> None:
        """Drop every tx and start afresh, as a new pool (a restarted process: §12 keeps none)."""
        if self._shared is not None:
            for entry in self._entries.values():
                self._shared.discard(entry.tx)
        self._entries = {}
        self._order = None
        self._spenders = {}
        self._total_bytes = 0
        self._next_seq = 0
        self._floor = None
        self._oldest_ms = None

    def remove_confirmed(self, txs: Iterable[Transaction]) -> list[TxId]:
        """Evict txs that became VALID in the best chain and every pool tx conflicting with them.

        §7.5: "evict a tx once it or a conflict is VALID". A conflict is a pool tx spending an
        outpoint that a confirmed tx spends.

        Returns:
            The removed txids, in the order of ``txs`` (each tx, then its conflicts in input order).
        """
        removed: list[TxId] = []
        find = self._spenders.get if self._shared is None else self.spender_of
        for tx in txs:
            if tx.txid in self._entries:
                self._remove_entry(tx.txid)
                removed.append(tx.txid)
            for outpoint in tx.outpoints:
                spender = find(outpoint)
                if spender is not None:
                    self._remove_entry(spender)
                    removed.append(spender)
        self._after_shrink()
        return removed

    def expire(self, now_ms: int) -> list[TxId]:
        """Drop txs older than ``expiry_ms`` (``now_ms - arrival_ms > expiry_ms``), oldest first.

        Ties go in admission order. One pass over the pool when its earliest arrival may have
        expired, else nothing (the daemon calls it every few seconds; 50,000 txs take a few
        milliseconds to scan).
        """
        oldest = self._oldest_ms
        if oldest is None or now_ms - oldest <= self.expiry_ms:
            return []
        old: list[MempoolEntry] = []
        earliest: int | None = None
        for entry in self._entries.values():
            arrival = entry.arrival_ms
            if now_ms - arrival > self.expiry_ms:
                old.append(entry)
            elif earliest is None or arrival < earliest:
                earliest = arrival
        self._oldest_ms = earliest
        old.sort(key=_arrival_order)
        expired = [entry.tx.txid for entry in old]
        for txid in expired:
            self._remove_entry(txid)
        self._after_shrink()
        return expired

    def _remove_entry(self, txid: TxId) -> None:
        entry = self._entries.pop(txid)
        if self._order is not None:
            del self._order[bisect_left(self._order, entry.order, key=_ORDER)]
        if self._shared is None:
            for outpoint in entry.tx.outpoints:
                del self._spenders[outpoint]
        else:
            self._shared.discard(entry.tx)
        self._total_bytes -= entry.size

    def _after_shrink(self) -> None:
        """Lift the eviction floor once the pool is down to half of both caps."""
        if 2 * self._total_bytes <= self.max_bytes and 2 * len(self._entries) <= self.max_txs:
            self._floor = None
        # A dict never shrinks on deletes: after a block took most of the pool, the tables
        # sized for the peak would stay. Rebuild them when they hold far more than they need.
        if sys.getsizeof(self._entries) > _FIT_BYTES_PER_TX * len(self._entries) + _FIT_FLOOR:
            self._entries = dict(self._entries)
        if sys.getsizeof(self._spenders) > _FIT_BYTES_PER_TX * len(self._spenders) + _FIT_FLOOR:
            self._spenders = dict(self._spenders)

    # ------------------------------------------------------------------ templates

    def select_for_template(
        self,
        previous_link: bytes,
        window: SortitionWindow,
        hash_rate: int,
        max_txs: int,
        max_bytes: int,
        skip: Callable[[TxId], bool] | None = None,
    ) -> list[Transaction]:
        """The "other txs" of a §3.4 block template for one peer chain.

        Walks the pool best fee per byte first (ties: earlier arrival, then txid) and takes
        each tx that passes S1-S5 (§8.1) for ``previous_link``, fits the remaining byte budget
        and is not skipped, until ``max_txs`` txs are taken or no bytes are left. A tx too big
        for what is left is passed over, so a smaller one further down may still fit. No two
        chosen txs spend one outpoint. The result depends only on the pool and the arguments.

        Args:
            previous_link: The template's previous link (S4 draws a fresh distance per link).
            window: The S2 values of the block being built (peer height, W, S).
            hash_rate: Hr of the milestone link (S3).
            max_txs: At most this many txs (``block_capacity`` - 1 leaves room for tx[0]).
            max_bytes: Sum of ``len(tx.raw)`` at most this (``max_block_bytes`` - 512 in §3.4).
            skip: Passes over a txid for which it returns True (a tx already in a pending
                block, §3.4).

        Returns:
            The chosen txs in the order they were picked (best fee rate first).
        """
        chosen: list[Transaction] = []
        if max_txs <= 0 or max_bytes <= 0:
            return chosen
        spent: set[Outpoint] = set()
        budget = max_bytes
        factor, bound = assignment_bound(window, hash_rate, self.params)
        if bound <= 0:
            return chosen  # S1 (warm-up) or a bound no distance is below: nothing is assigned
        distance = compute_sortition_distance
        for entry in self._sorted():
            size = entry.size
            tx = entry.tx
            txid = tx.txid
            if size > budget or (skip is not None and skip(txid)):
                continue
            # is_tx_assigned, its per-block part computed once (as its docstring advises)
            if factor and distance(previous_link, txid) * factor >= bound:
                continue
            outpoints = tx.outpoints
            if not spent.isdisjoint(outpoints):
                continue
            spent.update(outpoints)
            chosen.append(tx)
            budget -= size
            if len(chosen) >= max_txs or budget <= 0:
                break
        return chosen
