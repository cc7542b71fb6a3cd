"""Storage benchmark: LevelDB against memory, restart time, disk use, resident memory.

Results and their reading: docs/benchmarks.md, section "Storage".

Run: ``python bench/storage.py [--blocks 300000] [--levelset-sample 20000] [--synced-sample 1000]
[--full-blocks 240] [--repeat 2] [--out DIR]``.

1. Generates ``--blocks`` DEVNET blocks (two peer chains taking turns, empty blocks; on DEVNET
   every hash is a block and about one in four a milestone, so a level set holds about 4 blocks)
   into a file.
2. Child processes replay that file, each on a fresh chain, timing ``on_block`` (and the batch
   writes) only: on a MemoryStore (the reference rate), and on LevelDB with one synced batch per
   level set (``Chain.write_group``, what P9 does for downloaded blocks, PROTOCOL.md §12 A1), 8
   level sets per batch (P9 with 8 level sets ready, ``NodeService.sync_batch``), one unsynced
   batch per level set and per block (no fsync: the CPU cost of LevelDB), and one synced batch
   per block (the relay path: A1 before acknowledgement). The full-length runs are repeated
   ``--repeat`` times, interleaved, and the best rate of each kept (the machine is shared).
   Every ratio compares rates over the same first n blocks, by wall time and by the process's
   CPU time (which includes LevelDB's background compaction thread, and is less disturbed when
   other work shares the machine).
3. The unsynced per-block child reads VmRSS after 100,000 blocks and at the end (after
   ``gc.collect()``; blocks streamed from the file), samples VmRSS and RssAnon every 5,000 blocks
   and reports their peak over the 50,000 blocks before each checkpoint, and VmHWM. VmRSS swings
   by half with the memtable's fill and with LevelDB's memory-mapped table files (RssFile: pages
   compaction just read, reclaimable page cache), so one sample says little about growth; RssAnon
   is the process's private memory. It also copies the database at 100,000 blocks;
   ``Chain(params, LevelDBStore(path))`` on that copy is the restart time (checksum scan of every
   table + recovery; and without the scan); bytes on disk per block are the copy's size.
4. Full blocks: ``--full-blocks`` blocks of 128 signed transactions (bench/core.py's workload, 8
   blocks per level set) applied on memory and on LevelDB with one synced batch per level set.

Last line: ``restart_s_100k: <seconds>``.

With ``--prune-depth D`` only the pruning measurement runs (``--prune-blocks`` full blocks, 128
signed txs each, 8 per level set, bench/core.py's workload on SIM parameters, punctuality 100,
with every tx VALID, each spending one output into two, and timestamps 1.25 s apart):
the blocks are applied twice to LevelDB, one synced batch per level set, once as an unpruned
node and once as a node with ``--prune-depth D`` (a pruning pass of 64-block steps after each
level set, as the daemon's task runs). Each node runs in its own child process (the two at once,
or one after the other with ``--prune-serial``), which streams the workload: it builds each block
on its own chain, applies it and drops it (building is left out of the apply times), so memory
holds a chain and the spendable coins, not the workload, and 100,000 blocks fit; the workload is
deterministic and the children's digests of the block ids must agree. Each child prints a
progress line to stderr every 5,000 blocks. Reported: disk use (the database directory as left,
and after a full compaction, which is when LevelDB has given back the space of the deleted rows),
the logical bytes (keys + values) by row kind, the apply rates, the restart time and peak
resident set of each, and disk per day at 1,024 tx/s extrapolated from bytes per block. Last line:
``restart_s_pruned: <seconds>``.
"""

import argparse
import contextlib
import gc
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dagchain.blocks import PRUNED_PREFIX, Block
from dagchain.chain import Chain
from dagchain.params import DEVNET
from dagchain.storage import KVStore
from dagchain.storage.leveldb import LevelDBStore
from dagchain.storage.memory import MemoryStore
from dagchain.types import BlockId
from tests.dagchain.builders import address_of_secret, build_block, secret_of

