"""Simulator speed (issue 5): events/s, wall time and peak memory at 100 and 1,000 nodes.

Run: ``python bench/simulator.py [--duration S] [--tps N] [--sizes 100,1000]``. Each size runs in
its own process (so peak RSS is that run's) with the default scenario at 8 blocks/s, 10 miners,
degree 8, ``regions2019`` delays and a Poisson tx load. The last line is
``realtime_factor_1000: <simulated seconds per wall second at 1,000 nodes>``.
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


def one_run(nodes: int, duration: float, tps: float, seed: int) -> dict[str, float]:
    """Run one scenario in this process; report wall time, events and peak RSS."""
    from simulator.scenario import load_scenario
    from simulator.simulation import Simulation

    scenario = load_scenario(
        None,
        [f"load.tps={tps}", 'network.delay="regions2019"'],
        nodes=nodes,
        duration_s=duration,
        seed=seed,
    )
    started = time.perf_counter()
    sim = Simulation(scenario)
    built = time.perf_counter() - started
    result = sim.run()
    wall = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    m = result.metrics
    return {
        "nodes": nodes,
        "sim_s": duration,
        "wall_s": round(wall, 2),
        "build_s": round(built, 2),
        "events": m["events"],
        "events_per_s": round(m["events"] / wall),
        "realtime_factor": round(duration / wall, 3),
        "peak_rss_mib": round(peak_kib / 1024, 1),
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
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(one_run(args.child, args.duration, args.tps, args.seed)))
        return
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        cmd = [sys.executable, __file__, "--child", str(size), "--duration", str(args.duration)]
        cmd += ["--tps", str(args.tps), "--seed", str(args.seed)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    cols = list(results[0])
    print("  ".join(f"{c:>17}" for c in cols))
    for r in results:
        print("  ".join(f"{r[c]!s:>17}" for c in cols))
    last = [r for r in results if r["nodes"] == 1000] or results[-1:]
    print(f"realtime_factor_1000: {last[0]['realtime_factor']}")


if __name__ == "__main__":
    main()
