"""Simulator memory per full node: where a run's bytes go (issue 16, "Measure").

Results and their reading: docs/benchmarks.md, section "Simulator memory per full node".

Run: ``python bench/sim_memory.py [--nodes 20] [--tps 1024] [--duration 45] [--scenario FILE]
[--sample 3] [--no-tracemalloc] [--json]``. One run in this process: the scenario (default
``experiments/capacity_scale.toml``, experiment 1d's shape: ``regions2019``, sdag K = 10, 5
miners, 1,024 tx/s offered, ``network.relay = "node"``) scaled to ``--nodes`` full nodes, mined
and loaded for ``--duration`` simulated seconds (no drain: the state at the end of mining is
what is measured) or until ``--wall-cap`` wall seconds, whichever comes first. Then it reports:

- RSS: peak (``ru_maxrss``), after building the network, at the end, and a timeline; the growth
  per full node;
- tracemalloc (started before the network is built, one frame): the top allocation sites by
  file:line, and totals by area (simulator/, chain state, store, mempool, relay, engine...);
- an object census: ``gc.get_objects()`` (containers) plus the bytes/str/int/float they hold,
  counts and ``sys.getsizeof`` totals for the top 20 types;
- per full node, a deep size (``gc.get_referents`` walk, bounded) of each big structure of a
  sample of nodes: the SimStore rows by key prefix, each ChainState mirror, orphans, mempool,
  the relay's per-peer known inventory and the rest; "own" is the part not reachable from the
  other sampled nodes (block bytes and decoded blocks are shared through the DecodeCache);
- the same walk over the network-wide structures (Knowledge indexes, shared caches, the engine's
  queued events, the recorder, the load), once.

tracemalloc slows the run and its own bookkeeping is in the RSS (reported): ``--no-tracemalloc``
for clean RSS figures.
"""

import argparse
import gc
import json
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable
from pathlib import Path
from types import BuiltinFunctionType, CodeType, FrameType, FunctionType, MethodType, ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.scenario import load_scenario  # noqa: E402
from simulator.simulation import Simulation, _rare_gc  # noqa: E402
from simulator.store import SimStore  # noqa: E402

MB = 1_000_000
DEFAULT_SCENARIO = ROOT / "experiments" / "capacity_scale.toml"
SKIP_TYPES: tuple[type, ...] = (
    type,
    ModuleType,
    FunctionType,
    BuiltinFunctionType,
    MethodType,
    CodeType,
    FrameType,
)
"""Never walked into: code and classes are not per-node state (bound methods point back to
their owner, which is walked on its own)."""
PREFIXES = {
    b"b": "b block bytes",
    b"m": "m block meta",
    b"s": "s snapshot",
    b"r": "r peer head",
    b"t": "t tx index",
    b"p": "p pending",
    b"l": "l level set",
    b"d": "d delta",
    b"h": "h height",
    b"x": "x LS height",
    b"u": "u utxo",
    b"k": "k spent",
    b"o": "o address",
    b"a": "a root",
    b"q": "q redeemed",
    b"i": "i invalidated",
    b"c": "c first child",
}
AREAS = [
    ("dagchain/storage/", "store (SimStore/GroupingStore rows)"),
    ("simulator/store.py", "store (SimStore/GroupingStore rows)"),
    ("dagchain/state.py", "chain state mirror (dagchain/state.py)"),
    ("dagchain/history.py", "chain state mirror (dagchain/history.py)"),
    ("dagchain/ledger.py", "ledger deltas (dagchain/ledger.py)"),
    ("dagchain/levelset.py", "level sets (dagchain/levelset.py)"),
    ("dagchain/chain.py", "chain (dagchain/chain.py)"),
    ("dagchain/mempool.py", "mempool (dagchain/mempool.py)"),
    ("dagchain/pool_policy.py", "mempool (dagchain/pool_policy.py)"),
    ("dagchain/blocks.py", "block decoding (dagchain/blocks.py)"),
    ("dagchain/transactions.py", "tx decoding (dagchain/transactions.py)"),
    ("dagchain/caches.py", "shared caches (dagchain/caches.py)"),
    ("dagchain/", "dagchain, other"),
    ("p2p/relay.py", "relay (p2p/relay.py)"),
    ("p2p/gossip.py", "relay known inventory (p2p/gossip.py)"),
    ("p2p/wire.py", "wire messages (p2p/wire.py)"),
    ("node/", "node, other"),
    ("simulator/engine.py", "engine queue (simulator/engine.py)"),
    ("simulator/network.py", "network (simulator/network.py)"),
    ("simulator/sim_node.py", "sim node / relay port (simulator/sim_node.py)"),
    ("simulator/knowledge.py", "knowledge index (simulator/knowledge.py)"),
    ("simulator/metrics.py", "recorder (simulator/metrics.py)"),
    ("simulator/load.py", "tx load (simulator/load.py)"),
    ("simulator/", "simulator, other"),
    ("msgpack", "msgpack"),
]


