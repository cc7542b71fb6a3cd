"""Run metrics: what happened (recorded during the run) and what the observer's chain says.

The recorder notes when each block was mined and accepted at each node, when each tx was offered
and when the observer (node 0) first saw it VALID in a best-chain level set. ``compute_metrics``
then reads the observer's final best chain through the core's own views (level sets, verdicts,
reward balances) and produces every ``metrics.json`` key of INTERFACES.md:

- ``throughput_tps``: unique txs VALID in the observer's best chain per simulated second;
  ``throughput_tps_second_half`` / ``offered_tps_second_half``: the same for txs first confirmed /
  offered in the second half of the run (steady state, after the warm-ups);
- ``duplicate_tx_rate``: tx inclusions in best-chain level sets that repeat an earlier txid, over
  all inclusions (C1; the later copy is INVALID ``double-spend``);
- ``stale_milestone_rate``: milestone blocks mined that are not on the final best chain;
- ``confirmation_latency_s``: offer to first VALID inclusion in the observer's best chain (one
  confirmation, F7); ``confirmation_latency_s_second_half``: the same over the txs first
  confirmed in the second half (the steady state's latency, a growing backlog's wait included);
  ``mempool_wait_s``: offer to the mining of the block holding the VALID copy;
- ``propagation_s``: block mined (or released, for a withholding attacker's block) to block
  accepted, pooled over every (block, other node) pair;
- ``revenue_share``: each peer chain's reward balance on the observer's best chain over the sum
  (R2, R7: block rewards, fees, milestone bonuses);
- ``late_block_rate`` / ``unrewarded_block_rate`` (v2): the share of the observer's accepted
  blocks whose ordering lag, LS height(B) - height(milestone link of B), exceeds
  ``sortition_freshness`` (S6: their txs are INVALID ``sortition``) / ``reward_freshness`` (R2:
  no R(h)). A block still unordered at the end counts as late once its lag is already certain to
  exceed the bound (best height + 1 - milestone-link height > bound); a pending block that could
  still be ordered in time is undecided and left out of both counts
  (``late_blocks_undecided``: how many);
- ``txs_lost`` (v2, §7.5): offered txs neither VALID in the observer's best chain nor in any full
  node's mempool at the end (its waiting set, decision 37, counts as its mempool);
- ``attacker_fee_share`` (with an attacker's roots): fees of the VALID txs in its blocks over the
  fees of all VALID txs of the best chain (fee = inputs spent - outputs, from the level sets).
Percentiles are nearest-rank on sorted values, so equal runs give equal bytes.
"""

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, final

from dagchain.blocks import Block
from dagchain.chain import Chain
from dagchain.errors import Reason
from dagchain.ledger import LevelSetDelta
from dagchain.transactions import Transaction, TxKind
from dagchain.types import BlockId

DIGITS = 6


@dataclass(slots=True)
class BlockRecord:
    """One mined block: who, when, what, and its arrival delays at the other nodes (s)."""

    miner: int
    created_ms: float
    is_milestone: bool
    txs: int
    size: int
    delays: array = field(default_factory=lambda: array("f"))  # type: ignore[type-arg]
    sent_ms: float = 0.0
    """When the block left its miner (``created_ms``, or a withholding attacker's release)."""


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted ``values`` (0.0 when empty)."""
    if not values:
        return 0.0
    rank = max(1, math.ceil(q * len(values)))
    return values[rank - 1]


def summary(values: list[float], qs: tuple[float, ...] = (0.5, 0.9, 0.99)) -> dict[str, float]:
    ordered = sorted(values)
    return {f"p{round(q * 100)}": round(percentile(ordered, q), DIGITS) for q in qs}


@final
class Recorder:
    """Event sink of the run (mined blocks, acceptances, offered and confirmed txs)."""

    def __init__(self) -> None:
        self.blocks: dict[bytes, BlockRecord] = {}
        self.tx_offered_ms: dict[bytes, float] = {}
        self.tx_confirmed_ms: dict[bytes, float] = {}
        self.arrivals: dict[tuple[bytes, int], float] | None = None
        """Set to a dict to keep every (block, node) acceptance time in engine ms, the miner's
        own included (bench/ring_compare.py: per-node delays); off in runs."""

    def on_mined(self, miner: int, block: Block, now_ms: float, is_milestone: bool) -> None:
        """A miner solved ``block``; its own node's core said whether it is a milestone."""
        self.blocks[block.id] = BlockRecord(
            miner, now_ms, is_milestone, len(block.txs), len(block.raw), sent_ms=now_ms
        )

    def on_offered(self, tx: Transaction, now_ms: float) -> None:
        self.tx_offered_ms[tx.txid] = now_ms

    def on_accepted(self, node: int, accepted: tuple[BlockId, ...], now_ms: float) -> None:
        """Node ``node`` accepted these blocks now (propagation delays)."""
        blocks = self.blocks
        arrivals = self.arrivals
        if arrivals is not None:
            for bid in accepted:
                arrivals[(bid, node)] = now_ms
        for bid in accepted:
            rec = blocks.get(bid)
            if rec is not None and node != rec.miner:
                rec.delays.append((now_ms - rec.sent_ms) / 1000.0)

    def on_level_set(self, chain: Chain, delta: LevelSetDelta, now_ms: float) -> None:
        """The observer applied a level set: note first VALID confirmations."""
        confirmed = self.tx_confirmed_ms
        for tx, reason in chain.level_set_txs(delta):
            if reason == Reason.VALID and tx.txid not in confirmed:
                confirmed[tx.txid] = now_ms


