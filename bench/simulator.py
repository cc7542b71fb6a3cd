"""Simulator speed: events/s, wall time and peak memory at 100 and 1,000 nodes.

Results and their reading: docs/benchmarks.md, section "Simulator".

Run: ``python bench/simulator.py [--duration S] [--tps N] [--sizes 100,1000]``. Each size runs in
its own process (so peak RSS is that run's) with the default scenario at 8 blocks/s, 10 miners,
degree 8, ``regions2019`` delays and a Poisson tx load; every node is a full node. The last line
is ``realtime_factor_1000: <simulated seconds per wall second at 1,000 nodes>``.

``--tx-relay`` is ``network.tx_relay``: ``flow`` (the default since 2026-12-06: txs spread as
the validated flow, docs/simulator.md says when to choose it) or ``messages`` (the node relay's
own tx messages, which every figure before that date used). ``--full-nodes F`` makes only nodes
0..F-1 full and the others relay-only (``network.full_nodes``; not the headline figure).
``--log`` prints a progress line to stderr every 10 simulated seconds (simulated s, wall s, CPU
s, events, RSS MiB), to extrapolate runs too long to finish, e.g.
``python bench/simulator.py --sizes 10000 --full-nodes 100 --duration 120 --log``.
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one_run(
    nodes: int,
    duration: float,
    tps: float,
    seed: int,
    full_nodes: int = 0,
    log: bool = False,
    tx_relay: str = "flow",
) -> dict[str, float | str]:
    """Run one scenario in this process; report wall time, events and peak RSS."""
    from simulator.scenario import load_scenario
    from simulator.simulation import Simulation

    scenario = load_scenario(
        None,
        [
            f"load.tps={tps}",
            'network.delay="regions2019"',
            f"network.full_nodes={full_nodes}",
            f'network.tx_relay="{tx_relay}"',
        ],
        nodes=nodes,
        duration_s=duration,
        seed=seed,
    )
    started = time.perf_counter()
    cpu_started = time.process_time()
    sim = Simulation(scenario)
    built = time.perf_counter() - started
    progress = None
    if log:
        next_log = [10_000.0]

        def progress(now_ms: float) -> None:
            if now_ms >= next_log[0]:
                next_log[0] += 10_000.0
                wall = time.perf_counter() - started
                cpu = time.process_time() - cpu_started
                line = f"sim_s {now_ms / 1000:.1f} wall_s {wall:.1f} cpu_s {cpu:.1f}"
                line += f" events {sim.engine.events}"
                print(f"{line} rss_mib {_rss_mib():.0f}", file=sys.stderr, flush=True)

    result = sim.run(progress)
    wall = time.perf_counter() - started
    m = result.metrics
    return {
        "nodes": nodes,
        "full_nodes": full_nodes or nodes,
        "tx_relay": tx_relay,
        "sim_s": duration,
        "wall_s": round(wall, 2),
        "cpu_s": round(time.process_time() - cpu_started, 2),
        "build_s": round(built, 2),
        "events": m["events"],
        "events_per_s": round(m["events"] / wall),
        "realtime_factor": round(duration / wall, 3),
        "peak_rss_mib": round(_rss_mib(), 1),
        "blocks_per_s": m["blocks_per_s"],
        "offered_tps": m["offered_tps"],
        "throughput_tps": m["throughput_tps"],
        "propagation_p90_s": m["propagation_s"]["p90"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=60.0, help="simulated seconds")
    parser.add_argument("--tps", type=float, default=20.0, help="offered tx load")
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--full-nodes", type=int, default=0, help="nodes running the full core (0 = all)"
    )
    parser.add_argument("--log", action="store_true", help="progress lines on stderr")
    parser.add_argument(
        "--tx-relay",
        choices=("messages", "flow"),
        default="flow",
        help="network.tx_relay: the validated flow (default) or the node relay's tx messages",
    )
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        row = one_run(
            args.child, args.duration, args.tps, args.seed, args.full_nodes, args.log, args.tx_relay
        )
        print(json.dumps(row))
        return
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        cmd = [sys.executable, __file__, "--child", str(size), "--duration", str(args.duration)]
        cmd += ["--tps", str(args.tps), "--seed", str(args.seed)]
        cmd += ["--full-nodes", str(args.full_nodes), "--tx-relay", args.tx_relay]
        cmd += ["--log"] if args.log else []
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    cols = list(results[0])
    print("  ".join(f"{c:>17}" for c in cols))
    for r in results:
        print("  ".join(f"{r[c]!s:>17}" for c in cols))
    last = [r for r in results if r["nodes"] == 1000] or results[-1:]
    print(f"realtime_factor_1000: {last[0]['realtime_factor']}")


if __name__ == "__main__":
    main()
