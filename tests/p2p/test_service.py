"""NodeService: chain + mempool glue and events, on a real devnet Chain over a MemoryStore."""

import random

import pytest

from dagchain.blocks import Block
from dagchain.chain import BlockStatus
from dagchain.errors import InvalidTransaction, MalformedBlock
from dagchain.mempool import Mempool, MempoolConflict, MempoolDuplicate, MempoolFull
from dagchain.params import DEVNET
from dagchain.types import BlockId
from p2p import wire
from p2p.gossip import RecentTxs
from p2p.relay import Relay, RelaySettings
from p2p.service import NodeEvent, NodeService
from tests.dagchain.chainkit import Node, key, transfer

FAUCET_COINS = 10**14
_, ALICE = key(2)
BOB_SECRET, BOB = key(3)
_, CAROL = key(4)


class Harness:
    """A chainkit Node (block builder) whose chain is owned by a NodeService."""

    def __init__(self) -> None:
        self.node = Node(DEVNET)
        self.service = NodeService(
            DEVNET, self.node.chain, Mempool(DEVNET), lambda: self.node.now_ms
        )
        self.events: list[NodeEvent] = []
        self.service.subscribe(self.events.append)

    def mine(self, previous: bytes, **kw: object) -> Block:
        block = self.node.build(previous, **kw)  # type: ignore[arg-type]
        outcome = self.service.submit_block(block.raw, peer="test")
        assert outcome.status is BlockStatus.ACCEPTED
        return block

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


@pytest.fixture
def h() -> Harness:
    return Harness()


def test_accepted_block_emits_block_event_and_milestone_event(h: Harness) -> None:
    block = h.mine(h.node.genesis, register=ALICE, ms=True)
    assert h.kinds() == ["block", "milestone"]
    assert h.events[0].block_id == block.id
    assert h.events[0].data["hash"] == block.id.hex()
    assert h.events[0].data["is_milestone"] is True
    assert h.events[0].data["peer"] == "test"
    assert h.events[1].to_json()["type"] == "milestone"
    assert h.events[1].data["height"] == 1
    assert h.service.best() == (block.id, 1, h.node.chain.best_snapshot.chainwork)


def test_duplicate_block_emits_nothing(h: Harness) -> None:
    block = h.mine(h.node.genesis, register=ALICE, ms=False)
    h.events.clear()
    outcome = h.service.submit_block(block.raw)
    assert outcome.status is BlockStatus.DUPLICATE
    assert h.events == []


def test_malformed_block_raises_and_is_counted(h: Harness) -> None:
    with pytest.raises(MalformedBlock) as err:
        h.service.submit_block(b"\x00garbage")
    assert err.value.rule == "H1"
    assert h.service.rejected["block:H1"] == 1
    assert h.events == []


def test_orphan_is_held_then_released_with_events(h: Harness) -> None:
    first = h.node.build(h.node.genesis, register=ALICE, ms=False)
    h.node.chain.on_block(first.raw, h.node.now_ms)  # learn it to build on it ...
    child = h.node.build(first.id, ms=False)
    # ... then a fresh harness sees the child first
    other = Harness()
    assert other.service.submit_block(child.raw).status is BlockStatus.ORPHAN
    assert other.events == []
    outcome = other.service.submit_block(first.raw)
    assert outcome.accepted == (first.id, child.id)
    assert [e.block_id for e in other.events] == [first.id, child.id]


def test_tx_is_admitted_relayable_and_emits_event(h: Harness) -> None:
    tx = transfer([(h.node.genesis, 0)], [(FAUCET_COINS - 5, BOB)], DEVNET)
    assert h.service.submit_tx(tx.raw) == tx.txid
    assert h.service.get_tx_raw(tx.txid) == tx.raw
    assert h.kinds() == ["tx"]
    assert h.events[0].data == {"txid": tx.txid.hex(), "size": len(tx.raw), "peer": "local"}
    with pytest.raises(MempoolDuplicate):
        h.service.submit_tx(tx.raw)
    rival = transfer([(h.node.genesis, 0)], [(FAUCET_COINS - 9, CAROL)], DEVNET)
    with pytest.raises(MempoolConflict):
        h.service.submit_tx(rival.raw)
    assert h.service.rejected["tx:conflict"] == 1


