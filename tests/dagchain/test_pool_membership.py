"""Pool membership (PROTOCOL.md v2 §7.5, §3.4): the two required §7.5 tests.

A tx stays in the pool until it or a conflict is VALID in the best chain, an input is spent, or it
expires; a block that merely carries it changes nothing. So a block whose only copy of a tx comes
out INVALID(``sortition``), and a block that is accepted but never ordered, each leave the tx to
be confirmed later. Run on the node's real service layer (``p2p.service.NodeService``: Chain +
Mempool, the pool following the best chain) with templates from ``dagchain.template`` and real PoW
(SIM parameters, uniform weighting).
"""

from collections.abc import Sequence

from dagchain.blocks import Block, compute_merkle_root, make_block
from dagchain.chain import BlockStatus, Chain
from dagchain.errors import Reason
from dagchain.mempool import Mempool
from dagchain.params import SIM, ConsensusParams
from dagchain.pool_policy import WaitingTxs
from dagchain.rules import is_recent_tip_candidate
from dagchain.sortition import is_tx_assigned
from dagchain.storage.memory import MemoryStore
from dagchain.template import BlockTemplate, try_build_template
from dagchain.transactions import Transaction
from dagchain.types import BlockId
from p2p.service import NodeService
from tests.dagchain.builders import build_block, grind
from tests.dagchain.chainkit import key, transfer, verdicts

MAX_BLOCKS = 80
"""Bound on the blocks mined while waiting for the tx to confirm (c = 1/3: ~2 expected)."""


class Harness:
    """A NodeService on a MemoryStore with a clock the test advances, and template miners."""

    def __init__(self, params: ConsensusParams) -> None:
        self.params = params
        self.now = params.genesis_timestamp_ms + 1_000
        self.chain = Chain(params, MemoryStore())
        self.service = NodeService(params, self.chain, Mempool(params), lambda: self.now)
        self.count = 0

    @property
    def mempool(self) -> Mempool:
        return self.service.mempool

    def template(self, root: bytes | None = None, register: bytes | None = None) -> BlockTemplate:
        self.now += 300
        return try_build_template(self.chain, self.mempool, self.now, root=root, register=register)

    def solve(
        self,
        template: BlockTemplate,
        txs: Sequence[Transaction] | None = None,
        want_milestone: bool | None = None,
    ) -> Block:
        """Grind the template (with ``txs`` instead of its own, if given) and submit it."""
        body = list(template.txs if txs is None else txs)
        header = template.header(merkle_root=compute_merkle_root(body))
        header = grind(header, template.target, want_milestone, template.ms_target)
        block = make_block(header, template.tip_links, body)
        out = self.service.submit_block(block.raw)
        assert out.status is BlockStatus.ACCEPTED, out
        self.count += 1
        return block

    def mine(
        self,
        root: bytes | None = None,
        register: bytes | None = None,
        want_milestone: bool | None = None,
    ) -> Block:
        return self.solve(self.template(root, register), want_milestone=want_milestone)

    def confirmed(self, tx: Transaction) -> bool:
        return self.chain.get_utxo(tx.txid, 0) is not None

    def mine_until_confirmed(self, tx: Transaction, roots: Sequence[bytes]) -> Block:
        """Template blocks of ``roots`` in turn (a milestone every third) until tx is VALID."""
        for i in range(MAX_BLOCKS):
            self.mine(roots[i % len(roots)], want_milestone=i % 3 == 2)
            if self.confirmed(tx):
                holders = [
                    b
                    for b in self.chain.blocks_with_tx(tx.txid)
                    if self.chain.ls_height(b) is not None
                    and Reason.VALID in verdicts(self.chain, b)
                ]
                assert len(holders) == 1
                block = self.chain.get_block(holders[0])
                assert block is not None
                return block
        raise AssertionError(f"tx not confirmed within {MAX_BLOCKS} blocks")


def faucet_spend(params: ConsensusParams, genesis: bytes, index: int, fee: int) -> Transaction:
    return transfer([(genesis, index)], [(params.faucet_amount - fee, key(900)[1])], params)


def spend_not_assigned_to(h: Harness, previous: bytes, index: int) -> Transaction:
    """A faucet spend (varying the fee) that S5 does NOT assign to a block on ``previous``."""
    chain = h.chain
    window = chain.compute_window(previous, chain.best_id)
    rate = chain.best_snapshot.hash_rate
    for fee in range(1, 200):
        tx = faucet_spend(h.params, chain.genesis_id, index, fee)
        if not is_tx_assigned(tx.txid, previous, window, rate, h.params):
            return tx
    raise AssertionError("every fee was assigned")


def spend_assigned_to(h: Harness, previous: bytes, milestone: bytes, index: int) -> Transaction:
    """A faucet spend that S1-S5 assign to a block on ``previous`` linking ``milestone``."""
    chain = h.chain
    window = chain.compute_window(previous, milestone)
    snap = chain.get_snapshot(milestone)
    assert snap is not None
    for fee in range(1, 200):
        tx = faucet_spend(h.params, chain.genesis_id, index, fee)
        if is_tx_assigned(tx.txid, previous, window, snap.hash_rate, h.params):
            return tx
    raise AssertionError("no fee was assigned")


