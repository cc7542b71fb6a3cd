"""A 2,000-block, five-miner scenario on the SIM preset with random multi-tip choices (v2).

PROTOCOL.md v2 (H5, §3.4, §7.5, S7) over the v1 scenario's ledger invariants (L1-L3, V1, V2,
§7.4, §9 R1-R7): every block carries a random list of 1..8 tip links to recent blocks of other
peer chains; the mempool follows v2 pool membership (``dagchain.pool_policy``: a carried tx stays
until it is VALID, templates skip txs of pending blocks). Every block is ordered exactly once, no
outpoint is spent twice, no tx is VALID twice, coins are neither created nor destroyed beyond the
reward schedule (the supply invariant), and deliberate double spends resolve to exactly one VALID
spend.
"""

import random
from collections import Counter
from dataclasses import dataclass, field

from dagchain.blocks import Block
from dagchain.chain import BlockStatus, Chain
from dagchain.errors import Reason
from dagchain.genesis import FAUCET_SECRET
from dagchain.mempool import Mempool
from dagchain.params import SIM
from dagchain.pool_policy import follow_reorg
from dagchain.rewards import compute_block_reward, compute_milestone_bonus, is_reward_fresh
from dagchain.rules import is_punctual
from dagchain.sortition import is_tx_assigned
from dagchain.storage.memory import MemoryStore
from dagchain.transactions import REDEMPTION_INDEX, Transaction, TxKind, TxOut, sign_transaction
from dagchain.types import Address, BlockId, TxId
from tests.dagchain.builders import address_of_secret, build_block, secret_of

PARAMS = SIM.replace(sortition_c_num=1, sortition_c_den=5)
"""Uniform weighting (the v2 default, no warm-up) with c = 1/5: a tx is eligible for about one
block in five, as the v1 scenario's share weighting gave with five chains."""
N_BLOCKS = 2000
N_MINERS = 5
N_FUNDING = 16
"""Faucet outputs split over the wallet at the start."""
BLOCK_INTERVAL_MS = 125.0
"""Mean virtual time between blocks: SIM's 8 blocks/s, so milestones come about every τ."""
DOUBLE_SPEND_EVERY = 60
"""A deliberate double spend is started every this many blocks."""

WALLET = [secret_of(1_000 + i) for i in range(40)]
OWNER = {address_of_secret(s): s for s in [*WALLET, FAUCET_SECRET]}
OWNER_FAUCET = address_of_secret(FAUCET_SECRET)
Outpoint = tuple[bytes, int]


@dataclass
class Miner:
    secret: bytes
    last: BlockId | None = None
    root: BlockId | None = None
    recent: list[BlockId] = field(default_factory=list)
    redemption_block: BlockId | None = None
    """The block holding this miner's last redemption (the next waits until it is ordered)."""

    @property
    def address(self) -> Address:
        return Address(address_of_secret(self.secret))


@dataclass
class DoubleSpend:
    """Two txs spending one outpoint, placed in blocks of two different peer chains."""

    outpoint: Outpoint
    amount: int
    secret: bytes
    first: Transaction | None = None
    first_miner: Miner | None = None
    second: Transaction | None = None


def transfer(op: Outpoint, secret: bytes, outs: list[tuple[int, bytes]]) -> Transaction:
    return sign_transaction(
        TxKind.TRANSFER,
        [(TxId(op[0]), op[1])],
        [TxOut(a, Address(to)) for a, to in outs],
        [secret],
        PARAMS,
    )


