"""The flow against the messages at the issue's size: network.tx_relay = "flow" vs "messages".

500 nodes (50 full), regions2019, at 10 and 100 tx/s, over >= 10 seeds (issue 24, item 3): both
models run on the same seeds; the script prints, per rate, the per-(tx, full node) arrival delay
quantiles (pooled over seeds), the run metrics as mean +- standard error over seeds, the
messages and bytes, and the CPU seconds of each run. It exits 1 if a check fails:

- arrival p50/p90/p99 within 5 % or 20 ms;
- confirmed tx/s, confirmation latency p50, mempool wait p50, block propagation p50/p90 and
  stale milestone rate within 3 standard errors of the difference of the means.

    .venv/bin/python bench/txflow_validation.py --seeds 10 --tps 10 100 --jobs 2

Results: docs/benchmarks.md ("Tx relay as a flow").
"""

import argparse
import json
import math
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

# Run as a script, this file's folder is sys.path[0] and bench/simulator.py would shadow the
# simulator package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from simulator.metrics import percentile  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402
from simulator.sim_node import SimNode  # noqa: E402
from simulator.simulation import Simulation  # noqa: E402

METRICS = (
    ("throughput_tps", None),
    ("confirmation_latency_s", "p50"),
    ("mempool_wait_s", "p50"),
    ("propagation_s", "p50"),
    ("propagation_s", "p90"),
    ("stale_milestone_rate", None),
)
QUANTILES = (0.5, 0.9, 0.99)


def one_run(args: tuple[str, int, float, argparse.Namespace]) -> dict[str, Any]:
    """One (model, seed, rate) run: arrival delays at full nodes and the metrics."""
    mode, seed, tps, opts = args
    sets = [
        'network.delay="regions2019"',
        f"network.full_nodes={opts.full}",
        f"load.tps={tps}",
        f"miners.count={opts.miners}",
        f"chain.milestone_interval_s={opts.milestone_s}",
        f"chain.block_rate={opts.block_rate}",
        f'network.tx_relay="{mode}"',
    ]
    scenario = load_scenario(None, sets, nodes=opts.nodes, duration_s=opts.duration, seed=seed)
    started = time.process_time()
    sim = Simulation(scenario)
    sim.network.sent_by_type = Counter()
    first: dict[tuple[bytes, int], float] = {}
    original = SimNode.on_deliver_tx

    def spy(self: SimNode, txid: Any, raw: bytes, src: int) -> None:
        first.setdefault((txid, self.index), sim.engine.now_ms)
        original(self, txid, raw, src)

    SimNode.on_deliver_tx = spy  # type: ignore[method-assign]
    try:
        metrics = sim.run().metrics
    finally:
        SimNode.on_deliver_tx = original  # type: ignore[method-assign]
    offered = sim.recorder.tx_offered_ms
    delays = [at - offered[txid] for (txid, _), at in first.items() if txid in offered]
    by_type: Counter[str] = Counter()
    for (_, kind), count in sim.network.sent_by_type.items():
        by_type[kind] += count
    if sim.txflow is not None:
        by_type.update(sim.txflow.by_type)
    values = {
        f"{key}.{sub}" if sub else key: (metrics[key][sub] if sub else metrics[key])
        for key, sub in METRICS
    }
    return {
        "mode": mode,
        "seed": seed,
        "tps": tps,
        "delays": delays,
        "metrics": values,
        "txs": len(offered),
        "messages": metrics["messages"],
        "bytes_sent": metrics["bytes_sent"],
        "by_type": dict(by_type),
        "events": metrics["events"],
        "cpu_s": time.process_time() - started,
    }


