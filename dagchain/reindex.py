"""Rebuild indexes and ledger from the stored blocks alone, and compare (PROTOCOL.md §12).

``reindex(params, store)`` feeds every stored block (``b`` rows) to a fresh :class:`Chain` on a
scratch store, in the order the node accepted them (the arrival sequence of the ``m`` row: F2
keeps the first-seen milestone on equal chainwork, so arrival is an explicit input, STYLE.md rule
8), applies the operator's invalidation marks, and compares every row of the rebuilt store with
the stored one. Everything else (metas, snapshots, peer heads, tx index, level sets, deltas, UTXOs,
spent outputs, roots, redemptions, LS heights, the best chain and the head record) is derived.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field

from dagchain.chain import Chain
from dagchain.errors import DagchainError, StorageError
from dagchain.params import ConsensusParams
from dagchain.storage import KVStore
from dagchain.storage import schema as S
from dagchain.storage.memory import MemoryStore
from dagchain.types import BlockId

REPLAY_NOW_MS = 2**62
"""The replay clock: after every stored timestamp, so H11 never parks a stored block."""


@dataclass(slots=True)
class PrefixDifference:
    """Rows of one key prefix that differ: counts and the first key of each kind."""

    missing: int = 0
    """Stored, but not produced by the rebuild."""
    extra: int = 0
    """Produced by the rebuild, but not stored."""
    changed: int = 0
    examples: list[bytes] = field(default_factory=list)


@dataclass(slots=True)
class ReindexReport:
    """The outcome of :func:`reindex`."""

    blocks: int
    """Stored blocks replayed (genesis excluded)."""
    rejected: list[tuple[BlockId, str]] = field(default_factory=list)
    """Stored blocks the rebuild did not accept, with the reason."""
    differences: dict[bytes, PrefixDifference] = field(default_factory=dict)
    """By key prefix (first byte; ``\\x00`` for the metadata rows)."""

    @property
    def ok(self) -> bool:
        """True if the rebuild accepted every block and produced exactly the stored rows."""
        return not self.rejected and not self.differences

    def summary(self) -> str:
        """One line per differing prefix (empty if ``ok``)."""
        lines = [f"block {b.hex()} rejected on replay: {why}" for b, why in self.rejected]
        for prefix, d in sorted(self.differences.items()):
            first = ", ".join(f"{k[:1]!r}{k[1:].hex()}" for k in d.examples[:3])
            lines.append(
                f"prefix {prefix!r}: {d.missing} missing, {d.extra} extra, "
                f"{d.changed} changed (e.g. {first})"
            )
        return "\n".join(lines)


def reindex(
    params: ConsensusParams, store: KVStore, scratch: KVStore | None = None
) -> ReindexReport:
    """Replay the stored blocks into ``scratch`` (a new MemoryStore by default) and compare.

    ``store`` is only read.

    Raises:
        StorageError: a stored row cannot be decoded, or the node pruned block bodies.
    """
    pruned = store.get(S.META_PRUNE)
    if pruned is not None:
        below = S.decode_row(pruned, S.META_PRUNE)[1]
        raise StorageError(
            f"cannot reindex a pruned node: block bodies below milestone height {below} were "
            "deleted (--prune-depth); resync into a new data directory instead"
        )
    rebuilt_store = scratch if scratch is not None else MemoryStore()
    rebuilt = Chain(params, rebuilt_store)
    report = ReindexReport(0)
    for bid in _arrival_order(store, rebuilt.genesis_id):
        raw = store.get(S.P_BLOCK + bid)
        if raw is None:
            report.rejected.append((bid, "m row without a stored block"))
            continue
        report.blocks += 1
        try:
            rebuilt.on_block(raw, REPLAY_NOW_MS)
        except DagchainError as exc:
            report.rejected.append((bid, str(exc)))
            continue
        if not rebuilt.has_block(bid):
            report.rejected.append((bid, "not accepted (orphan: a link is not stored)"))
    for key, _ in store.iter_prefix(S.P_INVALIDATED):
        rebuilt.invalidate(key[1:])
    report.differences = compare_stores(store, rebuilt_store)
    return report


def _arrival_order(store: KVStore, genesis: BlockId) -> list[BlockId]:
    order = []
    for key, value in store.iter_prefix(S.P_META):
        bid = BlockId(key[1:])
        if bid != genesis:
            order.append((S.decode_row(value, key)[0], bid))
    order.sort()
    return [bid for _, bid in order]


def compare_stores(a: KVStore, b: KVStore) -> dict[bytes, PrefixDifference]:
    """Rows of ``a`` missing from ``b``, extra in ``b``, or different, by prefix (one merge)."""
    diffs: dict[bytes, PrefixDifference] = {}

    def note(key: bytes, kind: str) -> None:
        d = diffs.setdefault(key[:1], PrefixDifference())
        setattr(d, kind, getattr(d, kind) + 1)
        if len(d.examples) < 3:
            d.examples.append(key)

    ita, itb = _rows(a), _rows(b)
    ra, rb = next(ita, None), next(itb, None)
    while ra is not None or rb is not None:
        if rb is None or (ra is not None and ra[0] < rb[0]):
            note(ra[0], "missing")  # type: ignore[index]
            ra = next(ita, None)
        elif ra is None or rb[0] < ra[0]:
            note(rb[0], "extra")
            rb = next(itb, None)
        else:
            if ra[1] != rb[1]:
                note(ra[0], "changed")
            ra, rb = next(ita, None), next(itb, None)
    return diffs


def _rows(store: KVStore) -> Iterator[tuple[bytes, bytes]]:
    yield from store.iter_prefix(b"")


__all__ = ["PrefixDifference", "ReindexReport", "compare_stores", "reindex"]