PARAMS = DEVNET
NOW = PARAMS.genesis_timestamp_ms + 10**12
CHECKPOINT = 100_000
SAMPLE_EVERY = 5_000
"""VmRSS and RssAnon are sampled every this many blocks."""
PEAK_WINDOW = 50_000
"""The samples' peak over this many blocks before each checkpoint is reported."""


def generate(count: int, path: Path) -> float:
    """Write ``count`` blocks (length-prefixed) to ``path``; return seconds spent in on_block."""
    chain = Chain(PARAMS, MemoryStore())
    gid = chain.genesis_id
    heads: list[BlockId] = [gid, gid]
    spent = 0.0
    with path.open("wb") as f:
        for n in range(count):
            side = n % 2
            other = heads[1 - side]
            previous = heads[side]
            register = address_of_secret(secret_of(side + 1)) if previous == gid else None
            tip = other if other not in (gid, previous) else None
            block: Block = build_block(chain, previous=previous, tip=tip, register=register)
            t0 = time.perf_counter()
            chain.on_block(block.raw, NOW)
            spent += time.perf_counter() - t0
            heads[side] = block.id
            f.write(len(block.raw).to_bytes(4, "big") + block.raw)
            if n % 20_000 == 19_999:
                print(f"  generated {n + 1} blocks", file=sys.stderr)
    return spent


def read_blocks(path: Path, limit: int) -> Iterator[bytes]:
    """Stream the blocks, so the list of raw blocks does not count in the RSS measured."""
    with path.open("rb") as f:
        for _ in range(limit):
            head = f.read(4)
            if not head:
                return
            yield f.read(int.from_bytes(head, "big"))


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident set size now (``VmRSS``) or at its peak (``VmHWM``), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child_apply(
    db: Path, blocks_file: Path, limit: int, mode: str, copy_at: Path | None, marks: set[int]
) -> None:
    """Apply blocks to a chain; print ``rate <n> <blocks/s>`` and ``rss <n> <MB>`` (child process).

    ``mode``: ``memory`` (MemoryStore), ``unsynced`` / ``synced`` (LevelDB, one batch per block
    and per milestone, the relay path), ``levelset[K][-unsynced]`` (LevelDB, one
    ``Chain.write_group`` batch per K level sets, default 1: blocks up to and including a
    milestone block, as P9 applies downloaded level sets). Rates are printed at each of
    ``marks`` and at the end.
    """
    store: KVStore
    if mode == "memory":
        store = MemoryStore()
    else:
        store = LevelDBStore(db, sync=not mode.endswith("unsynced"))
    chain = Chain(PARAMS, store)
    grouped = mode.startswith("levelset")
    per_group = int(mode.removeprefix("levelset").removesuffix("-unsynced") or 1) if grouped else 0
    sets = 0
    samples: list[tuple[int, float, float]] = []  # (blocks, VmRSS, RssAnon)
    gc.collect()
    print(f"rss 0 {rss_mb():.1f}", flush=True)
    group = chain.write_group() if grouped else contextlib.nullcontext()
    group.__enter__()
    start = time.perf_counter()
    cpu_start = time.process_time()
    n = 0
    for n, raw in enumerate(read_blocks(blocks_file, limit), 1):
        if chain.on_block(raw, NOW).is_milestone and grouped:
            sets += 1
            if sets % per_group == 0:
                group.__exit__(None, None, None)  # the level sets' one synced batch
                group = chain.write_group()
                group.__enter__()
        if n % SAMPLE_EVERY == 0:
            samples.append((n, rss_mb(), rss_mb("RssAnon")))
        if n in marks or n in (CHECKPOINT, limit):
            group.__exit__(None, None, None)
            paused = time.perf_counter()
            cpu_paused = time.process_time()
            print(f"rate {n} {n / (paused - start):.1f}", flush=True)
            print(f"cpurate {n} {n / (cpu_paused - cpu_start):.1f}", flush=True)
            if n in (CHECKPOINT, limit):
                gc.collect()
                st = chain.state
                held = len(st.blocks.recent) + len(st.meta.recent) + len(st.ls_height.recent)
                print(f"rss {n} {rss_mb():.1f}", flush=True)
                print(f"hwm {n} {rss_mb('VmHWM'):.1f}", flush=True)
                window = [x for x in samples if n - PEAK_WINDOW < x[0] <= n]
                if window:
                    peak_rss = max(x[1] for x in window)
                    peak_anon = max(x[2] for x in window)
                    print(f"peak {n} {peak_rss:.1f} {peak_anon:.1f}", flush=True)
                print(f"held {n} {held}", flush=True)
                if n == CHECKPOINT and copy_at is not None and isinstance(store, LevelDBStore):
                    store.close()
                    shutil.copytree(db, copy_at)
                    store = LevelDBStore(db, sync=False, verify=False)
                    chain = Chain(PARAMS, store)
            group = chain.write_group() if grouped else contextlib.nullcontext()
            group.__enter__()
            start += time.perf_counter() - paused
            cpu_start += time.process_time() - cpu_paused
    group.__exit__(None, None, None)
    store.close()


