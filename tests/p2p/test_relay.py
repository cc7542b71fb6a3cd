"""p2p/relay.py: the P11/P13 relay policy, driven with wire messages and times, no sockets."""

import random

import pytest

from p2p import gossip, wire
from p2p.relay import Relay, RelaySettings, Send

BLOCK = int(wire.InvKind.BLOCK)
TX = int(wire.InvKind.TX)


class FakeInventory:
    """The core's view: dicts of what we have."""

    def __init__(self) -> None:
        self.blocks: dict[bytes, bytes] = {}
        self.txs: dict[bytes, bytes] = {}

    def has_block(self, block_id: bytes) -> bool:
        return block_id in self.blocks

    def has_tx(self, txid: bytes) -> bool:
        return txid in self.txs

    def get_block_raw(self, block_id: bytes) -> bytes | None:
        return self.blocks.get(block_id)

    def get_tx_raw(self, txid: bytes) -> bytes | None:
        return self.txs.get(txid)


def _id(n: int) -> bytes:
    return n.to_bytes(32, "big")


def _relay(peers: int = 5, **settings: object) -> tuple[Relay, FakeInventory]:
    inv = FakeInventory()
    relay = Relay(inv, random.Random(1), RelaySettings(**settings))  # type: ignore[arg-type]
    for i in range(peers):
        relay.add_peer(f"p{i}")
    return relay, inv


def _by_type(sends: list[Send] | tuple[Send, ...], cls: type) -> dict[str, list[wire.Message]]:
    out: dict[str, list[wire.Message]] = {}
    for key, msg in sends:
        if isinstance(msg, cls):
            out.setdefault(key, []).append(msg)
    return out


