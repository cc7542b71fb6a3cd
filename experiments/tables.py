"""The markdown tables of docs/experiments.md from ``dagchain-sim sweep`` CSVs (issue 8).

    python experiments/tables.py bandwidth out/bandwidth/sweep.csv
    python experiments/tables.py stale out/stale/sweep.csv
    python experiments/tables.py assignment out/assignment_n/sweep.csv [--delay-s 0.16]
    python experiments/tables.py spread out/assignment/sweep.csv --by chain.sortition_c
    python experiments/tables.py capacity out/cap10k/sweep.csv --nodes 10000 --duration 60
    python experiments/tables.py capacity out/run_a out/run_b    # dagchain-sim run --out folders

``bandwidth``: steady-state (second-half) offered and confirmed tx/s, latency, stale rate,
propagation, duplicates and the mean upload utilisation ``bytes_sent`` x 8 / (nodes x duration x
bandwidth). ``stale``: the milestone stale rate pooled over seeds (stale milestones over mined
ones), its binomial SE, and the delay implied by f = 1 - exp(-delta / tau). ``assignment``: C1 and
C2 beside the run, with the mean wait estimated as p50 / ln 2 (exponential) and the product
waste x mean wait, which both C1 (refined) and C2 predict to be delta. ``spread``: the seed
spread of a sweep with several seeds, one line per grid point, each metric as mean [min, max].
``capacity``: per run, offered and confirmed tx/s (whole run and second half), confirmed /
offered in the second half, latency p50/p90, stale and duplicate rates, block propagation p90,
bytes sent per node per second, the arrivals the wallet skipped for want of a confirmed output
(``txs_starved``, "-" in sweeps older than it), and, from the ``resources.csv`` beside the CSV,
CPU seconds and peak RSS. ``capacity`` also reads the output folders of single ``dagchain-sim
run``s (a row each, named by the folder; CPU seconds and peak RSS from its manifest.json, "-" in
runs older than those fields), and sweep CSVs and folders may be mixed.
"""

import argparse
import csv
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

from simulator.sweep import flatten

Row = dict[str, str]


def _f(row: Row, key: str) -> float:
    return float(Fraction(row[key]))


