"""Miners: *when* from exponential waits per hash share, *what* from the real template and PoW.

PROTOCOL.md §10 (sim): miner i's next solution comes after an exponential wait with rate
h_i · blk_target / 2^256, where h_i is its virtual hash rate. The virtual hash rates are fixed at
the start so that the whole network makes ``block_rate`` blocks/s at the genesis block target;
a retarget that changes the block target changes the rate (the wait is memoryless, so a miner
redraws when its milestone link's target changes). At the chosen instant the miner builds an
honest §3.4 template from its node's current state (``dagchain.template``) and grinds a real nonce
(``miner.search``) from a random start until LE(id) <= blk_target; the real hash then decides
whether the block is a milestone, so the milestone probability p is exact.
"""

import random
from typing import Protocol

from dagchain.blocks import Block
from dagchain.crypto import address_from_pubkey, xonly_pubkey
from dagchain.template import BlockTemplate, build_template, registration_tx
from dagchain.transactions import Transaction
from miner.search import search_nonce
from simulator.engine import Engine
from simulator.sim_node import SimNode

NONCE_BITS = 62
"""Nonce search starts at a random 62-bit value (the u64 nonce cannot overflow)."""
SEARCH_COUNT = 1 << 40


class MinedSink(Protocol):
    """Receives each block a miner solves (the metrics recorder)."""

    def on_mined(self, miner: int, block: Block, now_ms: float, is_milestone: bool) -> None: ...


def miner_secret(index: int) -> bytes:
    """A deterministic key for the miner of node ``index`` (its REGISTRATION address)."""
    return (10_000 + index).to_bytes(32, "big")


def registration_for(index: int) -> Transaction:
    """The REGISTRATION tx naming miner ``index``'s key address (§7.1)."""
    return registration_tx(address_from_pubkey(xonly_pubkey(miner_secret(index))))


class Miner:
    """The mining process of one node, with ``share`` of the network's virtual hash rate."""

    def __init__(
        self,
        node: SimNode,
        share: float,
        blocks_per_ms_at_genesis: float,
        genesis_blk_target: int,
        engine: Engine,
        rng: random.Random,
        sink: MinedSink,
    ) -> None:
        self.node = node
        self.share = share
        self._rate_scale = share * blocks_per_ms_at_genesis / genesis_blk_target
        self.engine = engine
        self.rng = rng
        self.sink = sink
        self.registration = registration_for(node.index)
        self.target = 0
        self._handle: int | None = None
        self.blocks = 0
        self.stopped = False

    def start(self) -> None:
        """Draw the first solution time."""
        self._schedule()

    def stop(self) -> None:
        """Mine no more (the drain phase at the end of a run)."""
        self.stopped = True
        if self._handle is not None:
            self.engine.cancel(self._handle)
            self._handle = None

    def _schedule(self) -> None:
        if self.stopped or self.share <= 0:
            return
        self.target = self.node.chain.best_snapshot.blk_target
        rate = self._rate_scale * self.target  # solutions per ms: h_i * blk_target / 2^256
        self._handle = self.engine.schedule(self.rng.expovariate(rate), self._solve)

    def on_head_change(self) -> None:
        """Redraw the wait if the block target changed (memoryless, so this is exact)."""
        if self.stopped or self._handle is None:
            return
        if self.node.chain.best_snapshot.blk_target != self.target:
            self.engine.cancel(self._handle)
            self._schedule()

    def _template(self) -> BlockTemplate | None:
        """The honest §3.4 template of this node's peer chain (a subclass may choose another)."""
        node = self.node
        return build_template(
            node.chain, node.mempool, node.now(), root=node.root, registration=self.registration
        )

    def _mined(self, block: Block) -> None:
        """After our own block is accepted: the first one becomes the node's root."""
        if self.node.root is None:
            self.node.root = block.id

    def _grind(self, template: BlockTemplate) -> tuple[Block, bool]:
        """Solve ``template``, hand the block to our node; (block, is it a milestone)."""
        node = self.node
        start = self.rng.getrandbits(NONCE_BITS)
        nonce = search_nonce(template.prefix, template.target, start, SEARCH_COUNT)
        if nonce is None:  # pragma: no cover - 2^40 attempts at p ~ 1/100
            raise RuntimeError("no nonce found")
        block = template.solve(nonce)
        node.on_deliver_block(block.id, block.raw, node.index)
        meta = node.chain.get_meta(block.id)
        if meta is None:  # our own honest block must be accepted
            raise RuntimeError(f"node {node.index} did not accept its own block")
        return block, meta.is_milestone

    def register(self) -> None:
        """``miners.warm_start``: mine our REGISTRATION block now, left out of the metrics (the
        recorder is not told), and take it as our root; nothing if we have one."""
        if self.node.root is not None or self.share <= 0:
            return
        template = self._template()
        if template is None or not template.needs_registration:  # pragma: no cover - invariant
            raise RuntimeError(f"node {self.node.index} has no registration template")
        block, _ = self._grind(template)
        self._mined(block)

    def _solve(self) -> None:
        self._handle = None
        template = self._template()
        if template is not None:
            block, is_milestone = self._grind(template)
            self.blocks += 1
            self.sink.on_mined(self.node.index, block, self.engine.now_ms, is_milestone)
            self._mined(block)
        self._schedule()


__all__ = ["MinedSink", "Miner", "miner_secret", "registration_for"]