def mean_se(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean, se


def compare(runs: list[dict[str, Any]], tps: float) -> tuple[list[str], bool]:
    """The report lines for one rate, and whether every check passed."""
    by = {m: [r for r in runs if r["mode"] == m and r["tps"] == tps] for m in ("messages", "flow")}
    lines = [f"## {tps:g} tx/s, {len(by['flow'])} seeds"]
    ok = True
    pooled = {m: sorted(d for r in rs for d in r["delays"]) for m, rs in by.items()}
    lines.append(
        f"arrivals (tx, full node): messages {len(pooled['messages'])}, flow {len(pooled['flow'])}"
    )
    for q in QUANTILES:
        f, m = percentile(pooled["flow"], q), percentile(pooled["messages"], q)
        good = abs(f - m) <= max(0.05 * m, 20.0)
        ok &= good
        lines.append(
            f"arrival p{round(q * 100)}: messages {m:.1f} ms, flow {f:.1f} ms, "
            f"diff {f - m:+.1f} ms ({(f - m) / m:+.1%}) {'ok' if good else 'FAIL'}"
        )
    for key, sub in METRICS:
        name = f"{key}.{sub}" if sub else key
        fv = [r["metrics"][name] for r in by["flow"]]
        mv = [r["metrics"][name] for r in by["messages"]]
        (fm, fse), (mm, mse) = mean_se(fv), mean_se(mv)
        se = math.hypot(fse, mse)
        good = abs(fm - mm) <= 3 * se if se > 0 else fm == mm
        ok &= good
        lines.append(
            f"{name}: messages {mm:.4f} +- {mse:.4f}, flow {fm:.4f} +- {fse:.4f}, "
            f"diff {fm - mm:+.4f} = {(fm - mm) / se if se else 0:+.2f} se "
            f"{'ok' if good else 'FAIL'}"
        )
    for key in ("messages", "bytes_sent"):
        mm = statistics.fmean(r[key] for r in by["messages"])
        fm = statistics.fmean(r[key] for r in by["flow"])
        lines.append(f"{key}: messages {mm:.0f}, flow {fm:.0f} ({fm / mm - 1:+.1%})")
    txs = {m: sum(r["txs"] for r in rs) for m, rs in by.items()}
    lines.append(f"txs offered (all seeds): messages {txs['messages']}, flow {txs['flow']}")
    for kind in ("inv", "getdata", "tx", "block"):
        mm = sum(r["by_type"].get(kind, 0) for r in by["messages"]) / txs["messages"]
        fm = sum(r["by_type"].get(kind, 0) for r in by["flow"]) / txs["flow"]
        lines.append(
            f"'{kind}' messages per tx offered: messages {mm:.1f}, flow {fm:.1f}"
            + (f" ({fm / mm - 1:+.1%})" if mm else "")
        )
    for mode in ("messages", "flow"):
        cpu = [r["cpu_s"] for r in by[mode]]
        events = statistics.fmean(r["events"] for r in by[mode])
        lines.append(
            f"{mode}: CPU s per run mean {statistics.fmean(cpu):.1f} "
            f"(min {min(cpu):.1f}, max {max(cpu):.1f}), events {events:.0f}"
        )
    return lines, ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--full", type=int, default=50)
    parser.add_argument("--miners", type=int, default=10)
    parser.add_argument("--milestone-s", type=float, default=2.0)
    parser.add_argument("--block-rate", type=float, default=4.0)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--tps", type=float, nargs="+", default=[10.0, 100.0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", help="write every run's summary here")
    opts = parser.parse_args()
    work = [
        (mode, seed, tps, opts)
        for tps in opts.tps
        for seed in range(1, opts.seeds + 1)
        for mode in ("messages", "flow")
    ]
    runs = []
    with ProcessPoolExecutor(opts.jobs) as pool:
        for run in pool.map(one_run, work):
            runs.append(run)
            print(
                f"{run['tps']:g} tx/s seed {run['seed']} {run['mode']}: "
                f"{run['cpu_s']:.1f} CPU s, {len(run['delays'])} arrivals",
                file=sys.stderr,
                flush=True,
            )
    ok = True
    for tps in opts.tps:
        lines, good = compare(runs, tps)
        ok &= good
        print("\n".join(lines), flush=True)
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as out:
            json.dump([{k: v for k, v in r.items() if k != "delays"} for r in runs], out, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