def test_bad_tx_bytes_fail_t1(h: Harness) -> None:
    with pytest.raises(InvalidTransaction) as err:
        h.service.submit_tx(b"\x93\x01")
    assert err.value.rule == "T1"
    assert h.service.rejected["tx:T1"] == 1


def test_a_tx_over_max_tx_bytes_fails_t1_in_the_decoder(h: Harness) -> None:
    """T1's size bound is the decoder's (it reads at most ``max_tx_bytes``): the service does
    not check it a second time, and the verdict is the same."""
    with pytest.raises(InvalidTransaction) as err:
        h.service.submit_tx(b"\x93" + bytes(DEVNET.max_tx_bytes))
    assert err.value.rule == "T1"
    assert h.service.rejected["tx:T1"] == 1


def test_unknown_input_fails_v6(h: Harness) -> None:
    tx = transfer([(bytes(32), 0)], [(5, BOB)], DEVNET)
    with pytest.raises(InvalidTransaction) as err:
        h.service.submit_tx(tx.raw)
    assert (err.value.rule, err.value.message) == ("V6", "missing-input")


def test_confirmed_tx_leaves_the_mempool(h: Harness) -> None:
    warm = [h.mine(h.node.genesis, register=ALICE, ms=True)]
    for _ in range(DEVNET.sortition_warmup - 1):
        warm.append(h.mine(warm[-1].id, ms=True))
    # S5 (devnet c = 1/16): the tx is one a block on warm[-1] may carry.
    tx = transfer(
        [(h.node.genesis, 0)], [(FAUCET_COINS - 5, BOB)], DEVNET, assigned_to=[warm[-1].id]
    )
    h.service.submit_tx(tx.raw)
    h.mine(warm[-1].id, txs=[tx], ms=True)
    assert tx.txid not in h.service.mempool
    assert h.node.chain.get_utxo(tx.txid, 0) is not None


def test_reorg_returns_undone_txs_and_drops_unspendable_ones(h: Harness) -> None:
    """§4.4 policy: a tx VALID only in an undone level set re-enters the pool; a pool tx whose
    input was created in the undone level set leaves it."""
    warm = [h.mine(h.node.genesis, register=ALICE, ms=True)]
    for _ in range(DEVNET.sortition_warmup - 1):
        warm.append(h.mine(warm[-1].id, ms=True))
    a4 = warm[-1]
    to_bob = transfer([(h.node.genesis, 0)], [(FAUCET_COINS - 5, BOB)], DEVNET, assigned_to=[a4.id])
    h.service.submit_tx(to_bob.raw)
    h.mine(a4.id, txs=[to_bob], ms=True)  # l5: losing branch, seen first
    bob_on = transfer([(to_bob.txid, 0)], [(FAUCET_COINS - 9, CAROL)], DEVNET, BOB_SECRET)
    h.service.submit_tx(bob_on.raw)
    assert to_bob.txid not in h.service.mempool
    assert bob_on.txid in h.service.mempool

    w5 = h.mine(a4.id, milestone=a4.id, tip=warm[0].id, ms=True)
    h.events.clear()
    w6 = h.mine(w5.id, milestone=w5.id, ms=True)

    assert h.node.chain.best_id == w6.id
    assert to_bob.txid in h.service.mempool
    assert bob_on.txid not in h.service.mempool
    assert h.service.reorg_count == 1
    assert h.service.readded_txs == 1
    assert h.kinds() == ["block", "reorg", "milestone", "milestone"]
    reorg = h.events[1]
    assert reorg.data["new_head"] == w6.id.hex()
    assert reorg.data["applied"] == [w5.id.hex(), w6.id.hex()]


def test_invalidate_and_reconsider_move_the_mempool_with_the_chain(h: Harness) -> None:
    warm = [h.mine(h.node.genesis, register=ALICE, ms=True)]
    for _ in range(DEVNET.sortition_warmup - 1):
        warm.append(h.mine(warm[-1].id, ms=True))
    tx = transfer(
        [(h.node.genesis, 1)], [(FAUCET_COINS - 5, BOB)], DEVNET, assigned_to=[warm[-1].id]
    )
    h.service.submit_tx(tx.raw)
    top = h.mine(warm[-1].id, txs=[tx], ms=True)
    assert tx.txid not in h.service.mempool
    h.service.invalidate(top.id)
    assert h.node.chain.best_id == warm[-1].id
    assert tx.txid in h.service.mempool
    h.service.reconsider(top.id)
    assert h.node.chain.best_id == top.id
    assert tx.txid not in h.service.mempool
    with pytest.raises(KeyError):
        h.service.invalidate(h.node.genesis)


