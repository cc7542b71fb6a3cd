"""A pruned node among peers (``--prune-depth``, issue 27 item 1): it serves what it has, and
nobody scores it for a body it pruned.

Two real exchanges on real chains talk through lists: the pruned node A and a node B that
syncs from it (P7-P9) or asks it for blocks (``getdata``).
"""

import logging
import random

import pytest

from dagchain.chain import Chain
from dagchain.mempool import Mempool
from dagchain.pruning import Pruner
from dagchain.storage.memory import MemoryStore
from node.daemon import prune_once
from p2p import wire
from p2p.exchange import Exchange, NoVerifier
from p2p.serveholds import prune_step
from p2p.service import NodeService
from p2p.sync import MAX_LEVEL_SETS_IN_FLIGHT
from tests.dagchain.test_properties import PARAMS, build_dag
from tests.p2p.test_exchange import Links

NOW = PARAMS.genesis_timestamp_ms + 10**9
BLOCK = int(wire.InvKind.BLOCK)


def _hello(chain: Chain) -> wire.Hello:
    return wire.Hello(
        proto=wire.PROTOCOL_VERSION,
        network=PARAMS.network_id,
        genesis=chain.genesis_id,
        node=bytes(32),
        best=chain.best_id,
        height=chain.best_height,
        work=chain.best_snapshot.chainwork.to_bytes(32, "little"),
        port=0,
        agent="test",
        time=0,
    )


class Pair:
    """Node A (pruned) and node B, each an Exchange on its own chain, wired by message lists."""

    def __init__(self, b_blocks: int, depth: int = PARAMS.punctuality) -> None:
        dag = build_dag(seed=3, size=500, n_miners=4)
        self.blocks = dag.blocks
        self.a = Chain(PARAMS, MemoryStore())
        for block in dag.blocks:
            self.a.on_block(block.raw, NOW)
        self.pruner = Pruner(self.a, depth)
        self.pruner.run()
        self.b = Chain(PARAMS, MemoryStore())
        for block in dag.blocks[:b_blocks]:
            self.b.on_block(block.raw, NOW)
        self.links_a, self.links_b = Links(["b"]), Links(["a"])
        self.ex_a = self._exchange(self.a, self.links_a)
        self.ex_b = self._exchange(self.b, self.links_b)
        self.ex_a.peer_ready("b", _hello(self.b), NOW)
        self.ex_b.peer_ready("a", _hello(self.a), NOW)

    @staticmethod
    def _exchange(chain: Chain, links: Links) -> Exchange:
        service = NodeService(PARAMS, chain, Mempool(PARAMS), lambda: NOW)
        service.subscribe(lambda e: None)
        return Exchange(service, links, lambda: True, random.Random(1), NoVerifier())

    def pump(self, rounds: int = 10_000) -> None:
        """Deliver messages both ways until both sides are quiet (or ``rounds`` exchanges)."""
        for _ in range(rounds):
            to_b, to_a = self.links_a.sent, self.links_b.sent
            if not to_b and not to_a:
                return
            self.links_a.sent, self.links_b.sent = [], []
            for _, msg in to_b:
                self.ex_b.receive("a", msg, NOW)
            for _, msg in to_a:
                self.ex_a.receive("b", msg, NOW)
            for links in (self.links_a, self.links_b):
                for written in links.unwritten:
                    written()
                links.unwritten.clear()
        if rounds == 10_000:
            raise AssertionError("the exchange did not settle")


def test_a_node_below_the_pruned_bodies_gets_no_headers_and_scores_nobody() -> None:
    """B starts at genesis, below A's bodies: A answers ``getmilestones`` with no headers
    (P9's unbacked claim: the round ends, no score) instead of level sets it cannot fill."""
    pair = Pair(b_blocks=0)
    pair.pump()
    assert pair.b.best_height == 0
    assert pair.links_b.penalties == []
    assert pair.links_a.penalties == []


def test_a_node_above_the_pruned_bodies_syncs_from_the_pruned_node() -> None:
    pair = Pair(b_blocks=0)
    below = pair.pruner.next_height
    # B holds the DAG's prefix up to 8 level sets above A's lowest bodies (the level sets P9
    # has in flight: a peer just above the bodies is served nothing, as pruning follows the
    # head), then syncs the rest from A
    at = below + MAX_LEVEL_SETS_IN_FLIGHT - 1
    cut = max(i for i, blk in enumerate(pair.blocks) if pair.a.ls_height(blk.id) == at)
    pair = Pair(b_blocks=cut + 1)
    assert pair.b.best_height >= at
    pair.pump()
    assert pair.links_b.penalties == []
    assert (pair.b.best_id, pair.b.best_height) == (pair.a.best_id, pair.a.best_height)


