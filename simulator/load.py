"""Transaction load: a Poisson stream of real signed TRANSFERs from a wallet.

The wallet owns the sim genesis faucet outputs (§10: the public key 1) and watches one node's best
chain (the observer). Each tx spends one confirmed output it has not spent yet and pays the same
key again in ``n`` outputs (n from ``load.tx_bytes``; at least 2, so the set of spendable outputs
grows); the first txs fan each faucet output out into 64, unless the run is prefunded
(``load.prefunded_outputs``: the genesis holds that many faucet outputs and no tx fans out). A tx
enters the network at a uniformly chosen node. When no confirmed output is free, the arrival is
skipped and counted as starved.

The entry node admits the tx as ``POST /v1/txs`` would. One that refuses it because its own best
chain does not hold the spent output yet (409 ``missing-input``: it lags the observer) is offered
the tx again every ``REOFFER_MS``, at most ``REOFFER_MAX`` times, as a wallet told so would
resubmit (``dagchain-wallet load`` rechecks every second); ``txs_reoffered`` counts the offers
made again. Any other refusal is final.
"""

import random
from collections.abc import Sequence
from typing import Protocol, final

from dagchain.errors import Reason
from dagchain.genesis import FAUCET_ADDRESS, FAUCET_SECRET
from dagchain.ledger import LevelSetDelta
from dagchain.params import ConsensusParams
from dagchain.transactions import Transaction, TxKind, TxOut, sign_transaction
from dagchain.types import TxId
from simulator.engine import Engine
from simulator.sim_node import MISSING_INPUT, SimNode

TX_BASE_BYTES = 141
"""Size of a one-input, zero-output TRANSFER; each output adds ``TX_OUTPUT_BYTES``."""
TX_OUTPUT_BYTES = 44
FAN_OUT = 64
MIN_FEE = 1_000
MAX_FEE = 10_000
REOFFER_MS = 1_000.0
"""A tx refused for a missing input is offered again after this long (wallet/loadgen.py's
``RECHECK_INTERVAL_S``)."""
REOFFER_MAX = 30
"""... at most this many times (30 s: a node lagging longer has a problem of its own)."""

Outpoint = tuple[bytes, int]


class TxEntry(Protocol):
    """A node a tx can enter the network at (a SimNode or a RelayNode)."""

    @property
    def index(self) -> int: ...

    def offer_tx(self, txid: TxId, raw: bytes) -> str | None:
        """The wallet's submission: None if taken, else the refusal's code."""
        ...


class TxSink(Protocol):
    """Receives each tx the load offers (the metrics recorder)."""

    def on_offered(self, tx: Transaction, now_ms: float) -> None: ...


@final
class TxLoad:
    """Offers ``tps`` txs per second at random nodes."""

    def __init__(
        self,
        tps: float,
        tx_bytes: int,
        nodes: Sequence[TxEntry],
        observer: SimNode,
        params: ConsensusParams,
        engine: Engine,
        rng: random.Random,
        sink: TxSink,
        *,
        fan_out: bool = True,
    ) -> None:
        self.rate_per_ms = tps / 1000.0
        self.outputs = max(2, round((tx_bytes - TX_BASE_BYTES) / TX_OUTPUT_BYTES))
        self.nodes = nodes
        self.observer = observer
        self.params = params
        self.engine = engine
        self.rng = rng
        self.sink = sink
        gid = observer.chain.genesis_id
        self.spendable: list[Outpoint] = [(gid, i) for i in range(params.faucet_outputs)]
        self.fan_out = FAN_OUT if fan_out else self.outputs
        """Outputs of a tx spending a genesis output: FAN_OUT from PROTOCOL.md §10's 64 faucet
        UTXOs; a prefunded genesis (``fan_out=False``) needs none."""
        self.used: set[Outpoint] = set()
        self.offered = 0
        self.starved = 0
        self.reoffered = 0
        self.stopped = False

    def start(self) -> None:
        if self.rate_per_ms > 0:
            self.engine.schedule(self.rng.expovariate(self.rate_per_ms), self._arrive)

    def on_level_set(self, delta: LevelSetDelta) -> None:
        """The observer applied a level set: VALID txs of ours free their outputs."""
        chain = self.observer.chain
        i = 0
        for bid in delta.order:
            block = chain.get_block(bid)
            if block is None:  # pragma: no cover
                continue
            for tx in block.txs:
                if delta.reasons[i] == Reason.VALID and tx.kind == TxKind.TRANSFER:
                    for j, out in enumerate(tx.outputs):
                        if out.address == FAUCET_ADDRESS and (tx.txid, j) not in self.used:
                            self.spendable.append((tx.txid, j))
                i += 1

    def _take(self) -> tuple[Outpoint, int] | None:
        chain = self.observer.chain
        while self.spendable:
            k = self.rng.randrange(len(self.spendable))
            self.spendable[k], self.spendable[-1] = self.spendable[-1], self.spendable[k]
            op = self.spendable.pop()
            utxo = chain.get_utxo(*op)
            if op not in self.used and utxo is not None:
                return op, utxo.amount
        return None

    def _arrive(self) -> None:
        if self.stopped:
            return
        self.engine.schedule(self.rng.expovariate(self.rate_per_ms), self._arrive)
        found = self._take()
        if found is None:
            self.starved += 1
            return
        op, amount = found
        fee = self.rng.randrange(MIN_FEE, MAX_FEE)
        n = self.fan_out if op[0] == self.observer.chain.genesis_id else self.outputs
        if amount - fee < n:
            return
        each = (amount - fee) // n
        outs = [TxOut(each, FAUCET_ADDRESS) for _ in range(n - 1)]
        outs.append(TxOut(amount - fee - each * (n - 1), FAUCET_ADDRESS))
        tx = sign_transaction(
            TxKind.TRANSFER, [(TxId(op[0]), op[1])], outs, [FAUCET_SECRET], self.params
        )
        self.used.add(op)
        self.offered += 1
        self.sink.on_offered(tx, self.engine.now_ms)
        node = self.nodes[self.rng.randrange(len(self.nodes))]
        self._offer(node, tx, 0)

    def _offer(self, node: TxEntry, tx: Transaction, attempts: int) -> None:
        if node.offer_tx(tx.txid, tx.raw) == MISSING_INPUT and attempts < REOFFER_MAX:
            self.engine.schedule(REOFFER_MS, self._reoffer, node, tx, attempts + 1)

    def _reoffer(self, node: TxEntry, tx: Transaction, attempts: int) -> None:
        self.reoffered += 1
        self._offer(node, tx, attempts)


__all__ = ["TxEntry", "TxLoad", "TxSink"]