@dataclass(slots=True)
class _Walk:
    sizes: list[int] = field(default_factory=list)
    inclusions: int = 0
    repeats: int = 0
    valid_in: dict[bytes, bytes] = field(default_factory=dict)
    """txid -> block of its VALID copy."""
    fees_by_root: dict[bytes, int] = field(default_factory=dict)
    """Fees of the VALID TRANSFERs in each peer chain's blocks."""


def _walk_best_chain(chain: Chain) -> _Walk:
    """Level-set sizes, tx inclusions and repeats, VALID copies and fees per peer chain."""
    walk = _Walk()
    sizes = walk.sizes
    inclusions = repeats = 0
    seen: set[bytes] = set()
    valid_in = walk.valid_in
    fees = walk.fees_by_root
    for ms in chain.best_chain()[1:]:
        delta = chain.level_set(ms)
        if delta is None:  # pragma: no cover - best-chain milestones are evaluated
            raise RuntimeError("best-chain milestone without a level set")
        sizes.append(len(delta.order))
        i = 0
        for bid in delta.order:
            block = chain.get_block(bid)
            meta = chain.get_meta(bid)
            if block is None or meta is None:  # pragma: no cover
                raise RuntimeError("level-set block missing")
            for tx in block.txs:
                if tx.kind == TxKind.TRANSFER:
                    inclusions += 1
                    if tx.txid in seen:
                        repeats += 1
                    seen.add(tx.txid)
                    if delta.reasons[i] == Reason.VALID:
                        valid_in[tx.txid] = bid
                        spent = delta.spent
                        fee = sum(spent[(t.txid, t.out_index)][0] for t in tx.inputs)
                        fee -= sum(o.amount for o in tx.outputs)
                        fees[meta.root] = fees.get(meta.root, 0) + fee
                i += 1
    walk.inclusions = inclusions
    walk.repeats = repeats
    return walk


def freshness(recorder: Recorder, observer: Chain) -> dict[str, Any]:
    """``late_block_rate``, ``unrewarded_block_rate`` and the counts behind them (v2, §14).

    Over every mined block the observer accepted (genesis aside): ordered blocks by their lag,
    pending blocks as late once no level set can order them within the bound.
    """
    params = observer.params
    bounds = (params.sortition_freshness, params.reward_freshness)
    next_height = observer.best_height + 1
    counted = [0, 0]
    late = [0, 0]
    undecided = 0
    for bid in recorder.blocks:
        meta = observer.get_meta(bid)
        if meta is None:
            continue
        ls = observer.ls_height(bid)
        for j, bound in enumerate(bounds):
            if ls is not None:
                counted[j] += 1
                late[j] += ls - meta.ms_link_height > bound
            elif next_height - meta.ms_link_height > bound:
                counted[j] += 1
                late[j] += 1
            elif j == 0:
                undecided += 1

    def rate(j: int) -> float:
        return round(late[j] / counted[j], DIGITS) if counted[j] else 0.0

    return {
        "late_block_rate": rate(0),
        "unrewarded_block_rate": rate(1),
        "late_blocks": late[0],
        "unrewarded_blocks": late[1],
        "late_blocks_undecided": undecided,
    }