def run_child(*args: str) -> dict[str, list[str]]:
    """Run :func:`child_apply` in a fresh interpreter; its output lines by first word."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True
    ).stdout
    result: dict[str, list[str]] = {}
    for line in out.splitlines():
        key, *rest = line.split()
        result.setdefault(key, []).append(" ".join(rest))
    return result


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def full_blocks(count: int) -> tuple[float, float]:
    """Blocks of 128 signed txs: (memory, LevelDB synced per level set) blocks/s, best of 2."""
    from bench.core import bench_params, build_workload

    params = bench_params()
    setup, blocks = build_workload(params, count)
    best = {"memory": 0.0, "levelset": 0.0}
    for _ in range(2):
        for mode in best:
            with tempfile.TemporaryDirectory() as tmp:
                store: KVStore = (
                    MemoryStore() if mode == "memory" else LevelDBStore(Path(tmp) / "db")
                )
                with store.write_batch() as wb:
                    for key, value in setup.snapshot().items():
                        wb.put(key, value)
                chain = Chain(params, store)
                gc.collect()
                start = time.perf_counter()
                group = chain.write_group()
                group.__enter__()
                for block in blocks:
                    if chain.on_block(block.raw, NOW).is_milestone:
                        group.__exit__(None, None, None)
                        group = chain.write_group()
                        group.__enter__()
                group.__exit__(None, None, None)
                rate = count / (time.perf_counter() - start)
                store.close()
            best[mode] = max(best[mode], rate)
    return best["memory"], best["levelset"]


PROGRESS_EVERY = 5_000
"""``--prune-depth``'s children print a progress line to stderr every this many blocks."""

TX_PER_S = 1_024
"""The devnet's sustained rate (README): disk per day is extrapolated at this load."""


