"""Confirmation latency at equal security (issue 8, experiment 4), derived from a sweep CSV.

A milestone that goes stale adds nothing to the honest chain, while a private attacker loses none
of its own, so with a measured stale rate f the attacker's effective share of milestone production
is q' = q / (q + (1 - q)(1 - f)). For a double-spend risk bound eps, the merchant needs the smallest
depth z with P(q', z) <= eps (Rosenfeld / Grunspan-Perez-Marco, ``simulator.adversary``). The
time to that depth is estimated as the measured one-confirmation latency (p50 / p90) plus
(z - 1) best-chain milestone intervals, the interval being 1 / ``milestones_per_s`` of the run.
This is a model on top of the measurement (delay enters only through f), not a simulated attack.

    python experiments/equal_security.py out/capacity/sweep.csv --q 0.1 0.25 --eps 0.001
"""

import argparse
import csv
from collections.abc import Sequence
from pathlib import Path

from simulator.adversary import double_spend_probability

MAX_DEPTH = 500


def effective_share(q: float, stale: float) -> float:
    """The attacker's share of milestone production once honest stale milestones are lost."""
    return q / (q + (1.0 - q) * (1.0 - stale))


def depth_for(q: float, eps: float) -> int | None:
    """Smallest depth z >= 1 with success probability <= eps (None: not within MAX_DEPTH)."""
    for z in range(1, MAX_DEPTH + 1):
        if double_spend_probability(q, z) <= eps:
            return z
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--q", type=float, nargs="+", default=[0.1, 0.25])
    parser.add_argument("--eps", type=float, default=0.001)
    parser.add_argument("--columns", nargs="*", default=["protocol", "load.tps"])
    args = parser.parse_args(argv)
    with args.csv.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    cols = [c for c in args.columns if rows and c in rows[0]]
    head = [*cols, "stale", "ms interval s", "1-conf p50 s", "1-conf p90 s"]
    for q in args.q:
        head += [f"q={q}: q'", "z", "p50 s", "p90 s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(cols) + "---:|" * (len(head) - len(cols)))
    for r in rows:
        stale = float(r["stale_milestone_rate"])
        rate = float(r["milestones_per_s"])
        interval = 1.0 / rate if rate > 0 else float("inf")
        p50 = float(r["confirmation_latency_s.p50"])
        p90 = float(r["confirmation_latency_s.p90"])
        cells = [r[c] for c in cols] + [
            f"{stale:.3f}",
            f"{interval:.2f}",
            f"{p50:.2f}",
            f"{p90:.2f}",
        ]
        for q in args.q:
            qe = effective_share(q, stale)
            z = depth_for(qe, args.eps)
            if z is None:
                cells += [f"{qe:.3f}", "—", "—", "—"]
            else:
                extra = (z - 1) * interval
                cells += [f"{qe:.3f}", str(z), f"{p50 + extra:.1f}", f"{p90 + extra:.1f}"]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