def compute_metrics(
    recorder: Recorder,
    observer: Chain,
    duration_s: float,
    roots: dict[bytes, str],
    pooled: set[bytes] | None = None,
    spread: Callable[[bytes], int] | None = None,
) -> dict[str, Any]:
    """Every metrics.json key of INTERFACES.md except the wall-clock ones (added by the caller).

    ``pooled``: the txids in any full node's mempool at the end (for ``txs_lost``); ``spread``:
    how many nodes ever learned a tx (``txs_lost_refused_on_offer``: lost txs that no node but
    the one the load offered it to ever saw, i.e. that node refused it, e.g. because its best
    chain did not yet hold the output the load spent).
    """
    walk = _walk_best_chain(observer)
    sizes, inclusions, repeats, valid_in = walk.sizes, walk.inclusions, walk.repeats, walk.valid_in
    blocks = recorder.blocks
    best = set(observer.best_chain())
    mined_ms = [bid for bid, rec in blocks.items() if rec.is_milestone]
    stale = sum(1 for bid in mined_ms if bid not in best)
    offered = recorder.tx_offered_ms
    confirmed = recorder.tx_confirmed_ms
    ours = [t for t in valid_in if t in offered]
    latency = [(confirmed[t] - offered[t]) / 1000.0 for t in ours if t in confirmed]
    wait = [
        (blocks[valid_in[t]].created_ms - offered[t]) / 1000.0
        for t in ours
        if valid_in[t] in blocks
    ]
    # Steady state (the ``*_second_half`` metrics of docs/simulator.md): the second half of the
    # run, after the warm-ups (S1, Hr, the load's faucet fan-out); confirmations after the end
    # (the drain) count, offers do not.
    half_ms = duration_s * 500.0
    late_latency = [
        (confirmed[t] - offered[t]) / 1000.0 for t in ours if confirmed.get(t, -1.0) >= half_ms
    ]
    late_confirmed = len(late_latency)
    late_offered = sum(1 for at in offered.values() if at >= half_ms)
    delays: list[float] = []
    for rec in blocks.values():
        delays.extend(rec.delays)
    balances = dict.fromkeys(sorted(set(roots.values())), 0)
    for root, record in observer.roots().items():
        label = roots.get(root, "other")
        balances[label] = balances.get(label, 0) + record.balance
    total = sum(balances.values())
    revenue = {k: round(v / total, DIGITS) if total else 0.0 for k, v in sorted(balances.items())}
    pool = pooled if pooled is not None else set()
    lost_txs = [t for t in offered if t not in valid_in and t not in pool]
    lost = len(lost_txs)
    refused = sum(1 for t in lost_txs if spread(t) <= 1) if spread is not None else 0
    fees = walk.fees_by_root
    extra: dict[str, Any] = {}
    if "attacker" in roots.values():
        total_fees = sum(fees.values())
        attacker_fees = sum(f for r, f in fees.items() if roots.get(r) == "attacker")
        extra["attacker_fee_share"] = (
            round(attacker_fees / total_fees, DIGITS) if total_fees else 0.0
        )
    return {
        "offered_tps": round(len(offered) / duration_s, DIGITS),
        "throughput_tps": round(len(ours) / duration_s, DIGITS),
        "offered_tps_second_half": round(late_offered / (duration_s / 2), DIGITS),
        "throughput_tps_second_half": round(late_confirmed / (duration_s / 2), DIGITS),
        "duplicate_tx_rate": round(repeats / inclusions, DIGITS) if inclusions else 0.0,
        "blocks_per_s": round(len(blocks) / duration_s, DIGITS),
        "milestones_per_s": round((len(best) - 1) / duration_s, DIGITS),
        "stale_milestone_rate": round(stale / len(mined_ms), DIGITS) if mined_ms else 0.0,
        "confirmation_latency_s": summary(latency),
        "confirmation_latency_s_second_half": summary(late_latency),
        "propagation_s": summary(delays),
        "mempool_wait_s": summary(wait, (0.5, 0.9)),
        "revenue_share": revenue,
        "blocks": len(blocks),
        "milestones_mined": len(mined_ms),
        "best_height": observer.best_height,
        "level_set_size_mean": round(sum(sizes) / len(sizes), DIGITS) if sizes else 0.0,
        "pending_blocks_at_end": len(observer.pending_blocks()),
        "txs_offered": len(offered),
        "txs_confirmed": len(ours),
        "tx_inclusions": inclusions,
        **freshness(recorder, observer),
        "txs_lost": lost,
        "txs_lost_refused_on_offer": refused,
        **extra,
    }


def block_rows(recorder: Recorder, observer: Chain, nodes: int) -> list[dict[str, Any]]:
    """One row per mined block for blocks.csv, in mining order."""
    best = set(observer.best_chain())
    rows = []
    for bid, rec in recorder.blocks.items():
        delays = sorted(rec.delays)
        ls = observer.ls_height(bid)
        meta = observer.get_meta(bid)
        rows.append(
            {
                "block_id": bid.hex(),
                "miner": rec.miner,
                "created_s": round(rec.created_ms / 1000.0, DIGITS),
                "is_milestone": int(rec.is_milestone),
                "on_best_chain": int(rec.is_milestone and bid in best),
                "ls_height": "" if ls is None else ls,
                "ms_link_height": "" if meta is None else meta.ms_link_height,
                "txs": rec.txs,
                "bytes": rec.size,
                "reached": len(delays) + 1,
                "of_nodes": nodes,
                "prop_p50_s": round(percentile(delays, 0.5), DIGITS),
                "prop_p90_s": round(percentile(delays, 0.9), DIGITS),
                "prop_max_s": round(delays[-1], DIGITS) if delays else 0.0,
            }
        )
    return rows


__all__ = [
    "BlockRecord",
    "Recorder",
    "block_rows",
    "compute_metrics",
    "freshness",
    "percentile",
    "summary",
]
