"""The k-chain miner of PROTOCOL.md v2 §8.1 "Known weakness of uniform" (§8.3 go/no-go v2).

``attack.kind = "multi_root"``: one mining node with ``attack.share`` of the hash power that
registers ``attack.roots`` = k peer chains (one REGISTRATION block each, under k key addresses)
and then, each time it finds a solution, builds the honest §3.4 template of every one of its
chains and mines the one whose txs pay the most fees (ties: the chain registered first). Its
blocks travel through the simulated network like any honest block; only the choice of chain is
strategic. Under ``uniform`` weighting every chain sees a fresh fraction c of the pool, so k
chains let it pick the best of k draws (covering 1 - (1 - c)^k of the pool); under ``share``
weighting each chain's ŝ is about share/k.

Metrics (``Simulation``): its chains' blocks are labelled ``attacker``; ``attacker_fee_share``
(fees of the VALID txs in its blocks over all), ``attacker_hash_share``, ``attacker_roots``
(chains registered), ``attacker_blocks`` and ``attacker_revenue_share`` beside everyone's
``duplicate_tx_rate``.
"""

import random
from typing import Any, final

from dagchain.crypto import address_from_pubkey, xonly_pubkey
from dagchain.transactions import Transaction
from dagchain.types import BlockId
from miner.search import search_nonce
from miner.template import BlockTemplate, build_template, registration_tx
from simulator.engine import Engine
from simulator.mining import NONCE_BITS, SEARCH_COUNT, MinedSink
from simulator.sim_node import SimNode


def chain_secret(index: int, j: int) -> bytes:
    """The key of the attacker's ``j``-th peer chain (distinct from every honest miner's)."""
    return (1_000_000 + index * 10_000 + j).to_bytes(32, "big")


@final
class MultiRootMiner:
    """One node's miner with ``roots`` peer chains; the same interface as ``mining.Miner``."""

    def __init__(
        self,
        node: SimNode,
        share: float,
        roots: int,
        blocks_per_ms_at_genesis: float,
        genesis_blk_target: int,
        engine: Engine,
        rng: random.Random,
        sink: MinedSink,
    ) -> None:
        self.node = node
        self.share = share
        self.k = roots
        self._rate_scale = share * blocks_per_ms_at_genesis / genesis_blk_target
        self.engine = engine
        self.rng = rng
        self.sink = sink
        self.registrations: list[Transaction] = [
            registration_tx(address_from_pubkey(xonly_pubkey(chain_secret(node.index, j))))
            for j in range(roots)
        ]
        self.roots: list[BlockId] = []
        """The registered peer chains, in registration order."""
        self.target = 0
        self._handle: int | None = None
        self.blocks = 0
        self.choices: dict[int, int] = {}
        """Chain index -> blocks mined on it (after the registrations)."""
        self.stopped = False

    def start(self) -> None:
        self._schedule()

    def stop(self) -> None:
        self.stopped = True
        if self._handle is not None:
            self.engine.cancel(self._handle)
            self._handle = None

    def _schedule(self) -> None:
        if self.stopped or self.share <= 0:
            return
        self.target = self.node.chain.best_snapshot.blk_target
        rate = self._rate_scale * self.target
        self._handle = self.engine.schedule(self.rng.expovariate(rate), self._solve)

    def on_head_change(self) -> None:
        if self.stopped or self._handle is None:
            return
        if self.node.chain.best_snapshot.blk_target != self.target:
            self.engine.cancel(self._handle)
            self._schedule()

    def _fees(self, template: BlockTemplate) -> int:
        pool = self.node.mempool
        total = 0
        for tx in template.txs:
            entry = pool.get(tx.txid)
            if entry is not None:
                total += entry.fee
        return total

    def _best_template(self) -> tuple[BlockTemplate | None, int]:
        """The next registration while fewer than k chains exist, else the best-paying chain."""
        node = self.node
        now = node.now()
        if len(self.roots) < self.k:
            reg = self.registrations[len(self.roots)]
            return build_template(node.chain, node.mempool, now, registration=reg), -1
        best: BlockTemplate | None = None
        best_fees = -1
        choice = -1
        for j, root in enumerate(self.roots):
            template = build_template(node.chain, node.mempool, now, root=root)
            if template is None:
                continue
            fees = self._fees(template)
            if fees > best_fees:
                best, best_fees, choice = template, fees, j
        return best, choice

    def _solve(self) -> None:
        self._handle = None
        node = self.node
        template, choice = self._best_template()
        if template is not None:
            start = self.rng.getrandbits(NONCE_BITS)
            nonce = search_nonce(template.prefix, template.target, start, SEARCH_COUNT)
            if nonce is None:  # pragma: no cover - 2^40 attempts at p ~ 1/100
                raise RuntimeError("no nonce found")
            block = template.solve(nonce)
            self.blocks += 1
            node.on_deliver_block(block.id, block.raw, node.index)
            meta = node.chain.get_meta(block.id)
            if meta is None:
                raise RuntimeError(f"node {node.index} did not accept its own block")
            self.sink.on_mined(node.index, block, self.engine.now_ms, meta.is_milestone)
            if choice < 0:
                self.roots.append(block.id)
            else:
                self.choices[choice] = self.choices.get(choice, 0) + 1
        self._schedule()

    def metrics(self) -> dict[str, Any]:
        """The attacker's own facts (fee and revenue shares come from the observer's chain)."""
        used = sorted(self.choices.values(), reverse=True)
        return {
            "attack_model": "network-multi-root",
            "attacker_hash_share": round(self.share, 6),
            "attacker_roots": len(self.roots),
            "attacker_roots_wanted": self.k,
            "attacker_blocks": self.blocks,
            "attacker_chains_used": len(used),
        }


__all__ = ["MultiRootMiner", "chain_secret"]