def test_locator_is_dense_then_exponential_and_ends_at_genesis(h: Harness) -> None:
    prev = h.mine(h.node.genesis, register=ALICE, ms=True)
    for _ in range(19):
        prev = h.mine(prev.id, ms=True)
    best = h.node.chain.best_chain()
    assert len(best) == 21
    loc = h.service.locator()
    heights = [best.index(b) for b in loc]
    assert heights == [20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 9, 5, 0]


def test_p2p_responders(h: Harness) -> None:
    first = h.mine(h.node.genesis, register=ALICE, ms=True)
    side = h.mine(first.id, ms=False)
    second = h.mine(side.id, ms=True)
    gen = h.node.genesis
    assert h.service.milestone_headers_after([gen]) == [first.header_bytes, second.header_bytes]
    assert h.service.milestone_headers_after([first.id, gen]) == [second.header_bytes]
    assert h.service.milestone_headers_after([bytes(32)], limit=1) == [first.header_bytes]
    assert h.service.level_set_ids(second.id) == [side.id, second.id]
    assert h.service.level_set_ids(bytes(32)) is None
    assert h.service.has_block(side.id)
    assert h.service.get_block_raw(side.id) == side.raw
    assert h.service.get_block_raw(bytes(32)) is None
    pending = h.mine(second.id, ms=False)
    assert h.service.pending_ids() == [BlockId(pending.id)]
    assert h.service.pending_ids(0) == []


def test_expire_drops_old_txs(h: Harness) -> None:
    tx = transfer([(h.node.genesis, 2)], [(FAUCET_COINS - 5, BOB)], DEVNET)
    h.service.submit_tx(tx.raw)
    assert h.service.expire() == (0, 0)
    h.node.now_ms += DEVNET.mempool_expiry_ms + 1
    assert h.service.expire() == (1, 0)
    assert tx.txid not in h.service.mempool


def test_a_child_whose_parent_a_reorg_undid_waits_and_returns_once_the_parent_confirms(
    h: Harness,
) -> None:
    """Decision 37 (issue 26's soak lost acknowledged payments this way): a pool tx spending the
    output of a tx that a reorganisation sent back to the pool cannot stay in the pool (§7.5: no
    unconfirmed parents), but it is not dropped either: it waits, reads as ``mempool``, and is
    admitted as soon as its parent is VALID on the new best chain."""
    warm = [h.mine(h.node.genesis, register=ALICE, ms=True)]
    for _ in range(DEVNET.sortition_warmup - 1):
        warm.append(h.mine(warm[-1].id, ms=True))
    a4 = warm[-1]
    w5 = h.mine(a4.id, milestone=a4.id, tip=warm[0].id, ms=True)
    x = h.mine(w5.id, milestone=w5.id, ms=False)  # the later carrier's previous link
    to_bob = transfer(
        [(h.node.genesis, 0)], [(FAUCET_COINS - 5, BOB)], DEVNET, assigned_to=[a4.id, x.id]
    )
    h.service.submit_tx(to_bob.raw)
    l5 = h.mine(a4.id, txs=[to_bob], milestone=a4.id, ms=True)  # a second branch
    h.mine(l5.id, milestone=l5.id, ms=True)  # l6: now best, to_bob VALID
    assert h.node.chain.get_utxo(to_bob.txid, 0) is not None
    bob_on = transfer([(to_bob.txid, 0)], [(FAUCET_COINS - 9, CAROL)], DEVNET, BOB_SECRET)
    h.service.submit_tx(bob_on.raw)
    assert bob_on.txid in h.service.mempool

    w6 = h.mine(w5.id, milestone=w5.id, ms=True)  # x stays childless: S7's first child later
    w7 = h.mine(w6.id, milestone=w6.id, ms=True)  # back to the first branch, without to_bob
    assert h.node.chain.best_id == w7.id
    assert to_bob.txid in h.service.mempool
    assert bob_on.txid not in h.service.mempool
    assert bob_on.txid in h.service.waiting

    h.mine(x.id, txs=[to_bob], milestone=w7.id, ms=True)  # the parent is VALID again
    assert h.node.chain.get_utxo(to_bob.txid, 0) is not None
    assert bob_on.txid in h.service.mempool
    assert bob_on.txid not in h.service.waiting