def _apply_pruned(count: int, db: Path, depth: int) -> dict[str, float]:
    """Build and apply ``count`` blocks on a fresh LevelDB at ``db`` (pruning to ``depth``).

    The blocks are streamed (bench/core.py ``stream_workload``): each is built on this chain,
    applied and dropped, so memory holds the chain and the spendable coins, not the workload.
    Building (signing 128 txs, grinding a nonce) is left out of the apply times.
    """
    from bench.core import bench_params, stream_workload, workload_setup
    from dagchain.pruning import Pruner

    params = bench_params()
    t0 = time.perf_counter()
    setup, start = workload_setup(params)
    shutil.rmtree(db, ignore_errors=True)
    store = LevelDBStore(db)
    with store.write_batch() as wb:
        for key, value in setup.snapshot().items():
            wb.put(key, value)
    del setup
    chain = Chain(params, store)
    pruner = Pruner(chain, depth) if depth else None
    gc.collect()
    gc.freeze()  # the setup's objects stay alive through the run: keep them out of GC scans
    digest = hashlib.sha256()
    built = applied = applied_cpu = 0.0
    blocks = stream_workload(chain, start, count, long_run=True)
    group = chain.write_group()
    group.__enter__()
    mark, mark_cpu = t0, time.process_time()
    for done, block in enumerate(blocks, 1):
        t1, c1 = time.perf_counter(), time.process_time()
        built += t1 - mark
        if chain.on_block(block.raw, NOW).is_milestone:
            group.__exit__(None, None, None)
            while pruner is not None and pruner.step(64):
                pass
            group = chain.write_group()
            group.__enter__()
        digest.update(block.id)
        mark, mark_cpu = time.perf_counter(), time.process_time()
        applied += mark - t1
        applied_cpu += mark_cpu - c1
        if done % PROGRESS_EVERY == 0:
            print(
                f"{db.name}: {done} blocks, height {chain.best_height}, built {built:.0f} s, "
                f"applied {applied:.0f} s, disk as left {du(db) / 1e6:.0f} MB, "
                f"VmRSS {rss_mb('VmRSS'):.0f} MB",
                file=sys.stderr,
                flush=True,
            )
    t1, c1 = time.perf_counter(), time.process_time()
    group.__exit__(None, None, None)
    applied += time.perf_counter() - t1
    applied_cpu += time.process_time() - c1
    out = {
        "built_s": built,
        "rate": count / applied,
        "cpurate": count / applied_cpu,
        "disk_left": float(du(db)),
        "best": float(chain.best_height),
        "bodies_from": float(chain.state.pruned_below()),
        "digest": float(int.from_bytes(digest.digest()[:6], "big")),
    }
    del chain, pruner, blocks
    sizes: dict[str, float] = {}
    stubs = 0
    for key, value in store.iter_prefix(b""):
        kind = key[:1].decode("latin-1")
        if kind == "b" and value.startswith(PRUNED_PREFIX):
            kind = "b (stub)"
            stubs += 1
        sizes[kind] = sizes.get(kind, 0.0) + len(key) + len(value)
    out["stubs"] = float(stubs)
    out.update({f"rows {k}": v for k, v in sizes.items()})
    store.compact()
    store.close()
    out["disk_compacted"] = float(du(db))
    gc.unfreeze()
    gc.collect()
    for verify in (True, False):
        t0 = time.perf_counter()
        store = LevelDBStore(db, verify=verify)
        Chain(params, store)
        out["restart" if verify else "restart_noscan"] = time.perf_counter() - t0
        store.close()
        gc.collect()
    out["hwm_mb"] = rss_mb("VmHWM")
    return out


