"""Pure relay policy, scores, token bucket and bans (PROTOCOL.md §11.5-§11.7)."""

import random
from collections import OrderedDict

import pytest

from dagchain.crypto import hash32
from dagchain.errors import MalformedBlock, NotYetValid, RejectedBlock
from p2p import wire
from p2p.gossip import (
    AddrLimiter,
    BlockFetcher,
    CompactLru,
    KnownInventory,
    TxAnnouncer,
    plan_block_relay,
    plan_tx_announcements,
)
from p2p.scores import (
    BanList,
    Misbehaviour,
    MissingInputLimiter,
    TokenBucket,
    ban_key,
    charge_inbound,
    is_solicited_reply,
    score_block_error,
    score_tx_rule,
)

BLOCK = b"\xaa" * 32


def test_relay_pushes_to_three_and_announces_to_the_rest_never_the_sender_or_knowers() -> None:
    peers = [f"p{i}" for i in range(8)]
    known = {"p1": KnownInventory(), "p2": KnownInventory()}
    known["p1"].add(BLOCK)
    plan = plan_block_relay(BLOCK, peers, known, sender="p0", rng=random.Random(1))
    assert len(plan.push) == 3
    assert sorted(plan.push + plan.announce) == ["p2", "p3", "p4", "p5", "p6", "p7"]


def test_relay_with_few_peers_pushes_to_all_of_them() -> None:
    plan = plan_block_relay(BLOCK, ["a", "b"], {}, sender=None, rng=random.Random(0))
    assert (sorted(plan.push), plan.announce) == (["a", "b"], ())


@pytest.mark.parametrize("compact", [False, True])
def test_known_inventory_is_a_bounded_lru(compact: bool) -> None:
    inv = KnownInventory(size=2, compact=compact)
    for item in (b"1", b"2", b"1", b"3"):
        inv.add(item)
    assert (b"1" in inv, b"2" in inv, b"3" in inv, len(inv)) == (True, False, True, 2)