def _getdata_items(sends: list[Send] | tuple[Send, ...]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for key, msg in sends:
        if isinstance(msg, wire.GetData):
            out.setdefault(key, []).extend(item for _, item in msg.items)
    return out


@pytest.mark.parametrize("forget", [False, True])
def test_block_accepted_is_pushed_to_relay_push_peers_and_announced_to_the_rest(
    forget: bool,
) -> None:
    relay, inv = _relay(8, forget_relayed=forget)
    block = _id(7)
    arrival = relay.on_block("p0", block, 0)  # p0 sent it to us (unsolicited push)
    assert not arrival.requested
    inv.blocks[block] = b"raw"
    sends = relay.on_block_accepted(block, b"raw")
    pushed = _by_type(sends, wire.BlockMsg)
    announced = _by_type(sends, wire.Inv)
    assert len(pushed) == 3
    assert "p0" not in pushed
    assert "p0" not in announced
    assert set(pushed) | set(announced) == {f"p{i}" for i in range(1, 8)}
    assert not set(pushed) & set(announced)
    assert all(m == [wire.Inv(((BLOCK, block),))] for m in announced.values())


def test_block_relay_skips_peers_known_to_have_it() -> None:
    relay, inv = _relay(5)
    block = _id(1)
    relay.on_inv("p1", wire.Inv(((BLOCK, block),)), 0)
    relay.on_inv("p2", wire.Inv(((BLOCK, block),)), 0)
    relay.on_block("p1", block, 10)
    inv.blocks[block] = b"raw"
    targets = {key for key, _ in relay.on_block_accepted(block, b"raw")}
    assert targets == {"p0", "p3", "p4"}


@pytest.mark.parametrize("forget", [False, True])
def test_txs_are_batched_every_250_ms_into_one_inv_per_peer(forget: bool) -> None:
    relay, inv = _relay(3, forget_relayed=forget)
    relay.on_inv("p2", wire.Inv(((TX, _id(2)),)), 0)  # p2 told us about tx 2
    for n in range(1, 4):
        inv.txs[_id(n)] = b"tx%d" % n
        relay.on_tx_accepted(_id(n), "p0" if n == 1 else None)
    assert relay.next_flush_ms() == 250
    assert relay.tick(100).sends == ()
    sends = relay.tick(250).sends
    assert len(sends) == 3  # one inv per peer
    items = {key: [i for _, i in msg.items] for key, msg in sends if isinstance(msg, wire.Inv)}
    assert items == {
        "p0": [_id(2), _id(3)],  # not its own tx 1
        "p1": [_id(1), _id(2), _id(3)],
        "p2": [_id(1), _id(3)],  # it announced tx 2 to us
    }
    assert relay.next_flush_ms() is None
    assert relay.tick(600).sends == ()


@pytest.mark.parametrize("forget", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_tx_flush_is_the_plain_plan_of_gossip(forget: bool, seed: int) -> None:
    """The per-peer fast path of ``flush_txs`` sends exactly ``gossip.plan_tx_announcements``
    (same peers in the same order, same txids in batch order), and forgets what it relayed."""
    rng = random.Random(seed)
    relay, inv = _relay(7, forget_relayed=forget)
    keys = list(relay.peers)
    for n in range(40):  # peers announce some of the txs to come (they become known)
        key = rng.choice(keys)
        relay.on_inv(key, wire.Inv(((TX, _id(n)),)), 0)
    batch: list[tuple[bytes, str | None]] = []
    for n in rng.sample(range(60), 30):
        sender = rng.choice([*keys, None])
        inv.txs[_id(n)] = b"t"
        relay.on_tx_accepted(_id(n), sender)
        batch.append((_id(n), sender))
    want = gossip.plan_tx_announcements(batch, keys, {k: p.known for k, p in relay.peers.items()})
    sends = relay.flush_txs(250)
    got = [(key, [i for _, i in msg.items]) for key, msg in sends if isinstance(msg, wire.Inv)]
    assert got == list(want.items())
    assert all(kind == TX for _, msg in sends if isinstance(msg, wire.Inv) for kind, _ in msg.items)
    if forget:
        assert not any(txid in p.known for p in relay.peers.values() for txid, _ in batch)


@pytest.mark.parametrize("forget", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_block_relay_is_the_plain_plan_of_gossip(forget: bool, seed: int) -> None:
    """``on_block_accepted`` sends exactly ``gossip.plan_block_relay``'s plan (the same rng draw,
    pushes first, then invs in peer order), never to a peer known to have the block; with
    ``forget_relayed`` no peer's inventory keeps the block afterwards."""
    rng = random.Random(seed)
    relay, inv = _relay(rng.randrange(1, 12), forget_relayed=forget)
    keys = list(relay.peers)
    block = _id(1000 + seed)
    for key in rng.sample(keys, rng.randrange(len(keys) + 1)):  # they announce it to us first
        relay.on_inv(key, wire.Inv(((BLOCK, block),)), 0)
    for key in rng.sample(keys, rng.randrange(len(keys) + 1)):  # and other blocks
        relay.on_inv(key, wire.Inv(((BLOCK, _id(rng.randrange(50))),)), 0)
    knowers = {k for k, p in relay.peers.items() if block in p.known}
    want = gossip.plan_block_relay(
        block, keys, {k: p.known for k, p in relay.peers.items()}, None, random.Random(seed)
    )
    relay.rng = random.Random(seed)
    inv.blocks[block] = b"raw"
    sends = relay.on_block_accepted(block, b"raw")
    assert [k for k, m in sends if isinstance(m, wire.BlockMsg)] == list(want.push)
    assert [k for k, m in sends if isinstance(m, wire.Inv)] == list(want.announce)
    assert not knowers & {k for k, _ in sends}
    assert len(sends) == len(want.push) + len(want.announce)
    if forget:
        assert not any(block in p.known for p in relay.peers.values())
    else:
        assert all(block in p.known for p in relay.peers.values())


def test_tx_inv_is_split_at_max_inv() -> None:
    relay, inv = _relay(1)
    for n in range(2500):
        inv.txs[_id(n)] = b"t"
        relay.on_tx_accepted(_id(n))
    sends = relay.flush_txs(250)
    assert [len(m.items) for _, m in sends if isinstance(m, wire.Inv)] == [1000, 1000, 500]


def test_inv_fetches_from_one_announcer_then_the_next_after_10_s() -> None:
    relay, _ = _relay(3)
    item = _id(5)
    first = relay.on_inv("p0", wire.Inv(((BLOCK, item),)), 0)
    assert first == [("p0", wire.GetData(((BLOCK, item),)))]
    assert relay.on_inv("p1", wire.Inv(((BLOCK, item),)), 100) == []
    assert relay.on_inv("p2", wire.Inv(((BLOCK, item),)), 200) == []
    assert _getdata_items(relay.tick(9_999).sends) == {}
    assert _getdata_items(relay.tick(10_000).sends) == {"p1": [item]}
    assert _getdata_items(relay.tick(20_000).sends) == {"p2": [item]}
    relay.on_block("p2", item, 20_100)
    assert _getdata_items(relay.tick(40_000).sends) == {}


def test_a_tx_is_fetched_from_its_first_announcer_only() -> None:
    """As node/net/manager.py today: later announcers of a tx being fetched are not queued."""
    relay, _ = _relay(2)
    txid = _id(9)
    assert relay.on_inv("p0", wire.Inv(((TX, txid),)), 0) == [("p0", wire.GetData(((TX, txid),)))]
    assert relay.on_inv("p1", wire.Inv(((TX, txid),)), 0) == []
    assert relay.tick(10_000).sends == ()
    assert relay.on_inv("p1", wire.Inv(((TX, txid),)), 10_001) == [
        ("p1", wire.GetData(((TX, txid),)))
    ]


def test_an_inv_before_initial_sync_is_ignored() -> None:
    """P10: until initial sync ends, relayed ``inv`` are ignored, tx items included: a node
    with no ledger yet would find every announced tx missing its inputs and score honest peers
    beyond 100 a minute (found by a late-joining node in the simulator)."""
    relay, _ = _relay(1)
    assert relay.on_inv("p0", wire.Inv(((BLOCK, _id(1)),)), 0, synced=False) == []
    assert relay.on_inv("p0", wire.Inv(((TX, _id(2)),)), 0, synced=False) == []
    assert relay.busy is False  # nothing queued for later either
    # once synced, the same announcement is fetched (it was not remembered as known)
    assert relay.on_inv("p0", wire.Inv(((TX, _id(2)),)), 1, synced=True) == [
        ("p0", wire.GetData(((TX, _id(2)),)))
    ]


def test_items_we_have_are_not_fetched() -> None:
    relay, inv = _relay(1)
    inv.blocks[_id(1)] = b"b"
    inv.txs[_id(2)] = b"t"
    assert relay.on_inv("p0", wire.Inv(((BLOCK, _id(1)), (TX, _id(2)))), 0) == []


def test_at_most_two_getdata_outstanding_with_500_items_each() -> None:
    relay, _ = _relay(1)
    items = [(TX, _id(n)) for n in range(1200)]
    first = relay.on_inv("p0", wire.Inv(tuple(items[:1000])), 0)
    assert [len(m.items) for _, m in first if isinstance(m, wire.GetData)] == [500, 500]
    assert relay.on_inv("p0", wire.Inv(tuple(items[1000:])), 0) == []  # backlog
    sends: list[Send] = []
    for _, item in items[:499]:
        sends += relay.on_tx("p0", item, 5).sends
    assert sends == []  # the first getdata still has one item unanswered
    last = relay.on_tx("p0", items[499][1], 6)
    assert last.requested
    gets = [m for _, m in last.sends if isinstance(m, wire.GetData)]
    assert [len(m.items) for m in gets] == [200]
    assert relay.pending_items("p0") >= {items[1100][1], items[600][1]}


def test_notfound_moves_to_the_next_announcer() -> None:
    relay, _ = _relay(2)
    item = _id(3)
    relay.on_inv("p0", wire.Inv(((BLOCK, item),)), 0)
    relay.on_inv("p1", wire.Inv(((BLOCK, item),)), 0)
    result = relay.on_notfound("p0", wire.NotFound(((BLOCK, item),)), 50)
    assert result.expected
    assert result.sends == (("p1", wire.GetData(((BLOCK, item),))),)
    unsolicited = relay.on_notfound("p0", wire.NotFound(((TX, _id(99)),)), 60)
    assert not unsolicited.expected
    assert unsolicited.sends == ()


def test_getdata_is_answered_with_items_and_one_notfound() -> None:
    relay, inv = _relay(1)
    inv.blocks[_id(1)] = b"block"
    inv.txs[_id(2)] = b"tx"
    msg = wire.GetData(((BLOCK, _id(1)), (TX, _id(2)), (TX, _id(3)), (BLOCK, _id(4))))
    assert relay.on_getdata("p0", msg) == [
        ("p0", wire.BlockMsg(b"block")),
        ("p0", wire.TxMsg(b"tx")),
        ("p0", wire.NotFound(((TX, _id(3)), (BLOCK, _id(4))))),
    ]


def test_orphan_missing_links_are_asked_of_the_supplier() -> None:
    relay, inv = _relay(2)
    inv.blocks[_id(1)] = b"have"
    sends = relay.on_orphan("p1", [_id(1), _id(2), _id(3)], 0)
    assert sends == [("p1", wire.GetData(((BLOCK, _id(2)), (BLOCK, _id(3)))))]
    assert relay.on_orphan("p1", [_id(2)], 1) == []  # already asked


def test_orphan_sweep_asks_one_peer_then_the_others() -> None:
    relay, _ = _relay(3)
    sends = relay.fetch_orphan_parents([_id(8)], 0)
    assert len(sends) == 1
    first = sends[0][0]
    second = _getdata_items(relay.tick(10_000).sends)
    assert list(second) != [first]
    assert len(second) == 1
    assert relay.fetch_orphan_parents([_id(8)], 10_001) == []  # still being fetched


def test_a_peer_that_leaves_hands_its_fetches_to_the_next_announcer() -> None:
    relay, _ = _relay(2)
    item = _id(4)
    relay.on_inv("p0", wire.Inv(((BLOCK, item),)), 0)
    relay.on_inv("p1", wire.Inv(((BLOCK, item),)), 0)
    assert relay.remove_peer("p0", 5) == [("p1", wire.GetData(((BLOCK, item),)))]
    assert relay.remove_peer("p0", 6) == []


def test_unanswered_getdata_times_out_after_30_s() -> None:
    relay, _ = _relay(1)
    relay.on_inv("p0", wire.Inv(((BLOCK, _id(1)),)), 0)
    assert relay.busy
    assert relay.tick(29_999).timed_out == ()
    assert relay.tick(30_000).timed_out == ("p0",)
    assert relay.pending_items("p0") == set()


def test_forget_relayed_keeps_no_inventory_once_relayed() -> None:
    relay, inv = _relay(4, forget_relayed=True)
    txid = _id(1)
    relay.on_inv("p0", wire.Inv(((TX, txid),)), 0)
    relay.on_tx("p0", txid, 10)
    inv.txs[txid] = b"t"
    relay.on_tx_accepted(txid, "p0")
    relay.on_inv("p1", wire.Inv(((TX, txid),)), 20)  # before the flush: still recorded
    sends = relay.flush_txs(250)
    assert sorted(k for k, _ in sends) == ["p2", "p3"]
    relay.on_inv("p2", wire.Inv(((TX, txid),)), 300)  # after: not recorded
    assert all(len(p.known) == 0 for p in relay.peers.values())


def test_the_pool_is_announced_to_a_new_peer_in_batches_without_what_it_has() -> None:
    relay, _ = _relay(1)
    txids = [_id(n) for n in range(1500)]
    relay.on_inv("p0", wire.Inv(((TX, txids[0]),)), 0)  # p0 has tx 0
    sends = relay.announce_pool("p0", txids, 10)
    assert [len(m.items) for _, m in sends if isinstance(m, wire.Inv)] == [1000, 499]
    assert relay.announce_pool("nobody", txids, 10) == []


def test_an_announced_tx_the_peer_never_fetched_is_announced_again_after_30_s() -> None:
    relay, inv = _relay(2)
    inv.txs[_id(1)] = b"t1"
    relay.on_tx_accepted(_id(1))
    assert len(relay.flush_txs(250)) == 2  # announcing does not make it known
    relay.on_getdata("p1", wire.GetData(((TX, _id(1)),)))  # p1 fetched it: known now
    assert relay.reannounce([_id(1)], 20_000) == []  # announced 20 s ago: not yet
    assert relay.reannounce([_id(1)], 30_250) == [("p0", wire.Inv(((TX, _id(1)),)))]
    assert relay.reannounce([_id(1)], 40_000) == []  # just re-announced


def test_reannounce_rounds_come_every_30_to_60_s() -> None:
    relay, _ = _relay(1)
    assert not relay.reannounce_due(0)  # the first call starts the clock
    due = [t for t in range(250, 200_000, 250) if relay.reannounce_due(t)]
    gaps = [b - a for a, b in zip([0, *due], due, strict=False)]
    assert due
    assert all(30_000 <= g <= 60_250 for g in gaps)


def test_a_block_is_awaited_from_the_peer_asked_until_it_arrives() -> None:
    """``awaits_block``: a ``block`` from ``key`` closes a fetch of ours only while one runs;
    a held block nobody fetches is awaited from no one (its arrival changes nothing)."""
    relay, inv = _relay(forget_relayed=True)
    block = _id(7)
    assert not relay.awaits_block("p1", block)
    relay.on_inv("p1", wire.Inv(((BLOCK, block),)), 0)  # getdata to p1
    relay.on_inv("p2", wire.Inv(((BLOCK, block),)), 0)  # p2 waits as the next announcer
    assert relay.awaits_block("p1", block)
    assert relay.awaits_block("p2", block)  # the fetch runs: a push from anyone ends it
    inv.blocks[block] = b"raw"
    relay.on_block("p1", block, 10)
    relay.on_block_accepted(block, b"raw")
    assert not relay.awaits_block("p1", block)
    assert not relay.awaits_block("p2", block)
    assert not relay.awaits_block("nobody", block)