def prune_bench(count: int, depth: int, work: Path, serial: bool = False) -> None:
    """The ``--prune-depth`` measurement: print its table; last line ``restart_s_pruned``.

    The unpruned and the pruned node run in two child processes, at once unless ``serial``;
    each builds the same blocks (the workload is deterministic: the children's digests of the
    block ids must agree) as it applies them, so neither holds the whole workload.
    """
    from bench.core import TXS_PER_BLOCK

    res: dict[str, dict[str, float]] = {}
    nodes = (("unpruned", 0), (f"pruned D={depth}", depth))
    procs: dict[str, subprocess.Popen[str]] = {}
    for name, d in nodes:
        print(f"building and applying {count} blocks to LevelDB, {name} ...", file=sys.stderr)
        db = work / name.split()[0]
        args = ["--prune-child", str(count), str(db), str(d)]
        cmd = [sys.executable, __file__, *args]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        if serial:
            res[name] = _child_result(procs[name])
    for name, proc in procs.items():
        if name not in res:
            res[name] = _child_result(proc)
    assert res["unpruned"]["digest"] == res[f"pruned D={depth}"]["digest"], "workloads differ"
    built_s = res["unpruned"]["built_s"]
    full, pruned = res["unpruned"], res[f"pruned D={depth}"]
    per_day = TX_PER_S * 86_400 / TXS_PER_BLOCK
    # What a pruned node keeps for ever per block: every row but bodies and undo records (those
    # of the last D level sets are a constant), plus one stub; times LevelDB's own overhead
    # measured on the unpruned store (disk after compaction over logical bytes). LevelDB gives
    # the space of overwritten bodies back only as its compactions reach them (see "disk as
    # left" and "after full compaction" against the logical bytes).
    overhead = full["disk_compacted"] / _logical(full)
    window = (
        pruned.get("rows b", 0.0) + pruned.get("rows d", 0.0) + pruned.get("rows b (stub)", 0.0)
    )
    stub = pruned.get("rows b (stub)", 0.0) / max(1.0, pruned["stubs"])
    kept = ((_logical(pruned) - window) / count + stub) * overhead
    rows: list[tuple[str, str]] = [
        (f"blocks of {TXS_PER_BLOCK} txs (built in {built_s:.0f} s, as applied)", f"{count}"),
        ("best milestone height", f"{full['best']:.0f}"),
        ("pruned node: bodies kept from milestone height", f"{pruned['bodies_from']:.0f}"),
    ]
    for name, r in res.items():
        rows += [
            (f"{name}: apply rate, synced per level set (blocks/s)", f"{r['rate']:.1f}"),
            ("  same in CPU time (blocks per CPU second)", f"{r['cpurate']:.1f}"),
            ("  disk as left (MB)", f"{r['disk_left'] / 1e6:.1f}"),
            ("  disk after full compaction (MB)", f"{r['disk_compacted'] / 1e6:.1f}"),
            ("  disk per block after compaction (bytes)", f"{r['disk_compacted'] / count:.0f}"),
            ("  logical bytes per block (keys + values)", f"{_logical(r) / count:.0f}"),
            ("  restart, checksum scan (s)", f"{r['restart']:.2f}"),
            ("  restart, no scan (s)", f"{r['restart_noscan']:.2f}"),
            ("  peak resident set of its process (VmHWM, MB)", f"{r['hwm_mb']:.0f}"),
        ]
        rows += [
            (f"  logical bytes per block, rows {k[5:]!r}", f"{v / count:.0f}")
            for k, v in sorted(r.items())
            if k.startswith("rows ")
        ]
    rows += [
        ("pruned node: stub of a pruned block (bytes)", f"{stub:.0f}"),
        ("pruned node: disk kept per block for ever (bytes)", f"{kept:.0f}"),
        (
            f"disk per day at {TX_PER_S} tx/s, unpruned (GB)",
            f"{full['disk_compacted'] / count * per_day / 1e9:.1f}",
        ),
        (f"disk per day at {TX_PER_S} tx/s, pruned (GB)", f"{kept * per_day / 1e9:.1f}"),
    ]
    print(f"{'measure':66} {'value':>12}")
    for name, value in rows:
        print(f"{name:66} {value:>12}")
    print(f"restart_s_pruned: {pruned['restart']:.2f}")


def _child_result(proc: "subprocess.Popen[str]") -> dict[str, float]:
    """Wait for a ``--prune-child`` process; its result (the JSON of its last line)."""
    out, _ = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"a --prune-child process failed with exit code {proc.returncode}")
    result: dict[str, float] = json.loads(out.splitlines()[-1])
    return result


def _logical(r: dict[str, float]) -> float:
    """Keys + values of every row of a store."""
    return sum(v for k, v in r.items() if k.startswith("rows "))