def bandwidth(rows: list[Row], extra: Sequence[str] = ()) -> list[str]:
    lead = "".join(f"| {c} " for c in extra)
    out = [
        lead + "| Mbit/s | protocol | offered tps | offered (2nd half) | confirmed (2nd half) "
        "| confirmed / offered | confirmed (whole run) | latency p50 s | p90 s "
        "| stale milestones | propagation p90 s | duplicate rate | utilisation |",
        "|---" * len(extra) + "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        bw = _f(r, "network.bandwidth_mbps")
        nodes = _f(r, "nodes") if "nodes" in r else 20.0
        duration = _f(r, "duration_s") if "duration_s" in r else 120.0
        util = _f(r, "bytes_sent") * 8 / (nodes * duration * bw * 1e6)
        o2, c2 = _f(r, "offered_tps_second_half"), _f(r, "throughput_tps_second_half")
        ratio = c2 / o2 if o2 else 0.0
        out.append(
            "".join(f"| {r[c]} " for c in extra)
            + f"| {r['network.bandwidth_mbps']} | {r.get('protocol', '(file)')} "
            f"| {r.get('load.tps', '(file)')} | {o2:.1f} "
            f"| {c2:.1f} | {ratio:.2f} | {_f(r, 'throughput_tps'):.1f} "
            f"| {_f(r, 'confirmation_latency_s.p50'):.2f} "
            f"| {_f(r, 'confirmation_latency_s.p90'):.2f} | {_f(r, 'stale_milestone_rate'):.3f} "
            f"| {_f(r, 'propagation_s.p90'):.2f} | {_f(r, 'duplicate_tx_rate'):.3f} | {util:.3f} |"
        )
    return out


def run_row(folder: Path) -> tuple[Row, Row]:
    """The sweep-CSV row and the resources row of one ``dagchain-sim run --out folder``."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{folder}: not a dagchain-sim run's output folder ({exc})") from None
    scenario = manifest["scenario"]
    row = {key: str(value) for key, value in flatten(metrics).items()}  # as sweep.csv has them
    row.update(
        {
            "protocol": f"{scenario['protocol']} ({folder.name})",
            "load.tps": str(scenario["load"]["tps"]),
            "duration_s": str(scenario["duration_s"]),
            "nodes": str(scenario["nodes"]),
            "seed": str(manifest["seed"]),
        }
    )
    cost = {k: str(manifest[k]) for k in ("cpu_s", "peak_rss_mib") if k in manifest}
    return row, cost


def capacity(rows: list[Row], costs: list[Row], nodes: int, duration_s: float | None) -> list[str]:
    out = [
        "| protocol | offered tps | confirmed (whole run) | offered (2nd half) "
        "| confirmed (2nd half) | confirmed / offered | latency p50 s | p90 s "
        "| latency p50 / p90 s (2nd half) "
        "| stale milestones | duplicate rate | propagation p90 s | kB/s sent per node "
        "| starved | CPU s | peak RSS GiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(rows):
        cost = costs[i] if i < len(costs) else {}
        seconds = _f(r, "duration_s") if r.get("duration_s") else duration_s
        if not seconds:
            raise SystemExit("capacity: a sweep without a duration_s column needs --duration")
        o2, c2 = _f(r, "offered_tps_second_half"), _f(r, "throughput_tps_second_half")
        per_node = _f(r, "bytes_sent") / ((_f(r, "nodes") if r.get("nodes") else nodes) * seconds)
        per_node /= 1000
        cpu = f"{float(cost['cpu_s']):,.0f}" if "cpu_s" in cost else "-"
        rss = f"{float(cost['peak_rss_mib']) / 1024:.1f}" if "peak_rss_mib" in cost else "-"
        starved = f"{int(_f(r, 'txs_starved')):,}" if r.get("txs_starved") else "-"
        late = "confirmation_latency_s_second_half"
        late_latency = (
            f"{_f(r, late + '.p50'):.2f} / {_f(r, late + '.p90'):.2f}"
            if r.get(late + ".p50")
            else "-"
        )
        out.append(
            f"| {r.get('protocol', '(file)')} | {_f(r, 'offered_tps'):,.0f} "
            f"| {_f(r, 'throughput_tps'):,.0f} | {o2:,.0f} | {c2:,.0f} "
            f"| {c2 / o2 if o2 else 0.0:.2f} "
            f"| {_f(r, 'confirmation_latency_s.p50'):.2f} "
            f"| {_f(r, 'confirmation_latency_s.p90'):.2f} | {late_latency} "
            f"| {_f(r, 'stale_milestone_rate'):.3f} | {_f(r, 'duplicate_tx_rate'):.3f} "
            f"| {_f(r, 'propagation_s.p90'):.2f} | {per_node:,.1f} | {starved} | {cpu} | {rss} |"
        )
    return out


def stale(rows: list[Row], nodes: int, duration_s: float) -> list[str]:
    groups: dict[tuple[float, float], list[Row]] = defaultdict(list)
    for r in rows:
        groups[(_f(r, "chain.milestone_interval_s"), _f(r, "chain.block_rate"))].append(r)
    out = [
        "| τ s | λ /s | b | milestones mined | stale per seed | stale, pooled | SE "
        "| implied δ s | propagation p50 / p90 s | upload per node kbit/s |",
        "|---:|---:|---:|---:|---|---:|---:|---:|---|---:|",
    ]
    for (tau, lam), rs in sorted(groups.items()):
        mined = [int(r["milestones_mined"]) for r in rs]
        rates = [_f(r, "stale_milestone_rate") for r in rs]
        total = sum(mined)
        f = sum(m * s for m, s in zip(mined, rates, strict=True)) / total if total else 0.0
        se = math.sqrt(f * (1 - f) / total) if total else 0.0
        delta = -tau * math.log(1 - f) if f < 1 else math.inf
        upload = statistics.fmean(_f(r, "bytes_sent") for r in rs) * 8 / (nodes * duration_s)
        p50 = statistics.fmean(_f(r, "propagation_s.p50") for r in rs)
        p90 = statistics.fmean(_f(r, "propagation_s.p90") for r in rs)
        per_seed = ", ".join(f"{s:.3f}" for s in rates)
        out.append(
            f"| {tau:g} | {lam:g} | {round(tau * lam)} | {total} | {per_seed} | {f:.3f} "
            f"| {se:.3f} | {delta:.3f} | {p50:.2f} / {p90:.2f} | {upload / 1000:.0f} |"
        )
    return out


def assignment(
    rows: list[Row], block_rate: float, delay_s: float, default_weighting: str
) -> list[str]:
    out = [
        "| weighting | N | c | offered tps | confirmed tps | duplicate rate | C1 c·λ·δ·Σs² "
        "| wait p50 s | wait p90 s | mean wait ≈ p50/ln 2 | C2 1/(λcΣs²) | waste·mean wait s |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        n = int(_f(r, "miners.count"))
        c = _f(r, "chain.sortition_c")
        weighting = r.get("chain.sortition_weighting", default_weighting)
        sum_sq = 1.0 if weighting == "uniform" else 1.0 / n  # equal chains
        dup = _f(r, "duplicate_tx_rate")
        p50, p90 = _f(r, "mempool_wait_s.p50"), _f(r, "mempool_wait_s.p90")
        mean = p50 / math.log(2)
        out.append(
            f"| {weighting} | {n} | {r['chain.sortition_c']} | {_f(r, 'offered_tps'):.1f} "
            f"| {_f(r, 'throughput_tps'):.1f} | {dup:.4f} "
            f"| {c * block_rate * delay_s * sum_sq:.4f} "
            f"| {p50:.2f} | {p90:.2f} | {mean:.2f} | {1 / (block_rate * c * sum_sq):.2f} "
            f"| {dup * mean:.3f} |"
        )
    return out


WASTE_X_WAIT = "waste_x_wait"
"""Derived per run: duplicate_tx_rate x mempool_wait_s.p50 / ln 2 (section 2b's trade-off law)."""


def _metric(row: Row, name: str) -> float:
    if name == WASTE_X_WAIT:
        return _f(row, "duplicate_tx_rate") * _f(row, "mempool_wait_s.p50") / math.log(2)
    return _f(row, name)


def spread(rows: list[Row], by: Sequence[str], metrics: Sequence[str]) -> list[str]:
    """One line per grid point (the ``by`` columns): seeds, then each metric's mean [min, max]."""
    groups: dict[tuple[str, ...], list[Row]] = defaultdict(list)
    for r in rows:
        groups[tuple(r.get(col, "") for col in by)].append(r)
    out = [
        "".join(f"| {c} " for c in by) + "| seeds " + "".join(f"| {m} " for m in metrics) + "|",
        "|---" * len(by) + "|---" + "|---:" * len(metrics) + "|",
    ]
    for key, group in groups.items():
        seeds = ", ".join(r.get("seed", "?") for r in group)
        cells = []
        for m in metrics:
            values = [_metric(r, m) for r in group]
            digits = 4 if max(abs(v) for v in values) < 1 else 2
            mean = statistics.fmean(values)
            cells.append(f"{mean:.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]")
        out.append(
            "".join(f"| {k} " for k in key)
            + f"| {seeds} "
            + "".join(f"| {c} " for c in cells)
            + "|"
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["bandwidth", "stale", "assignment", "spread", "capacity"])
    parser.add_argument(
        "paths", type=Path, nargs="+", help="a sweep CSV (capacity: CSVs and run folders)"
    )
    parser.add_argument("--extra", nargs="*", default=[], help="bandwidth: leading columns")
    parser.add_argument("--by", nargs="*", default=[], help="spread: the grid columns")
    parser.add_argument(
        "--metrics",
        nargs="*",
        default=["duplicate_tx_rate", "mempool_wait_s.p50", "throughput_tps", WASTE_X_WAIT],
        help=f"spread: metric columns ({WASTE_X_WAIT} = duplicates x p50 / ln 2)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=20,
        help="stale, capacity: nodes per run (a run folder: its own)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="stale (default 240), capacity: seconds (of rows without a duration_s of their own)",
    )
    parser.add_argument("--block-rate", type=float, default=8.0, help="assignment: lambda")
    parser.add_argument("--delay-s", type=float, default=0.16, help="assignment: delta of C1")
    parser.add_argument(
        "--weighting", default="uniform", help="assignment: when the CSV has no weighting column"
    )
    args = parser.parse_args(argv)
    for path in args.paths:
        if not path.exists():
            parser.error(f"{path}: no such file or folder")
    if args.kind == "capacity":
        rows, costs = [], []
        for path in args.paths:
            if path.is_dir():
                row, cost = run_row(path)
                rows.append(row)
                costs.append(cost)
                continue
            with path.open(encoding="utf-8") as fh:
                found = list(csv.DictReader(fh))
            resources = path.parent / "resources.csv"
            spent: list[Row] = []
            if resources.exists():
                with resources.open(encoding="utf-8") as fh:
                    spent = list(csv.DictReader(fh))
            rows += found
            costs += spent[: len(found)] + [{}] * (len(found) - len(spent))
        print("\n".join(capacity(rows, costs, args.nodes, args.duration)))
        return 0
    if len(args.paths) != 1:
        parser.error(f"{args.kind} reads one sweep CSV")
    with args.paths[0].open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if args.kind == "bandwidth":
        lines = bandwidth(rows, args.extra)
    elif args.kind == "stale":
        lines = stale(rows, args.nodes, 240.0 if args.duration is None else args.duration)
    elif args.kind == "spread":
        lines = spread(rows, args.by, args.metrics)
    else:
        lines = assignment(rows, args.block_rate, args.delay_s, args.weighting)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