def test_s5_invalid_sortition_copy_leaves_the_tx_in_the_pool_and_it_confirms_later() -> None:
    """§7.5 required test (V5, S5): a block whose only copy of a tx is INVALID(sortition) leaves
    the tx in the pool (the node evicts only on VALID or a spent input), and the tx is VALID in
    a later block of another peer chain."""
    params = SIM.replace(sortition_c_num=1, sortition_c_den=3)
    assert params.sortition_weighting == "uniform"
    h = Harness(params)
    root_a = h.mine(register=key(1)[1], want_milestone=True).id
    root_b = h.mine(register=key(2)[1], want_milestone=False).id
    h.mine(root_a, want_milestone=True)
    previous_a, _ = h.chain.peer_chain_head(root_a) or (None, 0)
    assert previous_a is not None
    tx = spend_not_assigned_to(h, previous_a, 0)
    assert h.service.submit_tx(tx.raw) == tx.txid
    # A's honest template does not carry it (not assigned); a careless block of A does
    template = h.template(root_a)
    assert tx.txid not in {t.txid for t in template.txs}
    careless = h.solve(template, txs=[tx], want_milestone=False)
    assert tx.txid in h.mempool
    # B's milestone orders it (tip link), carrying nothing itself
    closing = h.solve(h.template(root_b), txs=[], want_milestone=True)
    assert h.chain.best_id == closing.id
    assert h.chain.ls_height(careless.id) == h.chain.best_height
    assert verdicts(h.chain, careless.id) == [Reason.SORTITION]
    assert not h.confirmed(tx)
    assert tx.txid in h.mempool, "§7.5: an INVALID(sortition) copy must not evict the tx"
    holder = h.mine_until_confirmed(tx, [root_b, root_a])
    assert holder.id != careless.id
    assert tx.txid not in h.mempool
    assert h.chain.get_utxo(tx.txid, 0) is not None


def test_block_accepted_but_never_ordered_leaves_the_tx_confirmed_later() -> None:
    """§7.5 required test (D5b, §3.4): peer chain X's block carries a tx assigned to it (it would
    be VALID) but links a milestone so old that no template tip-links it (§3.4: within
    punctuality/2 of the head) and X never mines again; once the head is punctuality above its
    milestone link no block may link it (D5b), so it is never ordered. The tx stays in the pool
    and is confirmed in another peer chain's block."""
    params = SIM.replace(punctuality=6, sortition_c_num=1, sortition_c_den=3)
    h = Harness(params)
    chain = h.chain
    root_a = h.mine(register=key(1)[1], want_milestone=True).id
    m1 = chain.best_id
    assert chain.best_height == 1
    x_reg = h.mine(register=key(3)[1], want_milestone=False)
    root_c = h.mine(register=key(2)[1], want_milestone=False).id
    while chain.best_height < 5:
        h.mine(root_a, want_milestone=True)
    assert chain.ls_height(x_reg.id) is not None
    tx = spend_assigned_to(h, x_reg.id, m1, 0)
    assert h.service.submit_tx(tx.raw) == tx.txid
    stale = build_block(chain, previous=x_reg.id, milestone=m1, tips=[m1], txs=[tx])
    out = h.service.submit_block(stale.raw)
    assert out.status is BlockStatus.ACCEPTED
    assert not is_recent_tip_candidate(chain.best_height, 1, params)
    assert tx.txid in h.mempool, "§7.5: a block carrying the tx must not evict it"
    holder = h.mine_until_confirmed(tx, [root_c, root_a])
    assert holder.id != stale.id
    while chain.best_height < 1 + params.punctuality:
        h.mine(root_a, want_milestone=True)
    assert chain.ls_height(stale.id) is None
    assert BlockId(stale.id) in chain.pending_blocks()
    assert tx.txid not in h.mempool
    assert h.confirmed(tx)


def test_waiting_txs_are_bounded_oldest_first_and_expire() -> None:
    """Decision 37: what waits for an undone parent is bounded in count (the oldest goes first)
    and in time (``mempool_expiry``), so a deep reorganisation cannot grow the node's memory."""
    chain = Chain(SIM, MemoryStore())
    secret, payee = key(5)
    txs = [transfer([(bytes([i]) * 32, 0)], [(10, payee)], SIM, secret) for i in range(1, 5)]
    waiting = WaitingTxs(max_txs=3, expiry_ms=1_000)
    for i, tx in enumerate(txs):
        waiting.hold(tx, now_ms=i)
    assert [tx.txid in waiting for tx in txs] == [False, True, True, True]
    assert waiting.dropped == 1
    # their inputs never appear: nothing is admitted, and all expire 1 s after they were held
    assert waiting.retry(chain, Mempool(SIM), now_ms=999) == 0
    assert len(waiting) == 3
    assert waiting.retry(chain, Mempool(SIM), now_ms=1_003) == 0
    assert (len(waiting), waiting.dropped) == (0, 4)
