"""Per-block cost of the core (docs/benchmarks.md, "Per-block cost"): empty blocks, both weightings.

Run: ``python bench/block_cost.py [--chains 20] [--measured 50]`` (about a minute on 2 cores).

For each shape (``nakamoto``: every block a milestone, b = 1; ``sdag``: b = 80, about one
milestone in 80 blocks) and each ``sortition_weighting`` (``uniform``, ``share``), it mines
``--chains`` peer chains round-robin, K + ``--measured`` empty blocks each (K = 100, the SIM
preset), on a generator Chain (not timed), then replays them into a fresh Chain on a MemoryStore
that counts reads of stored blocks (``b`` rows) and times the last ``--measured`` blocks of every
chain, where S2's window is full (m > K). Round-robin means a chain's K previous blocks lie
chains · K blocks back, past the default memory window (2 · punctuality milestones) in the
nakamoto shape: the regime of issue 23's 20-node double-spend run.

Prints one row per shape and weighting: CPU µs per accepted block and stored-block reads per
block, over the measured blocks. Set PYTHONPATH to another worktree to measure its core (the
script puts its own repository last on the path).
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))

from dagchain.blocks import Block
from dagchain.chain import BlockStatus, Chain
from dagchain.params import SIM, ConsensusParams
from dagchain.storage import schema as S
from dagchain.storage.memory import MemoryStore
from dagchain.types import BlockId
from tests.dagchain.builders import address_of_secret, build_block, secret_of

GENESIS_MS_TARGET_BITS = {"nakamoto": 0x20040000, "sdag": 0x20008000}
"""2^250 (b = 1: about 64 hashes a block) and 2^247 (b = 80: blk_target about 2^253)."""
BLOCK_GAP_MS = 100
NOW_MS = SIM.genesis_timestamp_ms + 10**10
"""The clock of every submission: after every block's timestamp (H11)."""


class CountingStore(MemoryStore):
    """A MemoryStore that counts reads of stored blocks (``b`` rows)."""

    def __init__(self) -> None:
        super().__init__()
        self.block_reads = 0

    def get(self, key: bytes) -> bytes | None:
        if key[:1] == S.P_BLOCK:
            self.block_reads += 1
        return super().get(key)


def shape_params(shape: str, weighting: str) -> ConsensusParams:
    """The SIM preset, retargeting off, with this shape's b and an easy genesis target."""
    return SIM.replace(
        blocks_per_ms=1 if shape == "nakamoto" else 80,
        genesis_ms_target_bits=GENESIS_MS_TARGET_BITS[shape],
        retarget=False,
        sortition_weighting=weighting,
    )


def mine(params: ConsensusParams, chains: int, per_chain: int) -> list[Block]:
    """Empty blocks of ``chains`` peer chains, round-robin, each tip-linking the last block."""
    chain = Chain(params, MemoryStore())
    heads: list[bytes] = [chain.genesis_id] * chains
    blocks: list[Block] = []
    ts = params.genesis_timestamp_ms
    last = chain.genesis_id
    for _ in range(per_chain):
        for i in range(chains):
            ts += BLOCK_GAP_MS
            previous = heads[i]
            new_chain = previous == chain.genesis_id
            block = build_block(
                chain,
                previous=previous,
                tip=last if last != previous else None,
                timestamp_ms=ts,
                register=address_of_secret(secret_of(1000 + i)) if new_chain else None,
            )
            outcome = chain.on_block(block.raw, NOW_MS)
            assert outcome.status is BlockStatus.ACCEPTED, outcome
            heads[i] = block.id
            last = block.id
            blocks.append(block)
    return blocks


def replay(params: ConsensusParams, blocks: list[Block], measured_from: int) -> tuple[float, float]:
    """CPU µs and stored-block reads per block over ``blocks[measured_from:]``."""
    store = CountingStore()
    chain = Chain(params, store)
    for block in blocks[:measured_from]:
        chain.on_block(block.raw, NOW_MS)
    reads = store.block_reads
    start = time.process_time()
    for block in blocks[measured_from:]:
        chain.on_block(block.raw, NOW_MS)
    cpu = time.process_time() - start
    n = len(blocks) - measured_from
    assert chain.has_block(BlockId(blocks[-1].id))
    return cpu / n * 1e6, (store.block_reads - reads) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=20)
    parser.add_argument("--measured", type=int, default=50)
    args = parser.parse_args()
    print(f"{'shape':<9} {'weighting':<8} {'blocks':>6} {'CPU us/block':>13} {'b reads/block':>14}")
    for shape in ("nakamoto", "sdag"):
        for weighting in ("uniform", "share"):
            params = shape_params(shape, weighting)
            k = params.sortition_warmup
            blocks = mine(params, args.chains, k + args.measured)
            us, reads = replay(params, blocks, args.chains * k)
            n = args.chains * args.measured
            print(f"{shape:<9} {weighting:<8} {n:>6} {us:>13.1f} {reads:>14.2f}")


if __name__ == "__main__":
    main()
