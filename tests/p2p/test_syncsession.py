"""p2p/syncsession.py: P5 and P7-P10 driven with wire messages and times, no sockets."""

from collections.abc import Sequence

from dagchain.blocks import Block
from dagchain.params import DEVNET, ConsensusParams
from dagchain.retarget import Snapshot
from p2p import scores, wire
from p2p.syncsession import SyncSession, SyncStep
from tests.dagchain.builders import address_of_secret, secret_of
from tests.dagchain.chainkit import Node


class Host:
    """A fresh node's chain as the session sees it, and the ready peers."""

    def __init__(self, node: Node, peers: Sequence[str] = ("a", "b")) -> None:
        self.node = node
        self.peers = list(peers)
        self.tried = True

    @property
    def params(self) -> ConsensusParams:
        return DEVNET

    @property
    def genesis_id(self) -> bytes:
        return self.node.chain.genesis_id

    def has_block(self, block_id: bytes) -> bool:
        return self.node.chain.get_block(block_id) is not None

    def locator(self) -> Sequence[bytes]:
        return [self.node.chain.best_id]

    def get_snapshot(self, block_id: bytes) -> Snapshot | None:
        return self.node.chain.get_snapshot(block_id)

    def timestamp(self, block_id: bytes) -> int | None:
        block = self.node.chain.get_block(block_id)
        return None if block is None else block.header.timestamp_ms

    def best_work(self) -> int:
        snap = self.node.chain.get_snapshot(self.node.chain.best_id)
        return 0 if snap is None else snap.chainwork

    def best_timestamp(self) -> int:
        return -(10**12)  # never fresh: P10 (a) decides

    def ready_peers(self) -> Sequence[str]:
        return self.peers

    def seeds_tried(self) -> bool:
        return self.tried


def chain_of(count: int) -> tuple[Node, list[Block]]:
    node = Node(DEVNET)
    first = node.register(address_of_secret(secret_of(7)), ms=True)
    return node, [first, *node.milestones(first, count - 1)]


def sends_of(step: SyncStep, kind: type) -> list[tuple[str, wire.Message]]:
    return [(k, m) for k, m in step.sends if isinstance(m, kind)]


def test_the_peer_claiming_most_work_is_asked_for_milestones_from_our_locator() -> None:
    host = Host(Node(DEVNET))
    session = SyncSession(host)
    session.add_peer("a", 10, 1)
    session.add_peer("b", 50, 5)
    step = session.maybe_start(0)
    assert [k for k, _ in sends_of(step, wire.GetMilestones)] == ["b"]
    (_, msg) = step.sends[0]
    assert isinstance(msg, wire.GetMilestones)
    assert list(msg.locator) == [host.node.chain.genesis_id]
    assert session.peer == "b"
    assert "milestones" in session.requests("b")
    assert session.maybe_start(0).sends == []  # one round at a time


def test_headers_open_level_sets_and_complete_ones_come_out_in_height_order() -> None:
    source, blocks = chain_of(3)
    host = Host(Node(DEVNET))
    session = SyncSession(host)
    session.add_peer("a", 10**30, 3)
    session.maybe_start(0)
    step = session.on_milestones(
        "a", wire.Milestones(tuple(b.header_bytes for b in blocks)), source.now_ms
    )
    assert step.pump == "a"
    step = session.pump("a", source.now_ms)
    asked = [m.ms for _, m in step.sends if isinstance(m, wire.GetLevelSet)]
    assert asked == [b.id for b in blocks]
    raw_of: dict[bytes, bytes] = {b.id: b.raw for b in blocks}
    for block in reversed(blocks):  # answers in any order
        delta = source.chain.level_set(block.id)
        assert delta is not None
        ids = tuple(delta.order)
        step = session.on_levelset("a", wire.LevelSet(block.id, 0, len(ids), ids), 0)
        assert step.penalties == []
    step = session.pump("a", 0)
    (fetch,) = step.fetch
    assert fetch[0] == "a"
    for block_id in fetch[1]:
        assert session.on_block("a", block_id, raw_of[block_id])
    ready = session.pop_ready(lambda ms: True)
    assert [ms for ms, _ in ready] == [b.id for b in blocks]


def test_an_unsolicited_reply_costs_10_and_keeps_the_round() -> None:
    session = SyncSession(Host(Node(DEVNET)))
    session.add_peer("a", 10**30, 3)
    session.maybe_start(0)
    step = session.on_milestones("b", wire.Milestones(()), 0)
    assert [(p.key, p.score) for p in step.penalties] == [("b", scores.SCORE_UNSOLICITED)]
    assert session.peer == "a"


