"""Core throughput benchmark: validate and apply blocks of 128 signed transactions.

Results and their reading: docs/benchmarks.md, section "Core".

Run: ``python bench/core.py [--blocks N] [--levelset-blocks N]``. Prints a table and, as its last
line, ``tx_per_s: <number>``: transactions fully validated (decode, stateless rules, signatures)
and applied to the ledger (level-set ordering, V1-V8, rewards, one store batch per milestone) per
second on one core, with the in-memory store (wall time, best of three runs). The table also
shows the CPU time of the best run, which other processes on a shared machine disturb less;
``--phases`` prints CPU microseconds per tx of each phase, ``--profile`` a cProfile.
"""

import argparse
import cProfile
import gc
import pstats
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagchain.chain as chain_module
from dagchain.blocks import Block, decode_block
from dagchain.chain import Chain
from dagchain.genesis import FAUCET_SECRET
from dagchain.levelset import compute_level_set
from dagchain.params import SIM, ConsensusParams
from dagchain.state import ChainState
from dagchain.storage.memory import MemoryStore
from dagchain.transactions import TxKind, TxOut, sign_transaction, verify_tx_signatures
from dagchain.types import Address, BlockId, TxId
from tests.dagchain.builders import address_of_secret, build_block, secret_of

TXS_PER_BLOCK = 128
BLOCKS_PER_LEVEL_SET = 8
NOW = SIM.genesis_timestamp_ms + 10**10


def bench_params() -> ConsensusParams:
    """SIM with a short warm-up and uniform c = 1: every tx is assigned, S4 is still hashed."""
    return SIM.replace(
        sortition_warmup=2, sortition_weighting="uniform", sortition_c_num=1, sortition_c_den=1
    )


def build_workload(
    params: ConsensusParams, blocks: int, *, long_run: bool = False
) -> tuple[MemoryStore, list[Block]]:
    """A chain after setup (2 peer chains past warm-up, faucet split) and the blocks to time.

    Each tx spends one coin into two outputs of 6 and 4 units minus the fee: once the split's
    4,032 coins are spent, the txs spending their outputs overspend and are INVALID (the
    validation cost is the same). ``long_run`` splits each coin's own amount instead, so every
    tx stays VALID and the ledger grows as under real load, and spaces the timed blocks'
    timestamps one milestone interval per level set, so the targets stay put over thousands of
    blocks instead of hardening until grinding a nonce dominates (``bench/storage.py
    --prune-depth``, which streams the same blocks with :func:`stream_workload`).
    """
    store, start = workload_setup(params)
    timed: list[Block] = []
    # Blocks to time are built on a scratch copy so the measured chain sees them fresh.
    scratch = Chain(params, _copy(store))
    for b in stream_workload(scratch, start, blocks, long_run=long_run):
        scratch.on_block(b.raw, NOW)
        timed.append(b)
    return store, timed


@dataclass(frozen=True)
class WorkloadStart:
    """Where the timed blocks start: the setup's two chain heads and its split txs (63 coins
    of 10**9 each)."""

    heads: list[BlockId]
    split_txids: list[TxId]


def workload_setup(params: ConsensusParams) -> tuple[MemoryStore, WorkloadStart]:
    """The setup chain of :func:`build_workload` (deterministic) and where its blocks start."""
    store = MemoryStore()
    chain = Chain(params, store)
    gid = chain.genesis_id
    addr = Address(address_of_secret(_KEY))
    heads = []
    for i in range(2):
        b = build_block(
            chain, previous=gid, tip=gid, register=bytes([i]) * 32, want_milestone=False
        )
        chain.on_block(b.raw, NOW)
        heads.append(b.id)
    for _ in range(3):
        for i in range(2):
            b = build_block(chain, previous=heads[i], tip=heads[1 - i], want_milestone=False)
            chain.on_block(b.raw, NOW)
            heads[i] = b.id
    # Split the 64 faucet outputs into 64 x 63 outputs of the bench key, then confirm them.
    splits = [
        sign_transaction(
            TxKind.TRANSFER,
            [(TxId(gid), i)],
            [TxOut(10**9, addr)] * 63,
            [FAUCET_SECRET],
            params,
        )
        for i in range(params.faucet_outputs)
    ]
    b = build_block(chain, previous=heads[0], tip=heads[1], txs=splits, want_milestone=False)
    chain.on_block(b.raw, NOW)
    heads[0] = b.id
    b = build_block(chain, previous=heads[1], tip=heads[0], want_milestone=True)
    chain.on_block(b.raw, NOW)
    heads[1] = b.id
    return store, WorkloadStart(heads, [s.txid for s in splits])


