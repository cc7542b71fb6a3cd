"""Blocks and txs from peers into the core, with their verdicts for the shell (§11.6, §11.7).

Pure: the shell (``node.net.manager``) applies the scores and sends the requests this returns.
"""

import logging
from dataclasses import dataclass

from dagchain.chain import BlockOutcome, BlockStatus
from dagchain.errors import InvalidBlock, InvalidTransaction, NotYetValid
from dagchain.mempool import MempoolError
from p2p import scores, wire
from p2p.scores import Penalty
from p2p.service import NodeService
from p2p.syncsession import ORPHAN_SYNC_TRIGGER

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BlockIntake:
    """What became of a block from a peer."""

    penalties: tuple[Penalty, ...] = ()
    missing: tuple[bytes, ...] = ()
    """An orphan: the links it waits for (P13: getdata them from the sender)."""
    behind: bool = False
    """P13: an unknown milestone link, or too many orphans: milestone sync with the sender."""
    stale: bool = False
    """P14: dropped as a stale relay (no penalty, nothing remembered)."""
    not_yet_valid: bool = False
    """H11: dropped, its timestamp too far ahead (DROP: nothing remembered, no penalty)."""
    outcome: BlockOutcome | None = None
    """What the core made of it (None: dropped or refused)."""


def take_block(
    service: NodeService, key: str, block_id: bytes, raw: bytes, stale_filter: bool
) -> BlockIntake:
    """Submit a relayed or fetched block; ``stale_filter``: apply P14 first.

    P14 drops a relayed block whose milestone link is ``punctuality`` below our best. The caller
    turns the filter off for blocks fetched from a ``pending`` reply (P9); blocks an orphan
    waits for (P13) are exempt in the core, so the filter never slows a node catching up.
    """
    if stale_filter:
        stale = service.drop_stale_relay(block_id, raw)
        if stale is not None:
            log.debug(
                "peer %s: stale relayed block %s dropped (P14: milestone link at %d, best %d)",
                key,
                block_id.hex()[:16],
                *stale,
            )
            return BlockIntake(stale=True)
    try:
        outcome = service.submit_block(raw, key)
    except (InvalidBlock, NotYetValid) as exc:
        score = scores.score_block_error(exc)
        reason = f"block {getattr(exc, 'rule', '?')}: {exc}"
        late = isinstance(exc, NotYetValid)
        return BlockIntake((Penalty(key, score, reason),) if score else (), not_yet_valid=late)
    if outcome.status is not BlockStatus.ORPHAN:
        return BlockIntake(outcome=outcome)
    penalties: tuple[Penalty, ...] = ()
    if key in outcome.evicted_orphans:
        reason = "orphan beyond the per-peer limit (P13)"
        penalties = (Penalty(key, scores.SCORE_ORPHAN_OVER_LIMIT, reason),)
    ms_link = wire.block_frame_milestone_link(raw)
    # P13: an unknown milestone link means we are behind: milestone sync is faster
    behind = ms_link in outcome.missing or len(service.chain.orphans) > ORPHAN_SYNC_TRIGGER
    return BlockIntake(penalties, tuple(bytes(m) for m in outcome.missing), behind, outcome=outcome)


@dataclass(frozen=True, slots=True)
class TxIntake:
    """What became of a tx from a peer."""

    admitted: bool
    """In the pool now (§7.5): relay it."""
    penalty: Penalty | None = None
    """What the sender earned (a duplicate or a conflict is not the peer's fault)."""


REFUSED = TxIntake(False)
ADMITTED = TxIntake(True)


def take_tx(
    service: NodeService, key: str, raw: bytes, limiter: scores.MissingInputLimiter, now_ms: int
) -> TxIntake:
    """Submit a tx from a peer (§7.5). Beyond 100 missing-input txs a minute, a tx with an input
    we do not have is dropped unexamined and scores nothing (§11.7 says +1 each; docs/protocol.md
    decision 35: after a partition heals, an honest peer relays its branch's payments at the
    load's rate and was banned within seconds)."""
    if limiter.exhausted(now_ms) and service.lacks_inputs(raw):
        return REFUSED
    try:
        service.submit_tx(raw, key)
    except InvalidTransaction as exc:
        if exc.rule == "V6" and exc.message == "missing-input":
            limiter.record(now_ms)
        score = scores.score_tx_rule(exc.rule)
        return TxIntake(False, Penalty(key, score, f"tx {exc.rule}")) if score else REFUSED
    except MempoolError:
        return REFUSED
    return ADMITTED


__all__ = ["BlockIntake", "TxIntake", "take_block", "take_tx"]