def test_a_bad_header_fails_the_round_with_100_and_moves_to_the_next_peer() -> None:
    session = SyncSession(Host(Node(DEVNET)))
    session.add_peer("a", 10**30, 3)
    session.add_peer("b", 10**29, 3)
    session.maybe_start(0)
    step = session.on_milestones("a", wire.Milestones((b"\x00" * 150,)), 0)
    assert [(p.key, p.score) for p in step.penalties] == [("a", 100)]
    assert [k for k, _ in sends_of(step, wire.GetMilestones)] == ["b"]


def test_an_unbacked_claim_ends_the_round_and_no_new_one_starts_within_60_s() -> None:
    host = Host(Node(DEVNET), peers=("a",))
    resets: list[int] = []
    session = SyncSession(host, on_reset=lambda: resets.append(1))
    session.add_peer("a", 10**30, 99)
    session.maybe_start(0)
    assert not session.check_synced(0)  # a peer claims more work
    step = session.on_milestones("a", wire.Milestones(()), 1_000)  # nothing to back it
    step.extend(session.pump("a", 1_000))
    assert [k for k, _ in sends_of(step, wire.GetPending)] == ["a"]  # getpending once
    assert step.synced  # P10 can end: its claim now counts as ours
    assert session.peer is None
    assert session.unbacked_rounds == 1
    assert session.claims["a"].chainwork == host.best_work()
    session.claims["a"].chainwork = 10**30  # it claims more again (a new hello)
    assert session.start("a", 60_999).sends == []
    assert sends_of(session.start("a", 61_000), wire.GetMilestones)
    assert resets


def test_requests_time_out_after_30_s_and_a_disconnect_restarts_with_the_next_peer() -> None:
    session = SyncSession(Host(Node(DEVNET)))
    session.add_peer("a", 10**30, 3)
    session.add_peer("b", 10**29, 3)
    session.maybe_start(0)
    assert session.tick(29_999) == []
    assert session.tick(30_000) == [("a", "milestones")]
    step = session.remove_peer("a", 30_000)
    assert [k for k, _ in sends_of(step, wire.GetMilestones)] == ["b"]


def test_pending_ids_are_fetched_once_asked_and_exempt_from_p14() -> None:
    session = SyncSession(Host(Node(DEVNET)))
    session.add_peer("a", 0, 0)
    assert session.on_pending("a", wire.Pending((b"\x01" * 32,)), lambda i: False) is None
    session._requests["a"]["pending"] = 10
    want = session.on_pending(
        "a", wire.Pending((b"\x01" * 32, b"\x02" * 32)), lambda i: i == b"\x02" * 32
    )
    assert want == [b"\x01" * 32]
    assert session.fetched_from_pending(b"\x01" * 32)
    assert not session.fetched_from_pending(b"\x02" * 32)


def test_initial_sync_ends_once_seeds_are_tried_and_nobody_is_ahead() -> None:
    host = Host(Node(DEVNET), peers=("a",))
    host.tried = False
    session = SyncSession(host)
    session.add_peer("a", 0, 0)
    assert not session.check_synced(0)
    host.tried = True
    assert session.check_synced(0)
    assert session.synced
    assert not session.check_synced(0)  # once


def test_a_reply_linking_the_locator_we_sent_passes_after_our_best_chain_moved() -> None:
    """Regression test of issue 26 (found by bench/soak.py): the reply was checked against the
    locator of our best chain at its arrival; a reorganisation between request and reply (a
    healed partition: blocks arrive by relay too) made an honest peer's answer "not link a
    locator entry", +100, and the peer was banned."""
    source, blocks = chain_of(3)
    host = Host(Node(DEVNET))
    session = SyncSession(host)
    session.add_peer("a", 10**30, 3)
    step = session.maybe_start(0)
    ((_, asked),) = sends_of(step, wire.GetMilestones)
    assert isinstance(asked, wire.GetMilestones)
    assert list(asked.locator) == [host.node.chain.genesis_id]
    host.node.register(address_of_secret(secret_of(8)), ms=True)  # our best moves meanwhile
    assert list(host.locator()) != list(asked.locator)
    step = session.on_milestones(
        "a", wire.Milestones(tuple(b.header_bytes for b in blocks)), source.now_ms
    )
    assert (step.penalties, step.pump) == ([], "a")
