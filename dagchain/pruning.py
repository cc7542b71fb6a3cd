"""Pruning: delete old block bodies and undo records in bounded, atomic, resumable steps.

A pruned node (``dagchain-node start --prune-depth D``, docs/node.md "Pruning") keeps the
headers, tip links and txids of every block, every snapshot, level-set record (``l``), index
and the whole ledger, the undo records (``d``) of the milestones above the final one Φ (F6
allows deleting the others), and the bodies of the blocks in the level sets of the last D
best-chain milestones (D >= ``punctuality``, so every level set a reorganisation can undo or
re-apply keeps its bodies).

Each :meth:`Pruner.step` handles whole level sets, lowest height first, up to a block budget:
each pruned block's ``b`` row becomes its stub (``blocks.encode_pruned_block``), the
milestone's ``d`` row is deleted, and the progress row ``META_PRUNE`` moves past them, all in
one store batch; so a crash (SIGKILL) leaves either the whole step or none of it, and the next
start resumes at the stored height. Blocks that no best-chain level set holds (side branches)
keep their bodies.
"""

from typing import final

from dagchain.blocks import Block, encode_pruned_block
from dagchain.chain import Chain
from dagchain.errors import StorageError
from dagchain.storage import schema as S
from dagchain.types import BlockId

DEFAULT_STEP_BLOCKS = 512
"""Blocks per step (one store batch): a few MB of deletes, a few hundred ms at most."""


def get_bodies_from(chain: Chain) -> int:
    """The lowest best-chain milestone height whose level set keeps its block bodies.

    1 on a node that never pruned (genesis has no transactions).
    """
    return max(1, chain.state.pruned_below())


def check_prune_depth(depth: int, punctuality: int) -> None:
    """D must keep every level set a reorganisation can touch: D >= ``punctuality``.

    Raises:
        ValueError: one line naming the bound.
    """
    if depth < punctuality:
        raise ValueError(
            f"prune depth {depth} is below this network's punctuality {punctuality}: "
            f"use at least {punctuality}"
        )


@final
class Pruner:
    """Prunes ``chain`` down to the last ``depth`` milestones, one bounded step at a time.

    Raises:
        ValueError: ``depth`` is below the network's punctuality.
    """

    def __init__(self, chain: Chain, depth: int) -> None:
        check_prune_depth(depth, chain.params.punctuality)
        self.chain = chain
        self.depth = depth
        self.next_height = max(1, chain.state.pruned_below())
        """The lowest best-chain height whose level set still has its bodies."""
        self.blocks_pruned = 0
        """Blocks this pruner turned into stubs."""

    def target(self) -> int:
        """The highest height to prune now: D below the best head, and never above Φ."""
        st = self.chain.state
        final_h = st.best_height_of.get(st.final)
        best = len(st.best) - 1
        return min(best - self.depth, -1 if final_h is None else final_h)

    def step(self, max_blocks: int = DEFAULT_STEP_BLOCKS, limit: int | None = None) -> int:
        """Prune whole level sets from ``next_height`` up in one batch.

        At least one level set, then more while fewer than ``max_blocks`` blocks were pruned;
        none above ``limit`` (the level sets peers may still fetch: decision 40).
        Returns the level sets pruned (0: nothing to do).
        """
        st = self.chain.state
        target = self.target() if limit is None else min(self.target(), limit)
        first = height = self.next_height
        stubs: dict[BlockId, Block] = {}
        deltas: list[BlockId] = []
        while height <= target and len(stubs) < max_blocks:
            milestone = st.best[height]
            record = st.level_set_record(milestone)
            if record is None:
                raise StorageError(f"best-chain milestone {milestone.hex()} has no level set")
            for bid in record.order:
                block = st.blocks.get(bid)
                if block is None:
                    raise StorageError(f"block {bid.hex()} is referenced but not stored")
                if not block.pruned:
                    stub = encode_pruned_block(block)
                    stubs[bid] = Block(block.header, block.tip_links, (), stub, bid, block.txids)
            deltas.append(milestone)
            height += 1
        if height == first:
            return 0
        with st.store.write_batch() as wb:
            for bid, block in stubs.items():
                wb.put(S.P_BLOCK + bid, block.raw)
            for milestone in deltas:
                wb.delete(S.P_DELTA + milestone)
            wb.put(S.META_PRUNE, S.encode_row([self.depth, height]))
        self.next_height = height
        for bid, block in stubs.items():  # memory follows the batch
            st.blocks.replace(bid, block)
        for milestone in deltas:
            st.deltas.discard(milestone)
        self.blocks_pruned += len(stubs)
        return height - first

    def run(self, max_blocks: int = DEFAULT_STEP_BLOCKS) -> int:
        """Step until nothing is left to prune (tests, tools); returns the level sets pruned."""
        total = 0
        while done := self.step(max_blocks):
            total += done
        return total


__all__ = [
    "DEFAULT_STEP_BLOCKS",
    "Pruner",
    "check_prune_depth",
    "get_bodies_from",
]