_KEY = secret_of(7)
"""The bench key: every timed tx spends and pays to its address."""


def stream_workload(
    chain: Chain, start: WorkloadStart, blocks: int, *, long_run: bool = False
) -> Iterator[Block]:
    """:func:`build_workload`'s timed blocks, one at a time, built on ``chain``.

    ``chain`` starts as the setup's chain (a copy of its store) and the caller applies each
    block to it before asking for the next. Only the spendable coins are kept between blocks
    (a FIFO of (txid, index, amount): 12.8 million of them after 100,000 blocks of
    ``long_run``), so the blocks can be applied and dropped as they come.
    """
    params = chain.params
    addr = Address(address_of_secret(_KEY))
    heads = list(start.heads)
    coins: deque[tuple[TxId, int, int]] = deque(
        (txid, j, 10**9) for txid in start.split_txids for j in range(63)
    )
    last_block = chain.get_block(heads[1])
    start_ms = last_block.header.timestamp_ms if last_block is not None else 0
    spacing = params.milestone_interval_ms // BLOCKS_PER_LEVEL_SET
    for n in range(blocks):
        txs = []
        for _ in range(TXS_PER_BLOCK):
            txid, index, value = coins.popleft()
            split = (6 * 10**8, 4 * 10**8 - 1000)
            if long_run:
                split = ((value - 1000) // 2, value - 1000 - (value - 1000) // 2)
            tx = sign_transaction(
                TxKind.TRANSFER,
                [(txid, index)],
                [TxOut(split[0], addr), TxOut(split[1], addr)],
                [_KEY],
                params,
            )
            # Without long_run an output's own amount is not tracked: spent as 10**9 (INVALID).
            coins.append((tx.txid, 0, split[0] if long_run else 10**9))
            coins.append((tx.txid, 1, split[1] if long_run else 10**9))
            txs.append(tx)
        side = n % 2
        want = (n + 1) % BLOCKS_PER_LEVEL_SET == 0
        b = build_block(
            chain,
            previous=heads[side],
            tip=heads[1 - side],
            txs=txs,
            want_milestone=want,
            timestamp_ms=start_ms + spacing * (n + 1) if long_run else None,
        )
        heads[side] = b.id
        yield b


def _copy(store: MemoryStore) -> MemoryStore:
    copy = MemoryStore()
    with copy.write_batch() as wb:
        for k, v in store.snapshot().items():
            wb.put(k, v)
    return copy


def time_full(
    params: ConsensusParams, store: MemoryStore, blocks: list[Block], cpu: list[float] | None = None
) -> float:
    """Seconds to run on_block over every block on a fresh chain reopened from ``store``.

    Wall time; the CPU time of the same run (``time.process_time``) is appended to ``cpu``.

    Before the clock starts, the previous run's chain (cyclic garbage) is collected and every
    live object, the opened chain included, is frozen out of GC scans, as a node does after
    loading: so every run starts from the same heap and the same GC thresholds.
    """
    chain = Chain(params, _copy(store))
    gc.unfreeze()  # let the collection see the previous run's chain
    gc.collect()
    gc.freeze()
    start, start_cpu = time.perf_counter(), time.process_time()
    for b in blocks:
        chain.on_block(b.raw, NOW)
    elapsed = time.perf_counter() - start
    if cpu is not None:
        cpu.append(time.process_time() - start_cpu)
    assert chain.best_height >= len(blocks) // BLOCKS_PER_LEVEL_SET, "milestones not applied"
    return elapsed


PHASES = (
    ("decode (H1)", chain_module, "decode_block"),
    ("merkle root (H7)", chain_module, "compute_merkle_root"),
    ("stateless T1-T5 (H6, H8, H10)", Chain, "_check_body"),
    ("signatures (T6, H9)", chain_module, "verify_tx_signatures"),
    ("A1 batch", ChainState, "write_accept"),
    ("level-set order (L2)", chain_module, "compute_level_set"),
    ("ledger evaluation (V1-V8)", chain_module, "evaluate_level_set"),
    ("A2+A3 batch", ChainState, "write_apply"),
)
"""Functions timed by ``--phases``: (label, where it is looked up by Chain, attribute)."""


def time_phases(
    params: ConsensusParams, store: MemoryStore, blocks: list[Block], runs: int
) -> dict[str, float]:
    """CPU seconds per phase (best of ``runs``), by wrapping the functions ``Chain`` calls.

    CPU time (``time.process_time``) rather than wall time: on a shared machine it leaves out
    the time other processes hold the core. ``other`` is ``on_block`` minus the phases (header
    and DAG checks, the signature cache, fork choice, and most garbage collection).
    """
    spent: dict[str, float] = {}
    originals = [(owner, name, getattr(owner, name)) for _, owner, name in PHASES]

    def timed(label: str, fn: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - t

        return wrapper

    best: dict[str, float] = {}
    try:
        for label, owner, name in PHASES:
            setattr(owner, name, timed(label, getattr(owner, name)))
        on_block = Chain.on_block
        Chain.on_block = timed("on_block", on_block)  # type: ignore[method-assign,assignment]
        for _ in range(runs):
            spent.clear()
            time_full(params, store, blocks)
            for label, secs in spent.items():
                best[label] = min(best.get(label, secs), secs)
    finally:
        Chain.on_block = on_block  # type: ignore[method-assign]
        for owner, name, fn in originals:
            setattr(owner, name, fn)
    best["other"] = best["on_block"] - sum(best[label] for label, _, _ in PHASES)
    return best


def time_levelset(n: int) -> float:
    """Seconds to order one level set of ``n`` blocks (two interleaved peer chains, tip links)."""
    links: dict[BlockId, tuple[BlockId, BlockId, BlockId]] = {}
    genesis = BlockId(bytes(32))
    ids = [BlockId(i.to_bytes(32, "little")) for i in range(1, n + 1)]
    for i, bid in enumerate(ids):
        prev = ids[i - 2] if i >= 2 else genesis
        tip = ids[i - 1] if i >= 1 else genesis
        links[bid] = (genesis, prev, tip if tip != prev else genesis)
    start = time.perf_counter()
    order = compute_level_set(ids[-1], links.__getitem__, lambda b: b == genesis)
    elapsed = time.perf_counter() - start
    assert len(order) == n
    return elapsed


def main() -> None:
    """Run the benchmark and print the table; last line ``tx_per_s``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=48, help="blocks of 128 txs to time")
    parser.add_argument("--levelset-blocks", type=int, default=10_000)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the full run")
    parser.add_argument(
        "--phases", action="store_true", help="print CPU microseconds per tx of each phase"
    )
    args = parser.parse_args()
    params = bench_params()
    print(f"building {args.blocks} blocks of {TXS_PER_BLOCK} signed txs ...", file=sys.stderr)
    store, blocks = build_workload(params, args.blocks)
    ntx = sum(len(b.txs) for b in blocks)
    raws = [b.raw for b in blocks]

    t0 = time.perf_counter()
    decoded = [decode_block(r, params) for r in raws]
    t_decode = time.perf_counter() - t0
    t0 = time.perf_counter()
    for b in decoded:
        for tx in b.txs:
            verify_tx_signatures(tx, params)
    t_sigs = time.perf_counter() - t0
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        time_full(params, store, blocks)
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    gc.collect()
    gc.freeze()  # as a long-running node does after loading: old objects leave GC scans
    cpu: list[float] = []
    t_full = min(time_full(params, store, blocks, cpu) for _ in range(3))
    t_cpu = min(cpu)
    t_ls = time_levelset(args.levelset_blocks)
    if args.phases:
        phases = time_phases(params, store, blocks, 3)
        total = phases.pop("on_block")
        print(f"{'phase (CPU, best of 3)':34} {'us/tx':>9}")
        for label, secs in phases.items():
            print(f"{label:34} {secs / ntx * 1e6:9.2f}")
        sig = phases["signatures (T6, H9)"]
        print(f"{'everything but signatures':34} {(total - sig) / ntx * 1e6:9.2f}")
        print(f"{'on_block':34} {total / ntx * 1e6:9.2f}")

    rows = [
        ("decode blocks (H1, E3-E6)", t_decode, ntx / t_decode),
        ("verify signatures (T6)", t_sigs, ntx / t_sigs),
        ("everything but signatures", t_full - t_sigs, ntx / max(t_full - t_sigs, 1e-9)),
        ("full: accept + order + apply", t_full, ntx / t_full),
        ("full, CPU time (process_time)", t_cpu, ntx / t_cpu),
    ]
    print(f"{'stage':34} {'seconds':>9} {'tx/s':>10}")
    for name, secs, rate in rows:
        print(f"{name:34} {secs:9.3f} {rate:10.0f}")
    print(f"{'order one level set':34} {t_ls:9.3f} {args.levelset_blocks:>7} blocks")
    print(f"txs: {ntx} in {len(blocks)} blocks, {len(blocks) // BLOCKS_PER_LEVEL_SET} level sets")
    print(f"tx_per_s: {ntx / t_full:.0f}")


if __name__ == "__main__":
    main()
