"""Plot a ``dagchain-sim sweep`` CSV with one line per value of a grouping column (issue 8).

``sweep.png`` from ``dagchain-sim sweep`` averages every row with the same first grid value, which
mixes protocols in a protocol x load grid; this draws each group separately, one panel per metric.

    python experiments/plot.py out/capacity/sweep.csv --x load.tps --by protocol \\
        --y throughput_tps confirmation_latency_s.p50 --out docs/experiments/capacity.png

``--where load.tps=200`` keeps only the rows with that exact value (several conditions allowed).
"""

import argparse
import csv
from fractions import Fraction
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--x", required=True, help="column on the x axis (numbers or fractions)")
    parser.add_argument("--y", nargs="+", required=True, help="one panel per column")
    parser.add_argument("--by", help="one line per value of this column")
    parser.add_argument(
        "--where", nargs="*", default=[], metavar="COL=VALUE", help="keep only matching rows"
    )
    parser.add_argument("--logx", action="store_true")
    parser.add_argument("--logy", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with args.csv.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for cond in args.where:
        col, _, value = cond.partition("=")
        rows = [r for r in rows if r[col] == value]
    if not rows:
        parser.error("no rows left after --where")
    groups = sorted({r[args.by] for r in rows}) if args.by else [""]
    fig, axes = plt.subplots(1, len(args.y), figsize=(4.2 * len(args.y), 3.4), squeeze=False)
    for ax, y in zip(axes[0], args.y, strict=True):
        for group in groups:
            points: dict[float, list[float]] = {}
            for r in rows:
                if args.by and r[args.by] != group:
                    continue
                points.setdefault(float(Fraction(r[args.x])), []).append(float(r[y]))
            xs = sorted(points)
            ys = [sum(points[v]) / len(points[v]) for v in xs]
            ax.plot(xs, ys, marker="o", label=group or y)
        ax.set_xlabel(args.x)
        ax.set_title(y, fontsize=10)
        if args.logx:
            ax.set_xscale("log")
        if args.logy:
            ax.set_yscale("log")
        if args.by:
            ax.legend(fontsize=8)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=80)
    plt.close(fig)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