class Scenario:
    """Five honest miners and a wallet driving one Chain on a virtual clock."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.chain = Chain(PARAMS, MemoryStore())
        self.mempool = Mempool(PARAMS)
        self.miners = [Miner(secret_of(500 + i)) for i in range(N_MINERS)]
        self.clock = PARAMS.genesis_timestamp_ms
        self.used: set[Outpoint] = set()
        self.blocks: list[BlockId] = []
        self.double_spends: list[DoubleSpend] = []
        self.redemptions: list[TxId] = []
        self.spendable: list[tuple[Outpoint, int]] = []
        self.tip_counts: Counter[int] = Counter()
        self.submitted: list[TxId] = []

    # --- wallet -------------------------------------------------------------------------------
    def fund(self) -> None:
        gid = self.chain.genesis_id
        for i in range(N_FUNDING):
            outs = [(10**12, address_of_secret(self.rng.choice(WALLET))) for _ in range(8)]
            outs.append((PARAMS.faucet_amount - 8 * 10**12 - 1_000, address_of_secret(WALLET[0])))
            self.submit(transfer((gid, i), FAUCET_SECRET, outs), (gid, i))

    def submit(self, tx: Transaction, op: Outpoint) -> None:
        fee = self.chain.check_transaction(tx)
        self.mempool.add(tx, fee, self.clock)
        self.used.add(op)
        self.submitted.append(tx.txid)

    def refresh_spendable(self) -> None:
        self.spendable = [
            (op, amount)
            for op, (amount, address, _) in self.chain.state.utxos.items()
            if address in OWNER and op not in self.used
        ]
        self.spendable.sort()

    def take_spendable(self) -> tuple[Outpoint, int] | None:
        while self.spendable:
            op, amount = self.spendable.pop(self.rng.randrange(len(self.spendable)))
            if op not in self.used and self.chain.get_utxo(*op) is not None:
                return op, amount
        return None

    def random_transfer(self) -> None:
        found = self.take_spendable()
        if found is None:
            return
        op, amount = found
        utxo = self.chain.get_utxo(*op)
        assert utxo is not None
        fee = self.rng.randrange(1, 1_000)
        if amount - fee < 2:
            return
        half = (amount - fee) // 2
        outs = [
            (half, address_of_secret(self.rng.choice(WALLET))),
            (amount - fee - half, address_of_secret(self.rng.choice(WALLET))),
        ]
        self.submit(transfer(op, OWNER[utxo.address], outs), op)

    def start_double_spend(self) -> None:
        found = self.take_spendable()
        if found is None:
            return
        op, amount = found
        utxo = self.chain.get_utxo(*op)
        assert utxo is not None
        self.used.add(op)
        self.double_spends.append(DoubleSpend(op, amount, OWNER[utxo.address]))

    def eligible_spend(
        self, ds: DoubleSpend, previous: BlockId, ms: BlockId, payee: bytes
    ) -> Transaction | None:
        """A variant (by fee) of the double spend that passes S1-S5 for this block."""
        window = self.chain.compute_window(previous, ms)
        snap = self.chain.get_snapshot(ms)
        assert snap is not None
        for fee in range(1, 60):
            tx = transfer(ds.outpoint, ds.secret, [(ds.amount - fee, payee)])
            if is_tx_assigned(tx.txid, previous, window, snap.hash_rate, PARAMS):
                return tx
        return None

    # --- miners -------------------------------------------------------------------------------
    def choose_tips(self, miner: Miner, ms_height: int) -> list[BlockId] | None:
        """1..8 random recent blocks of other peer chains that pass D5b against the link."""
        chain = self.chain
        candidates = [
            b
            for other in self.miners
            if other is not miner
            for b in other.recent[-4:]
            if is_punctual(ms_height, chain.msh(b), PARAMS)
        ]
        if not candidates:
            return None
        k = self.rng.randint(1, PARAMS.max_tip_links)
        return sorted(self.rng.sample(candidates, min(k, len(candidates))))

    def redemption(self, miner: Miner) -> Transaction | None:
        chain = self.chain
        if miner.root is None or self.rng.random() > 0.03:
            return None
        if miner.redemption_block is not None and chain.ls_height(miner.redemption_block) is None:
            return None
        record = chain.get_root(miner.root)
        if record is None or record.balance < 2:
            return None
        payee = Address(address_of_secret(self.rng.choice(WALLET)))
        return sign_transaction(
            TxKind.REDEMPTION,
            [(record.anchor_txid, REDEMPTION_INDEX)],
            [TxOut(0, miner.address), TxOut(record.balance // 2, payee)],
            [miner.secret],
            PARAMS,
        )

    def mine_one(self, miner: Miner) -> Block:
        chain = self.chain
        self.clock += max(1, int(self.rng.expovariate(1 / BLOCK_INTERVAL_MS)))
        ms = chain.best_id
        snap = chain.best_snapshot
        previous = miner.last if miner.last is not None else chain.genesis_id
        prev_block = chain.get_block(previous)
        ms_block = chain.get_block(ms)
        assert prev_block is not None
        assert ms_block is not None
        timestamp = max(self.clock, prev_block.header.timestamp_ms, ms_block.header.timestamp_ms)
        txs: list[Transaction] = []
        if miner.last is not None:
            redemption = self.redemption(miner)
            if redemption is not None:
                txs.append(redemption)
            for ds in self.double_spends:
                if ds.first is None:
                    ds.first = self.eligible_spend(ds, previous, ms, address_of_secret(WALLET[1]))
                    if ds.first is not None:
                        ds.first_miner = miner
                        txs.append(ds.first)
                elif ds.second is None and ds.first_miner is not miner:
                    ds.second = self.eligible_spend(ds, previous, ms, address_of_secret(WALLET[2]))
                    if ds.second is not None:
                        txs.append(ds.second)
            window = chain.compute_window(previous, ms)
            packed = {t.txid for b in chain.pending_blocks() for t in self.block_txs(b)}
            txs += self.mempool.select_for_template(
                previous,
                window,
                snap.hash_rate,
                PARAMS.block_capacity - len(txs),
                PARAMS.max_block_bytes - 512 - sum(len(t.raw) for t in txs),
                packed.__contains__,
            )
        tips = self.choose_tips(miner, snap.height)
        block = build_block(
            chain,
            previous=previous,
            tips=tips,
            milestone=ms,
            txs=txs,
            timestamp_ms=timestamp,
            register=miner.address if miner.last is None else None,
        )
        outcome = chain.on_block(block.raw, timestamp)
        assert outcome.status is BlockStatus.ACCEPTED
        if txs and txs[0].kind == TxKind.REDEMPTION:
            miner.redemption_block = block.id
            self.redemptions.append(txs[0].txid)
        miner.last = block.id
        miner.root = miner.root or block.id
        miner.recent = [*miner.recent[-3:], block.id]
        self.blocks.append(block.id)
        self.tip_counts[len(block.tip_links)] += 1
        for reorg in outcome.reorgs:  # §7.5: the pool follows the best chain, not the blocks
            follow_reorg(chain, self.mempool, reorg, timestamp)
            self.refresh_spendable()
        return block

    def block_txs(self, block_id: BlockId) -> tuple[Transaction, ...]:
        block = self.chain.get_block(block_id)
        assert block is not None
        return block.txs

    def run(self) -> None:
        for miner in self.miners:
            self.mine_one(miner)
        self.fund()
        while len(self.blocks) < N_BLOCKS:
            if len(self.blocks) % DOUBLE_SPEND_EVERY == 0:
                self.start_double_spend()
            for _ in range(self.rng.randrange(3)):
                self.random_transfer()
            self.mine_one(self.rng.choice(self.miners))


def test_a_two_thousand_block_multi_tip_scenario_keeps_ledger_invariants() -> None:
    """H5, L1-L3, V1, V2, R1-R7 (v2) over 2,000 SIM blocks from 5 peer chains, real PoW.

    Scenario override (documented): ``SIM.replace(sortition_c_num=1, sortition_c_den=5)``:
    uniform weighting, so no warm-up, and a tx is eligible for about one block in five. Each
    miner registers (previous = genesis + REGISTRATION), then extends its own chain, links the
    best milestone and 1..8 random recent blocks of the other peer chains passing D5b as tips.
    A wallet splits faucet outputs over 40 keys and keeps transferring; every
    ``DOUBLE_SPEND_EVERY`` blocks one confirmed outpoint is spent by two txs placed in blocks of
    two different peer chains; miners redeem half their balance now and then.

    Asserts: (1) every accepted block is in exactly one best-chain level set or pending; (2) the
    VALID txs in total order spend only outputs created earlier, each at most once, and rebuild
    the UTXO set; (3) UTXOs + root balances == faucet + issued rewards (R(h) per fresh
    non-registration block + milestone bonuses); (4) each deliberate double spend is one VALID
    and one INVALID(double-spend); (5) §7.5: every tx the wallet submitted is VALID exactly once
    or still in the pool (none lost); at least half the blocks carry >= 2 tips.
    """
    sc = Scenario(seed=20261201)
    sc.run()
    chain = sc.chain
    assert len(sc.blocks) == N_BLOCKS
    assert sum(n for k, n in sc.tip_counts.items() if k >= 2) >= N_BLOCKS // 2
    assert sc.tip_counts[PARAMS.max_tip_links] >= 50
    assert chain.best_height >= 10

    # (1) every block ordered exactly once along the best chain
    in_sets: Counter[BlockId] = Counter()
    issued = 0
    for ms in chain.best_chain()[1:]:
        delta = chain.level_set(ms)
        assert delta is not None
        in_sets.update(delta.order)
        h = delta.height
        assert all(chain.ls_height(b) == h for b in delta.order)
        reward = compute_block_reward(h, PARAMS)
        for b in delta.order:
            meta = chain.get_meta(b)
            assert meta is not None
            if meta.peer_height != 1 and is_reward_fresh(h, meta.ms_link_height, PARAMS):
                issued += reward
        issued += compute_milestone_bonus(h, len(delta.order), PARAMS)
    assert [b for b, n in in_sets.items() if n > 1] == []
    pending = set(chain.pending_blocks())
    assert pending.isdisjoint(in_sets)
    assert set(in_sets) | pending == set(sc.blocks)

    # (2) no outpoint spent twice; every VALID spend refers to an earlier output
    unspent: dict[Outpoint, tuple[int, bytes]] = {
        (chain.genesis_id, i): (PARAMS.faucet_amount, OWNER_FAUCET)
        for i in range(PARAMS.faucet_outputs)
    }
    spent: set[Outpoint] = set()
    reasons: dict[TxId, list[int]] = {}
    valid_once: set[TxId] = set()
    valid_transfers = 0
    for ms in chain.best_chain():
        delta = chain.level_set(ms)
        assert delta is not None
        for tx, reason in chain.level_set_txs(delta):
            reasons.setdefault(tx.txid, []).append(reason)
            if reason != Reason.VALID:
                continue
            assert tx.txid not in valid_once, "a tx VALID twice"
            valid_once.add(tx.txid)
            if tx.kind == TxKind.TRANSFER:
                valid_transfers += 1
                for inp in tx.inputs:
                    op = (inp.txid, inp.out_index)
                    assert op not in spent, f"outpoint {op[0].hex()}:{op[1]} spent twice"
                    assert op in unspent, f"VALID spend of {op[0].hex()}:{op[1]} before it exists"
                    spent.add(op)
                    del unspent[op]
                for j, out in enumerate(tx.outputs):
                    unspent[(tx.txid, j)] = (out.amount, out.address)
            elif tx.kind == TxKind.REDEMPTION and len(tx.outputs) == 2:
                unspent[(tx.txid, 1)] = (tx.outputs[1].amount, tx.outputs[1].address)
    assert unspent == {op: (u.amount, u.address) for op, u in chain.utxos().items()}
    assert valid_transfers >= 1_000

    # (3) supply: nothing created or destroyed beyond faucet and rewards
    faucet = PARAMS.faucet_outputs * PARAMS.faucet_amount
    utxo_total = sum(u.amount for u in chain.utxos().values())
    balances = sum(r.balance for r in chain.roots().values())
    assert utxo_total + balances == faucet + issued

    # (3b) §7.5: no submitted tx is lost: each is VALID once or still waits in the pool
    lost = [t for t in sc.submitted if t not in valid_once and t not in sc.mempool]
    assert lost == []
    assert sum(t in valid_once for t in sc.submitted) >= 1_000

    # (4) deliberate double spends: exactly one VALID, one INVALID(double-spend)
    def ordered(tx: Transaction | None) -> bool:
        return tx is not None and any(
            chain.ls_height(b) is not None for b in chain.blocks_with_tx(tx.txid)
        )

    placed = [ds for ds in sc.double_spends if ordered(ds.first) and ordered(ds.second)]
    assert len(placed) >= 25
    for ds in placed:
        assert ds.first is not None
        assert ds.second is not None
        verdicts = sorted(reasons.get(ds.first.txid, []) + reasons.get(ds.second.txid, []))
        assert verdicts == [Reason.VALID, Reason.DOUBLE_SPEND], ds.outpoint

    # miners' redemptions were built honestly, so each is VALID once ordered
    ordered_redemptions = [reasons[t] for t in sc.redemptions if t in reasons]
    assert len(ordered_redemptions) >= 20
    assert all(r == [Reason.VALID] for r in ordered_redemptions)