@pytest.mark.parametrize("seed", range(5))
def test_compact_lru_keeps_the_order_and_evictions_of_an_ordered_dict(seed: int) -> None:
    """The simulator's compact known inventories must relay exactly as the node's do."""
    rng = random.Random(seed)
    plain: OrderedDict[bytes, None] = OrderedDict()
    compact = CompactLru()
    for _ in range(3_000):
        item = bytes([rng.randrange(40)])
        op = rng.randrange(5)
        results: list[object] = []
        for lru in (plain, compact):
            if op == 0 and item in lru:
                lru.move_to_end(item)
            elif op == 1 and lru:
                results.append(lru.popitem(last=False))
            elif op == 2:
                results.append((lru.pop(item, None), None))
            elif op == 3 and lru:
                results.append(lru.popitem())
            else:
                lru[item] = None
        assert list(compact) == list(plain)
        assert results[: len(results) // 2] == results[len(results) // 2 :]


def test_txs_are_announced_in_batches_every_250_ms() -> None:
    ann = TxAnnouncer()
    ann.add(b"t1", sender="a")
    ann.add(b"t2")
    assert ann.due(1_000)
    batch = ann.flush(1_000)
    ann.add(b"t3")
    assert not ann.due(1_100)
    assert ann.due(1_250)
    known = {"b": KnownInventory()}
    known["b"].add(b"t2")
    assert plan_tx_announcements(batch, ["a", "b"], known) == {"a": [b"t2"], "b": [b"t1"]}


def test_fetcher_asks_one_announcer_at_a_time_and_moves_on_after_10_s() -> None:
    f = BlockFetcher()
    assert f.on_announce(BLOCK, "a", 0)
    assert not f.on_announce(BLOCK, "b", 1)
    assert f.expire(9_999) == []
    assert f.expire(10_000) == [(BLOCK, "b")]
    assert f.on_not_found(BLOCK, "b", 10_500) is None
    assert BLOCK not in f


def test_fetcher_reassigns_when_a_peer_leaves() -> None:
    f = BlockFetcher()
    f.on_announce(BLOCK, "a", 0)
    f.on_announce(BLOCK, "b", 0)
    assert f.forget_peer("a", 5) == [(BLOCK, "b")]
    f.on_received(BLOCK)
    assert len(f) == 0


def test_score_decays_one_point_per_minute_and_bans_at_100() -> None:
    m = Misbehaviour()
    assert not m.add(60, 0)
    assert m.value(120_000) == 58
    assert m.add(42, 120_000)


def test_token_bucket_allows_the_burst_then_500_per_second() -> None:
    bucket = TokenBucket()
    assert all(bucket.take(0) for _ in range(2000))
    assert not bucket.take(0)
    assert sum(bucket.take(1_000) for _ in range(600)) == 500


def _score_of(msgs: list[object], pending: set[bytes], requests: dict[str, float]) -> int:
    """Total §11.7 score of ``msgs`` arriving in one millisecond-by-millisecond stream."""
    bucket = TokenBucket()
    score = 0
    for i, msg in enumerate(msgs):
        now = i  # 1,000 messages per second: twice the bucket's rate
        score += charge_inbound(bucket, is_solicited_reply(msg, pending, requests), now)
    return score


def test_solicited_replies_above_500_per_second_are_not_charged_to_the_bucket() -> None:
    txs = [wire.TxMsg(i.to_bytes(4, "big") * 30) for i in range(6_000)]
    pending = {hash32(m.data) for m in txs}
    # answers to our getdata at 1,000/s for 6 s (6,000 messages): no score at all
    assert _score_of(list(txs), pending, {}) == 0
    # the same txs unsolicited: burst 2000 + 500/s, the rest +1 each
    unsolicited = _score_of(list(txs), set(), {})
    assert 990 <= unsolicited <= 1_010  # 6,000 - (2,000 + 6 s x 500)
    # replies of the other requested kinds are free only while we wait for them
    replies: list[object] = [
        wire.Milestones(()),
        wire.LevelSet(BLOCK, 0, 0, ()),
        wire.Pending(()),
        wire.NotFound(((int(wire.InvKind.TX), b"\x01" * 32),)),
    ]
    asked = {"milestones": 0.0, "levelset": 0.0, "pending": 0.0}
    assert all(is_solicited_reply(m, {b"\x01" * 32}, asked) for m in replies)
    assert not any(is_solicited_reply(m, set(), {}) for m in replies)
    assert _score_of(replies * 1_500, {b"\x01" * 32}, asked) == 0
    assert _score_of(replies * 1_500, set(), {}) > 0
    # a flood of invs is always charged
    assert _score_of([wire.Inv(())] * 6_000, pending, asked) > 0


def test_bans_expire_and_loopback_bans_the_node_id() -> None:
    bans = BanList()
    key = ban_key("127.0.0.1", b"\x01" * 32)
    assert key.startswith("node:")
    assert ban_key("10.0.0.5", b"\x01" * 32) == "ip:10.0.0.5"
    bans.ban(key, 0, 60_000)
    assert bans.is_banned(key, 59_999)
    assert not bans.is_banned(key, 60_000)


def test_scores_follow_the_misbehaviour_table() -> None:
    assert score_block_error(MalformedBlock("H1", "x")) == 100
    assert score_block_error(RejectedBlock("H4", "x")) == 100
    assert score_block_error(NotYetValid("H11", "x")) == 0
    assert [score_tx_rule(r) for r in ("T6", "V7", "V6", "V8")] == [10, 5, 0, 0]


def test_unsolicited_addr_is_limited_in_size_and_rate() -> None:
    lim = AddrLimiter()
    assert lim.check(11, solicited=False, now_ms=0) == 20
    assert lim.check(10, solicited=False, now_ms=0) is None
    assert lim.check(1, solicited=False, now_ms=5_000) == 0
    assert lim.check(1000, solicited=True, now_ms=5_000) is None


def test_at_most_100_missing_input_txs_per_minute_are_examined() -> None:
    limiter = MissingInputLimiter()
    for i in range(100):
        assert not limiter.exhausted(i * 100)
        limiter.record(i * 100)
    assert limiter.exhausted(10_000)  # beyond 100 within the minute: dropped unexamined
    assert limiter.exhausted(59_999)
    assert not limiter.exhausted(60_000)  # the first one left the window
    limiter.record(60_000)
    assert limiter.exhausted(60_050)