def main() -> None:
    """Run every measurement and print the table; last line ``restart_s_100k``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=300_000)
    parser.add_argument("--synced-sample", type=int, default=1_000)
    parser.add_argument("--levelset-sample", type=int, default=20_000)
    parser.add_argument("--full-blocks", type=int, default=240)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="work directory (default: temp)")
    parser.add_argument(
        "--prune-depth",
        type=int,
        default=0,
        metavar="D",
        help="only measure pruning: full blocks with and without --prune-depth D (>= 100)",
    )
    parser.add_argument("--prune-blocks", type=int, default=4_000, help="blocks for --prune-depth")
    parser.add_argument(
        "--prune-serial",
        action="store_true",
        help="run --prune-depth's unpruned and pruned node one after the other, not at once",
    )
    parser.add_argument("--prune-child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        db, blocks_file, limit, mode, copy_at, marks = args.child
        child_apply(
            Path(db),
            Path(blocks_file),
            int(limit),
            mode,
            Path(copy_at) if copy_at else None,
            {int(m) for m in marks.split(",") if m},
        )
        return
    if args.prune_child:
        count, db, depth = args.prune_child
        print(json.dumps(_apply_pruned(int(count), Path(db), int(depth))), flush=True)
        return
    work = args.out or Path(tempfile.mkdtemp(prefix="dagchain-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.prune_depth:
        prune_bench(args.prune_blocks, args.prune_depth, work, args.prune_serial)
        if args.out is None:
            shutil.rmtree(work)
        return
    blocks_file = work / "blocks.bin"
    checkpoint = min(CHECKPOINT, args.blocks)
    sample = min(args.synced_sample, args.blocks)
    ls_sample = min(args.levelset_sample, args.blocks)
    marks = f"{sample},{ls_sample}"
    print(f"generating {args.blocks} DEVNET blocks in {work} ...", file=sys.stderr)
    t_generate = generate(args.blocks, blocks_file)

    def child(mode: str, limit: int, copy_at: str = "") -> dict[str, list[str]]:
        print(f"applying {limit} blocks: {mode} ...", file=sys.stderr)
        shutil.rmtree(work / mode, ignore_errors=True)
        return run_child(str(work / mode), str(blocks_file), str(limit), mode, copy_at, marks)

    best: dict[str, dict[int, float]] = {}

    def keep(mode: str, res: dict[str, list[str]]) -> dict[str, list[str]]:
        for key, name in (("rate", mode), ("cpurate", mode + " cpu")):
            rates = best.setdefault(name, {})
            for n, rate in (x.split() for x in res[key]):
                rates[int(n)] = max(rates.get(int(n), 0.0), float(rate))
        return res

    copy_at = work / "db100k"
    res: dict[str, list[str]] = {}
    for round_ in range(args.repeat):
        keep("memory", child("memory", args.blocks))
        keep("levelset-unsynced", child("levelset-unsynced", args.blocks))
        if round_ == 0:
            shutil.rmtree(copy_at, ignore_errors=True)
            res = child("unsynced", args.blocks, str(copy_at) if args.blocks >= CHECKPOINT else "")
            keep("unsynced", res)
        else:
            keep("unsynced", child("unsynced", args.blocks))
        keep("levelset", child("levelset", ls_sample))
        keep("levelset8", child("levelset8", ls_sample))
        keep("synced", child("synced", sample))
    memory = best["memory"]
    rss = {int(n): float(mb) for n, mb in (r.split() for r in res["rss"])}
    full_memory, full_levelset = full_blocks(args.full_blocks) if args.full_blocks else (0, 0)

    restart_db = copy_at if args.blocks >= CHECKPOINT else work / "unsynced"
    disk = du(restart_db)
    t0 = time.perf_counter()
    store = LevelDBStore(restart_db)
    chain = Chain(PARAMS, store)
    restart_s = time.perf_counter() - t0
    height = chain.best_height
    store.close()
    t0 = time.perf_counter()
    store = LevelDBStore(restart_db, verify=False)
    Chain(PARAMS, store)
    restart_noverify_s = time.perf_counter() - t0
    store.close()

    def rate_row(name: str, mode: str, n: int) -> list[tuple[str, str]]:
        wall, cpu = best[mode][n], best[mode + " cpu"][n]
        return [
            (f"{name}, first {n} (blocks/s)", f"{wall:.0f}"),
            (f"  ratio to memory over the same {n}", f"{wall / memory[n]:.3f}"),
            ("  same in CPU time (blocks per CPU second)", f"{cpu:.0f}"),
            ("  ratio to memory in CPU time", f"{cpu / best['memory cpu'][n]:.3f}"),
        ]

    n_all = args.blocks
    print(f"{'measure':58} {'value':>12}")
    rows = [
        ("blocks generated (DEVNET, empty)", f"{args.blocks}"),
        ("apply rate while generating, MemoryStore (blocks/s)", f"{args.blocks / t_generate:.0f}"),
        (f"apply rate, MemoryStore, first {n_all} (blocks/s)", f"{memory[n_all]:.0f}"),
        ("  same in CPU time (blocks per CPU second)", f"{best['memory cpu'][n_all]:.0f}"),
        *rate_row("LevelDB synced, one batch per level set", "levelset", ls_sample),
        *rate_row("LevelDB synced, one batch per 8 level sets", "levelset8", ls_sample),
        *rate_row("LevelDB unsynced, one batch per level set", "levelset-unsynced", n_all),
        *rate_row("LevelDB unsynced, one batch per block", "unsynced", n_all),
        *rate_row("LevelDB synced, one batch per block", "synced", sample),
    ]
    if args.full_blocks:
        rows += [
            (
                f"full blocks (128 txs), MemoryStore, {args.full_blocks} (blocks/s)",
                f"{full_memory:.1f}",
            ),
            ("full blocks, LevelDB synced per level set (blocks/s)", f"{full_levelset:.1f}"),
            ("  ratio to memory", f"{full_levelset / full_memory:.3f}"),
        ]
    rows += [
        (f"restart, {checkpoint} blocks, checksum scan (s)", f"{restart_s:.2f}"),
        (f"restart, {checkpoint} blocks, no scan (s)", f"{restart_noverify_s:.2f}"),
        ("  best height after restart", f"{height}"),
        ("bytes on disk per block", f"{disk / checkpoint:.0f}"),
    ]
    hwm = {int(n): float(mb) for n, mb in (r.split() for r in res["hwm"])}
    peak = {int(n): (float(a), float(b)) for n, a, b in (r.split() for r in res.get("peak", []))}
    rows += [(f"RSS after {n} blocks (MB)", f"{mb:.1f}") for n, mb in sorted(rss.items())]
    for n, (peak_rss, peak_anon) in sorted(peak.items()):
        rows.append((f"peak RSS, blocks {max(0, n - PEAK_WINDOW)}-{n} (MB)", f"{peak_rss:.1f}"))
        rows.append(("  of it private (RssAnon; the rest is mapped files)", f"{peak_anon:.1f}"))
    rows += [
        (f"peak RSS of the whole run up to {n} (VmHWM, MB)", f"{mb:.1f}")
        for n, mb in sorted(hwm.items())
    ]
    rows += [(f"  block/meta/LS-height rows in memory at {r}", "") for r in res.get("held", [])]
    last = args.blocks
    if CHECKPOINT in rss and last > CHECKPOINT:
        rows.append((f"  RSS ratio {last} / {CHECKPOINT}", f"{rss[last] / rss[CHECKPOINT]:.2f}"))
        if CHECKPOINT in peak and last in peak:
            rows.append(
                (
                    f"  peak RSS ratio, last {PEAK_WINDOW} blocks before each",
                    f"{peak[last][0] / peak[CHECKPOINT][0]:.2f}",
                )
            )
            rows.append(
                (
                    "  peak private memory ratio, same windows",
                    f"{peak[last][1] / peak[CHECKPOINT][1]:.2f}",
                )
            )
        rows.append((f"  VmHWM ratio {last} / {CHECKPOINT}", f"{hwm[last] / hwm[CHECKPOINT]:.2f}"))
    for name, value in rows:
        print(f"{name:58} {value:>12}")
    if args.out is None:
        shutil.rmtree(work)
    print(f"restart_s_100k: {restart_s:.2f}")


if __name__ == "__main__":
    main()