def test_a_pruned_body_is_answered_notfound_and_costs_its_asker_nothing() -> None:
    pair = Pair(b_blocks=0)
    pair.pump()
    old = pair.a.best_chain()[1]
    assert pair.ex_a.service.get_block_raw(old) is None
    pair.ex_a.receive("b", wire.GetData(((BLOCK, old),)), NOW)
    assert [m for _, m in pair.links_a.sent] == [wire.NotFound(((BLOCK, old),))]
    pair.ex_a.receive("b", wire.GetLevelSet(old, 0), NOW)
    assert pair.links_a.sent[-1][1] == wire.NotFound(((int(wire.InvKind.LEVEL_SET), old),))
    assert pair.links_a.penalties == []


def _syncing_pair(depth: int) -> Pair:
    """A pruned at ``depth``; B holds the prefix 8 level sets above A's bodies (the lowest
    point A serves) and has just started syncing the rest from A: a few level sets in flight."""
    below = Pair(b_blocks=0, depth=depth).pruner.next_height
    at = below + MAX_LEVEL_SETS_IN_FLIGHT
    pair = Pair(b_blocks=0, depth=depth)
    cut = max(i for i, blk in enumerate(pair.blocks) if pair.a.ls_height(blk.id) == at)
    pair = Pair(b_blocks=cut + 1, depth=depth)
    pair.pump(rounds=3)  # getmilestones, milestones, the first getlevelsets
    assert 0 < pair.b.best_height < pair.a.best_height
    return pair


def test_pruning_keeps_the_level_sets_a_syncing_peer_was_listed() -> None:
    """Decision 40, regression: A's head moved on (here: a smaller prune depth) while B fetched
    the level sets A listed to it; A prunes only below them, and B finishes with no score."""
    pair = _syncing_pair(depth=40)
    listed_from = pair.b.best_height + 1
    shallow = Pruner(pair.a, PARAMS.punctuality)
    assert shallow.target() > listed_from  # the depth alone would prune what B is fetching
    while prune_step(shallow, pair.ex_a.service.serve_holds, NOW, 64)[0]:
        pass
    assert shallow.next_height <= listed_from
    pair.pump()
    assert pair.links_b.penalties == []
    assert (pair.b.best_id, pair.b.best_height) == (pair.a.best_id, pair.a.best_height)
    # B is synced; once it goes, its hold goes and pruning moves on to the depth's point
    pair.ex_a.peer_gone("b", NOW)
    while prune_step(shallow, pair.ex_a.service.serve_holds, NOW, 64)[0]:
        pass
    assert shallow.next_height == shallow.target() + 1


def test_a_peer_too_far_behind_pruning_is_closed_before_its_level_sets_go() -> None:
    """A hold keeps at most ``depth`` more milestones: B, further behind, is named to be closed
    (not scored), and only the step after that prunes what it was listed."""
    pair = _syncing_pair(depth=60)
    listed_from = pair.b.best_height + 1
    shallow = Pruner(pair.a, PARAMS.punctuality)
    holds = pair.ex_a.service.serve_holds
    assert listed_from <= shallow.target() - shallow.depth
    _, lagging = prune_step(shallow, holds, NOW, 10_000)
    assert lagging == ["b"]
    assert shallow.next_height <= listed_from  # this step kept B's level sets
    pair.ex_a.peer_gone("b", NOW)  # the daemon closes it (1001): no more of its requests
    pair.ex_b.peer_gone("a", NOW)
    while prune_step(shallow, holds, NOW, 64)[0]:
        pass
    assert shallow.next_height == shallow.target() + 1
    assert pair.links_b.penalties == []
    assert pair.links_a.penalties == []


def test_the_daemon_closes_a_peer_too_far_behind_pruning_and_logs_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The daemon's pruning step (node/daemon.py ``prune_once``) closes the lagging peer with
    one log line, before the step that prunes its level sets."""
    pair = _syncing_pair(depth=60)
    listed_from = pair.b.best_height + 1
    shallow = Pruner(pair.a, PARAMS.punctuality)
    closed: list[str] = []
    with caplog.at_level(logging.INFO, logger="dagchain.node"):
        prune_once(shallow, pair.ex_a.service, closed.append)
    assert closed == ["b"]
    assert shallow.next_height <= listed_from
    assert any("closing peer b: its sync from us fell" in r.getMessage() for r in caplog.records)
    while prune_once(shallow, pair.ex_a.service, closed.append):
        pass
    assert closed == ["b"]
    assert shallow.next_height == shallow.target() + 1
