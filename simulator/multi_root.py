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

from dagchain.blocks import Block
from dagchain.crypto import address_from_pubkey, xonly_pubkey
from dagchain.template import BlockTemplate, build_template, registration_tx
from dagchain.transactions import Transaction
from dagchain.types import BlockId
from simulator.engine import Engine
from simulator.mining import MinedSink, Miner
from simulator.sim_node import SimNode


def chain_secret(index: int, j: int) -> bytes:
    """The key of the attacker's ``j``-th peer chain (distinct from every honest miner's)."""
    return (1_000_000 + index * 10_000 + j).to_bytes(32, "big")


@final
class MultiRootMiner(Miner):
    """One node's miner with ``roots`` peer chains: ``mining.Miner`` choosing its chain."""

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
        super().__init__(
            node, share, blocks_per_ms_at_genesis, genesis_blk_target, engine, rng, sink
        )
        self.k = roots
        self.registrations: list[Transaction] = [
            registration_tx(address_from_pubkey(xonly_pubkey(chain_secret(node.index, j))))
            for j in range(roots)
        ]
        self.roots: list[BlockId] = []
        """The registered peer chains, in registration order."""
        self.choices: dict[int, int] = {}
        """Chain index -> blocks mined on it (after the registrations)."""
        self._choice = -1

    def _fees(self, template: BlockTemplate) -> int:
        pool = self.node.mempool
        total = 0
        for tx in template.txs:
            entry = pool.get(tx.txid)
            if entry is not None:
                total += entry.fee
        return total

    def _template(self) -> BlockTemplate | None:
        """The next registration while fewer than k chains exist, else the best-paying chain."""
        node = self.node
        now = node.now()
        self._choice = -1
        if len(self.roots) < self.k:
            reg = self.registrations[len(self.roots)]
            return build_template(node.chain, node.mempool, now, registration=reg)
        best: BlockTemplate | None = None
        best_fees = -1
        for j, root in enumerate(self.roots):
            template = build_template(node.chain, node.mempool, now, root=root)
            if template is None:
                continue
            fees = self._fees(template)
            if fees > best_fees:
                best, best_fees, self._choice = template, fees, j
        return best

    def _mined(self, block: Block) -> None:
        if self._choice < 0:
            self.roots.append(block.id)
        else:
            self.choices[self._choice] = self.choices.get(self._choice, 0) + 1

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