def rss_now_mb() -> float:
    """Resident set size now (Linux /proc), in MB."""
    with open("/proc/self/statm", encoding="ascii") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / MB


def rss_peak_mb() -> float:
    """Peak resident set size of this process (``ru_maxrss`` is KiB on Linux), in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB


def area_of(filename: str) -> str:
    """The area a tracemalloc file belongs to."""
    path = filename.replace("\\", "/")
    root = str(ROOT).replace("\\", "/") + "/"
    rel = path[len(root) :] if path.startswith(root) else path
    for prefix, name in AREAS:
        if rel.startswith(prefix) or (prefix == "msgpack" and "msgpack" in rel):
            return name
    return "other (stdlib, interpreter)"


# ---------------------------------------------------------------------------- deep size
class Walker:
    """Deep ``sys.getsizeof`` over the object graph, counting each object once per walker.

    ``stop`` holds ids never entered (shared network objects, other nodes); ``seen`` maps every
    counted id to its size, so that a later root does not count it again and so that two
    walkers' maps can be intersected (what two nodes share). Bounded by ``budget`` objects.
    """

    def __init__(self, stop: set[int], budget: int) -> None:
        self.stop = stop
        self.seen: dict[int, int] = {}
        self.budget = budget
        self.truncated = False

    def walk(self, root: object) -> list[int]:
        """Count ``root`` and what it reaches (not yet seen); the ids counted, in order."""
        seen, stop, budget = self.seen, self.stop, self.budget
        getsizeof, referents, skip = sys.getsizeof, gc.get_referents, SKIP_TYPES
        counted: list[int] = []
        todo = [root]
        while todo:
            obj = todo.pop()
            key = id(obj)
            if key in seen or key in stop or isinstance(obj, skip):
                continue
            if len(seen) >= budget:
                self.truncated = True
                break
            seen[key] = getsizeof(obj)
            counted.append(key)
            todo.extend(referents(obj))
        return counted


def component_sizes(
    walker: Walker, components: Iterable[tuple[str, object]], others: dict[int, int] | None
) -> dict[str, tuple[int, int]]:
    """Per component: (deep bytes, bytes of it also reachable from ``others``)."""
    out: dict[str, tuple[int, int]] = {}
    for name, root in components:
        ids = walker.walk(root)
        seen = walker.seen
        total = sum(seen[i] for i in ids)
        shared = sum(seen[i] for i in ids if others is not None and i in others)
        prev = out.get(name, (0, 0))
        out[name] = (prev[0] + total, prev[1] + shared)
    return out


def store_dict(node: Any) -> dict[bytes, bytes | None]:
    """A SimNode's own rows: its SimStore's dict (the rows every store holds are in the
    interner's base, counted once among the network-wide structures)."""
    store = node.chain.store
    if not isinstance(store, SimStore):
        raise TypeError(f"not a SimStore: {type(store).__name__}")
    return store._data


def node_components(node: Any) -> list[tuple[str, object]]:
    """The big per-node structures of a SimNode, in attribution order (first reach counts)."""
    chain, state = node.chain, node.chain.state
    comps: list[tuple[str, object]] = [
        ("store rows (SimStore dict)", store_dict(node)),
        ("store overlay (GroupingStore)", chain._writes),
        ("state.blocks (decoded, window)", state.blocks),
        ("state.meta", state.meta),
        ("state.snapshots", state.snapshots),
        ("state.ls_height", state.ls_height),
        ("state.deltas (level-set deltas)", state.deltas),
        ("state.best (+ heights)", state.best),
        ("state.best (+ heights)", state.best_height_of),
        ("state.utxos (UTXO set)", state.utxos),
        ("state.roots/peer_heads/pending", state.roots),
        ("state.roots/peer_heads/pending", state.peer_heads),
        ("state.roots/peer_heads/pending", state.pending),
        ("state.roots/peer_heads/pending", state.invalidated),
        ("chain other (state, orphans, genesis...)", state),
        ("chain other (state, orphans, genesis...)", chain),
        ("mempool", node.mempool),
    ]
    port = node._port
    if port is not None:
        relay = port.relay
        comps.append(("relay known inventory (per peer)", [p.known for p in relay.peers.values()]))
        comps.append(("relay other (getdata, announcer)", relay))
        comps.append(("relay other (getdata, announcer)", port))
    comps.append(("node other", node))
    return comps


def store_prefixes(
    data: dict[bytes, bytes | None], others: dict[int, int] | None
) -> dict[str, tuple[int, int, int]]:
    """SimStore rows by key prefix: (rows, own bytes, shared bytes) of keys and values; a value
    object met twice in this store is counted once; the dict's table is a row of its own (a
    None value is a row of the interner's base deleted in this store)."""
    out: dict[str, list[int]] = {}
    getsizeof = sys.getsizeof
    met: set[int] = set()
    for key, value in data.items():
        name = PREFIXES.get(key[:1], "meta rows")
        row = out.get(name)
        if row is None:
            row = out[name] = [0, 0, 0]
        row[0] += 1
        for obj in (key, value):
            i = id(obj)
            if i in met:
                continue
            met.add(i)
            if others is not None and i in others:
                row[2] += getsizeof(obj)
            else:
                row[1] += getsizeof(obj)
    out["(dict hash table)"] = [0, getsizeof(data), 0]
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


# ---------------------------------------------------------------------------- census
def census(limit_objects: int) -> tuple[list[tuple[str, int, int]], int, bool]:
    """Types of every gc-tracked object and of the untracked objects they reach (bytes, str,
    int, and the dicts and tuples CPython untracks because they hold only such scalars: a
    SimStore's dict is one), each once: [(type, count, getsizeof bytes)] by bytes, the objects
    seen, whether the ``limit_objects`` bound cut the scan."""
    counts: dict[str, list[int]] = {}
    getsizeof, referents, is_tracked = sys.getsizeof, gc.get_referents, gc.is_tracked
    tracked = gc.get_objects()
    seen: set[int] = {id(tracked)}
    cut = False

    def count(obj: object) -> None:
        name = type(obj).__qualname__
        row = counts.get(name)
        if row is None:
            row = counts[name] = [0, 0]
        row[0] += 1
        row[1] += getsizeof(obj)

    for obj in tracked:
        key = id(obj)
        if key not in seen:
            seen.add(key)
            count(obj)
    for obj in tracked:
        if len(seen) >= limit_objects:
            cut = True
            break
        todo = [r for r in referents(obj) if not is_tracked(r)]
        while todo:
            ref = todo.pop()
            rkey = id(ref)
            if rkey in seen:
                continue
            seen.add(rkey)
            count(ref)
            todo.extend(referents(ref))  # an untracked container holds only untracked objects
    del tracked
    rows = sorted(((k, v[0], v[1]) for k, v in counts.items()), key=lambda r: -r[2])
    return rows, len(seen), cut


# ---------------------------------------------------------------------------- the run
def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build, run and measure (see the module doc)."""
    overrides = [
        f"load.tps={args.tps}",
        'network.relay="node"' if args.relay == "node" else 'network.relay="push-all"',
        f"network.full_nodes={args.full_nodes}",
        *args.set,
    ]
    scenario = load_scenario(
        args.scenario, overrides, nodes=args.nodes, duration_s=args.duration, seed=args.seed
    )
    rss_start = rss_now_mb()
    if args.tracemalloc:
        tracemalloc.start(args.frames)
    started = time.perf_counter()
    cpu0 = time.process_time()
    sim = Simulation(scenario, share_rows=args.share_rows)
    rss_built = rss_now_mb()
    built_s = time.perf_counter() - started
    timeline: list[dict[str, float]] = []
    for miner in sim.miners.values():
        miner.start()
    sim.load.start()
    duration_ms = scenario.duration_s * 1000.0
    step = args.sample_every * 1000.0
    until = 0.0
    capped = False
    with _rare_gc():
        while until < duration_ms:
            until = min(duration_ms, until + step)
            sim.engine.run(until_ms=until)
            row = {
                "sim_s": round(until / 1000, 1),
                "wall_s": round(time.perf_counter() - started, 1),
                "rss_mb": round(rss_now_mb(), 1),
                "events": sim.engine.events,
            }
            if args.tracemalloc:
                row["traced_mb"] = round(tracemalloc.get_traced_memory()[0] / MB, 1)
            timeline.append(row)
            if not args.json:
                print(" ".join(f"{k} {v}" for k, v in row.items()), file=sys.stderr, flush=True)
            if time.perf_counter() - started > args.wall_cap:
                capped = True
                break
    run_wall = time.perf_counter() - started
    run_cpu = time.process_time() - cpu0
    full = sim.full_nodes
    sim_s = until / 1000.0
    result: dict[str, Any] = {
        "scenario": str(args.scenario),
        "nodes": scenario.nodes,
        "full_nodes": len(full),
        "relay": scenario.network.relay,
        "share_rows": args.share_rows,
        "protocol": scenario.protocol,
        "sortition_k": scenario.chain.sortition_k,
        "offered_tps": args.tps,
        "simulated_s": sim_s,
        "wall_capped": capped,
        "wall_s": round(run_wall, 1),
        "cpu_s": round(run_cpu, 1),
        "build_s": round(built_s, 2),
        "events": sim.engine.events,
        "blocks_mined": len(sim.recorder.blocks),
        "txs_offered": len(sim.recorder.tx_offered_ms),
        "observer_best_height": len(sim.observer.chain.state.best) - 1,
        "observer_utxos": len(sim.observer.chain.state.utxos),
        "observer_store_rows": sum(1 for _ in sim.observer.chain.store.iter_prefix(b"")),
        "observer_mempool_txs": len(sim.observer.mempool),
        "rss_start_mb": round(rss_start, 1),
        "rss_built_mb": round(rss_built, 1),
        "rss_end_mb": round(rss_now_mb(), 1),
        "rss_peak_mb": round(rss_peak_mb(), 1),
        "timeline": timeline,
    }
    result["rss_growth_per_full_node_mb"] = round(
        (result["rss_end_mb"] - rss_built) / max(1, len(full)), 2
    )
    if args.tracemalloc:
        snap = tracemalloc.take_snapshot()
        overhead = tracemalloc.get_tracemalloc_memory()
        tracemalloc.stop()
        snap = snap.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        stats = snap.statistics("lineno")
        traced = sum(s.size for s in stats)
        top = []
        for s in stats[: args.top]:
            frame = s.traceback[0]
            name = frame.filename.replace(str(ROOT) + "/", "")
            top.append({"site": f"{name}:{frame.lineno}", "mb": s.size / MB, "blocks": s.count})
        areas: dict[str, list[float]] = {}
        for s in snap.statistics("filename"):
            area = area_of(s.traceback[0].filename)
            acc = areas.setdefault(area, [0.0, 0])
            acc[0] += s.size / MB
            acc[1] += s.count
        result["tracemalloc"] = {
            "traced_mb": traced / MB,
            "tracemalloc_overhead_mb": overhead / MB,
            "top_sites": top,
            "areas": sorted(
                ({"area": k, "mb": v[0], "blocks": int(v[1])} for k, v in areas.items()),
                key=lambda r: -r["mb"],
            ),
        }
        del snap, stats
    gc.collect()
    result["per_node"] = per_node(sim, args.sample, args.walk_budget)
    result["network_wide"] = network_wide(sim, args.walk_budget)
    rows, objects, cut = census(args.census_budget)
    result["census"] = {
        "objects": objects,
        "truncated": cut,
        "top_types": [{"type": t, "count": c, "mb": b / MB} for t, c, b in rows[:20]],
        "total_mb": sum(b for _, _, b in rows) / MB,
    }
    return result


def _stop_ids(sim: Simulation) -> set[int]:
    """Objects shared by the whole network (walked once, in ``network_wide``)."""
    shared: list[object] = [
        sim,
        sim.params,
        sim.engine,
        sim.network,
        sim.known_blocks,
        sim.known_txs,
        sim.recorder,
        sim.load,
        sim.streams,
        sim.rows,
        *sim.caches,
        *sim.nodes,
        *sim.miners.values(),
    ]
    shared.extend(node.params for node in sim.full_nodes)
    return {id(o) for o in shared}


def per_node(sim: Simulation, sample: int, budget: int) -> dict[str, Any]:
    """Deep sizes of each sampled node's structures, own and shared with another sampled node."""
    full = sim.full_nodes
    n = min(sample, len(full))
    picks = [full[round(i * (len(full) - 1) / max(1, n - 1))] for i in range(n)] if n else []
    stop = _stop_ids(sim)
    started = time.perf_counter()
    # pass 1: every sampled node's reachable ids (to tell shared from own)
    maps: list[dict[int, int]] = []
    truncated = False
    for node in picks:
        w = Walker(stop - {id(node)}, budget)
        for _, root in node_components(node):
            w.walk(root)
        truncated |= w.truncated
        maps.append(w.seen)
    # pass 2: per component, with "others" = the union of the other sampled nodes' ids
    comps: dict[str, list[tuple[int, int]]] = {}
    prefixes: dict[str, list[tuple[int, int, int]]] = {}
    for k, node in enumerate(picks):
        others: dict[int, int] = {}
        for j, m in enumerate(maps):
            if j != k:
                others.update(m)
        w = Walker(stop - {id(node)}, budget)
        for name, (total, shared) in component_sizes(w, node_components(node), others).items():
            comps.setdefault(name, []).append((total, shared))
        for name, row in store_prefixes(store_dict(node), others).items():
            prefixes.setdefault(name, []).append(row)
        del others
    del maps

    def mean(xs: list[int]) -> float:
        return sum(xs) / len(xs) / MB if xs else 0.0

    table = [
        {
            "structure": name,
            "total_mb": mean([t for t, _ in rows]),
            "own_mb": mean([t - s for t, s in rows]),
            "shared_mb": mean([s for _, s in rows]),
        }
        for name, rows in comps.items()
    ]
    store = [
        {
            "prefix": name,
            "rows": sum(r[0] for r in rows) / len(rows),
            "own_mb": mean([r[1] for r in rows]),
            "shared_mb": mean([r[2] for r in rows]),
        }
        for name, rows in sorted(prefixes.items(), key=lambda kv: -sum(r[1] for r in kv[1]))
    ]
    return {
        "sampled": [node.index for node in picks],
        "walk_s": round(time.perf_counter() - started, 1),
        "truncated": truncated,
        "structures": table,
        "total_mb": sum(r["total_mb"] for r in table),
        "own_mb": sum(r["own_mb"] for r in table),
        "store_by_prefix": store,
    }


def network_wide(sim: Simulation, budget: int) -> list[dict[str, Any]]:
    """Deep sizes of the structures the whole network shares (each object counted once)."""
    from simulator import sim_node

    stop = {id(o) for o in (sim, *sim.nodes, sim.params)}
    w = Walker(stop, budget)
    comps: list[tuple[str, object]] = [
        ("knowledge: blocks (who knows what)", sim.known_blocks),
        ("knowledge: txs (who knows what)", sim.known_txs),
        ("signature cache", sim.caches[0]),
        ("decode cache (blocks, txs)", sim.caches[1]),
        ("level-set cache", sim.caches[2]),
        ("engine queue (events in flight)", sim.engine),
        ("network (links, latencies)", sim.network),
        ("recorder (metrics)", sim.recorder),
        ("tx load (wallet)", sim.load),
        ("miners", list(sim.miners.values())),
        ("sim_node txid memo", sim_node._TXIDS),
        ("store row interner (shared rows)", sim.rows),
        ("shared results (verdicts, ledger rows)", sim.caches.shared),
        ("pools' spender index", sim.caches.spenders),
    ]
    sizes = component_sizes(w, comps, None)
    return [{"structure": k, "mb": v[0] / MB} for k, v in sizes.items()]


# ---------------------------------------------------------------------------- output
def print_report(r: dict[str, Any]) -> None:
    """The tables, in MB."""
    p = print
    p(
        f"scenario {r['scenario']}: {r['nodes']} nodes ({r['full_nodes']} full), "
        f"{r['protocol']} K={r['sortition_k']}, relay {r['relay']}, "
        f"{r['offered_tps']} tx/s offered, {r['simulated_s']} simulated s, "
        f"shared store rows {r['share_rows']}" + (" (wall cap reached)" if r["wall_capped"] else "")
    )
    p(
        f"wall {r['wall_s']} s, CPU {r['cpu_s']} s, events {r['events']}, "
        f"blocks {r['blocks_mined']}, txs offered {r['txs_offered']}, "
        f"observer: height {r['observer_best_height']}, utxos {r['observer_utxos']}, "
        f"store rows {r['observer_store_rows']}, pool {r['observer_mempool_txs']}"
    )
    p(
        f"RSS MB: start {r['rss_start_mb']}, built {r['rss_built_mb']}, end {r['rss_end_mb']}, "
        f"peak {r['rss_peak_mb']}; growth per full node {r['rss_growth_per_full_node_mb']}"
    )
    tm = r.get("tracemalloc")
    if tm:
        p(
            f"\ntracemalloc: {tm['traced_mb']:.1f} MB traced "
            f"(its own bookkeeping {tm['tracemalloc_overhead_mb']:.1f} MB, in the RSS)"
        )
        p(f"{'area':<48} {'MB':>9} {'MB/full node':>13} {'blocks':>10}")
        for a in tm["areas"]:
            per = a["mb"] / max(1, r["full_nodes"])
            p(f"{a['area']:<48} {a['mb']:>9.1f} {per:>13.2f} {a['blocks']:>10}")
        p(f"\n{'top allocation sites (file:line)':<60} {'MB':>9} {'blocks':>10}")
        for s in tm["top_sites"]:
            p(f"{s['site']:<60} {s['mb']:>9.1f} {s['blocks']:>10}")
    pn = r["per_node"]
    p(
        f"\nper full node (deep size, mean of nodes {pn['sampled']}; own = not reachable from "
        f"the other sampled nodes; walk {pn['walk_s']} s"
        + (", TRUNCATED" if pn["truncated"] else "")
        + ")"
    )
    p(f"{'structure':<44} {'total MB':>9} {'own MB':>9} {'shared MB':>10}")
    for s in pn["structures"]:
        p(f"{s['structure']:<44} {s['total_mb']:>9.2f} {s['own_mb']:>9.2f} {s['shared_mb']:>10.2f}")
    p(f"{'sum':<44} {pn['total_mb']:>9.2f} {pn['own_mb']:>9.2f}")
    p(f"\n{'SimStore rows by key prefix':<30} {'rows':>9} {'own MB':>9} {'shared MB':>10}")
    for s in pn["store_by_prefix"]:
        p(f"{s['prefix']:<30} {s['rows']:>9.0f} {s['own_mb']:>9.2f} {s['shared_mb']:>10.2f}")
    p(f"\n{'network-wide structures (once)':<44} {'MB':>9}")
    for s in r["network_wide"]:
        p(f"{s['structure']:<44} {s['mb']:>9.2f}")
    c = r["census"]
    p(
        f"\nobject census: {c['objects']} objects, {c['total_mb']:.1f} MB (sys.getsizeof, "
        "gc-tracked objects and the scalars they hold)" + (", TRUNCATED" if c["truncated"] else "")
    )
    p(f"{'type':<32} {'count':>11} {'MB':>9}")
    for t in c["top_types"]:
        p(f"{t['type']:<32} {t['count']:>11} {t['mb']:>9.1f}")


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> dict[str, Any]:
    """Parse flags, run, print the report (or JSON); returns the result."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    parser.add_argument("--nodes", type=int, default=20, help="network size (all full)")
    parser.add_argument("--full-nodes", type=int, default=0, help="full nodes (0 = all)")
    parser.add_argument("--tps", type=float, default=1024.0, help="offered tx/s")
    parser.add_argument("--duration", type=float, default=45.0, help="simulated s (a cap)")
    parser.add_argument("--wall-cap", type=float, default=1800.0, help="wall s (a cap)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--relay", choices=("node", "push-all"), default="node")
    parser.add_argument("--set", action="append", default=[], help="scenario override k=v")
    parser.add_argument("--sample", type=int, default=3, help="full nodes deep-sized")
    parser.add_argument("--sample-every", type=float, default=5.0, help="timeline step, sim s")
    parser.add_argument("--top", type=int, default=25, help="tracemalloc sites shown")
    parser.add_argument("--frames", type=int, default=1, help="tracemalloc frames")
    parser.add_argument("--no-tracemalloc", dest="tracemalloc", action="store_false")
    parser.add_argument(
        "--no-share-rows",
        dest="share_rows",
        action="store_false",
        help="every store keeps its own row objects (the simulator before RowInterner)",
    )
    parser.add_argument("--walk-budget", type=int, default=20_000_000, help="objects per walk")
    parser.add_argument("--census-budget", type=int, default=60_000_000, help="objects")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--json-out", type=Path, help="also write the JSON to this file")
    args = parser.parse_args(argv)
    result = run(args)
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if args.json:
        out(json.dumps(result, indent=2))
    else:
        print_report(result)
    return result


if __name__ == "__main__":
    main()