def test_a_full_pool_refuses_before_the_signature_check(h: Harness) -> None:
    """Decision 41: a tx the full pool cannot take is refused (503 ``mempool-full`` at the API)
    before its signatures are verified, the costliest check; once there is room it is admitted
    and verified as before."""
    warm = [h.mine(h.node.genesis, register=ALICE, ms=True)]
    for _ in range(DEVNET.sortition_warmup - 1):
        warm.append(h.mine(warm[-1].id, ms=True))
    split = transfer(
        [(h.node.genesis, 0)],
        [(1_000, BOB), (1_000, BOB)],
        DEVNET,
        assigned_to=[warm[-1].id],
    )
    h.service.submit_tx(split.raw)
    h.mine(warm[-1].id, txs=[split], ms=True)
    h.service.mempool = Mempool(DEVNET, max_txs=1)
    first = transfer([(split.txid, 0)], [(995, CAROL)], DEVNET, BOB_SECRET)
    second = transfer([(split.txid, 1)], [(995, CAROL)], DEVNET, BOB_SECRET)
    h.service.submit_tx(first.raw)
    checks = h.node.chain.signature_checks
    with pytest.raises(MempoolFull):
        h.service.submit_tx(second.raw)
    assert h.node.chain.signature_checks == checks  # not verified
    assert h.service.rejected["tx:full"] == 1
    h.service.mempool.remove(first.txid)
    h.service.submit_tx(second.raw)
    assert h.node.chain.signature_checks == checks + 1
    assert second.txid in h.service.mempool


def test_a_tx_of_an_accepted_block_is_had_and_not_fetched_again(h: Harness) -> None:
    """Decision 42: a tx carried by a block accepted here counts as had, so a peer's late
    ``inv`` for it is not answered with a ``getdata`` (the tx would only be refused or sit
    in the pool for nothing); it is still not served (only pool txs are relayed, §11.3)."""
    warm = [h.mine(h.node.genesis, register=ALICE, ms=True)]
    for _ in range(DEVNET.sortition_warmup - 1):
        warm.append(h.mine(warm[-1].id, ms=True))
    tx = transfer(
        [(h.node.genesis, 0)], [(FAUCET_COINS - 5, BOB)], DEVNET, assigned_to=[warm[-1].id]
    )
    relay = Relay(h.service, random.Random(1), RelaySettings(forget_relayed=True))
    relay.add_peer("late")
    announce = wire.Inv(((int(wire.InvKind.TX), tx.txid),))
    assert not h.service.has_tx(tx.txid)
    h.mine(warm[-1].id, txs=[tx], ms=True)  # never in this node's pool
    assert h.service.has_tx(tx.txid)
    assert h.service.get_tx_raw(tx.txid) is None
    assert relay.on_inv("late", announce, 0) == []
    assert tx.txid not in relay.peers["late"].known.ids  # nothing kept for a tx we will not relay
    other = transfer([(warm[0].id, 0)], [(1, BOB)], DEVNET)  # never seen: fetched as before
    sends = relay.on_inv("late", wire.Inv(((int(wire.InvKind.TX), other.txid),)), 0)
    assert [type(msg) for _, msg in sends] == [wire.GetData]


def test_recent_txs_holds_the_latest_half_to_whole_of_its_size() -> None:
    recent = RecentTxs(4)
    for item in (b"a", b"b", b"c"):
        recent.add(item)
    assert all(item in recent for item in (b"a", b"b", b"c"))
    assert len(recent) == 3
    recent.add(b"d")  # the newer generation fills: the oldest two go
    assert b"a" not in recent
    assert b"b" not in recent
    assert b"c" in recent
    assert b"d" in recent
    assert len(recent) == 2
    with pytest.raises(ValueError, match="at least 2"):
        RecentTxs(1)
