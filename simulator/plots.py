"""PNG figures drawn from result files only (blocks.csv, metrics.json, a sweep's CSV).

matplotlib is imported lazily (Agg backend), so runs without plots never load it.
"""

import csv
import json
from fractions import Fraction
from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _read_blocks(out: Path) -> list[dict[str, str]]:
    with (out / "blocks.csv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def plot_run(out: Path) -> list[Path]:
    """propagation.png, throughput.png and confirmation.png from a run directory."""
    plt = _pyplot()
    rows = _read_blocks(out)
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    written = []

    fig, ax = plt.subplots(figsize=(6, 4))
    for col, label in (
        ("prop_p50_s", "50% of nodes"),
        ("prop_p90_s", "90% of nodes"),
        ("prop_max_s", "all nodes"),
    ):
        values = sorted(float(r[col]) for r in rows)
        if values:
            ax.plot(values, [(i + 1) / len(values) for i in range(len(values))], label=label)
    ax.set_xlabel("time since mining (s)")
    ax.set_ylabel("fraction of blocks")
    ax.set_title("Block propagation CDF")
    ax.legend()
    written.append(_save(fig, out / "propagation.png", plt))

    fig, ax = plt.subplots(figsize=(6, 4))
    bins: dict[int, int] = {}
    txs: dict[int, int] = {}
    for r in rows:
        second = int(float(r["created_s"]) // 10)
        bins[second] = bins.get(second, 0) + 1
        txs[second] = txs.get(second, 0) + int(r["txs"])
    xs = sorted(bins)
    ax.plot([10 * x for x in xs], [bins[x] / 10 for x in xs], label="blocks/s")
    ax.plot([10 * x for x in xs], [txs[x] / 10 for x in xs], label="tx inclusions/s")
    ax.axhline(
        metrics.get("throughput_tps", 0.0),
        linestyle="--",
        color="grey",
        label="confirmed tps (mean)",
    )
    ax.set_xlabel("simulated time (s)")
    ax.set_title("Throughput (10 s bins)")
    ax.legend()
    written.append(_save(fig, out / "throughput.png", plt))

    fig, ax = plt.subplots(figsize=(6, 4))
    lat = metrics.get("confirmation_latency_s", {})
    wait = metrics.get("mempool_wait_s", {})
    names = [f"confirm {k}" for k in lat] + [f"wait {k}" for k in wait]
    ax.bar(names, [*lat.values(), *wait.values()])
    ax.set_ylabel("seconds")
    ax.set_title("Confirmation latency and mempool wait")
    written.append(_save(fig, out / "confirmation.png", plt))
    return written


def plot_sweep(csv_path: Path, x: str, ys: tuple[str, ...]) -> Path:
    """One line per metric in ``ys`` against the swept parameter ``x`` (mean over seeds)."""
    plt = _pyplot()
    with csv_path.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    fig, ax = plt.subplots(figsize=(6, 4))
    for y in ys:
        groups: dict[float, list[float]] = {}
        for r in rows:
            try:
                groups.setdefault(float(Fraction(r[x])), []).append(float(r[y]))
            except (KeyError, ValueError):
                continue
        xs = sorted(groups)
        ax.plot(xs, [sum(groups[v]) / len(groups[v]) for v in xs], marker="o", label=y)
    ax.set_xlabel(x)
    ax.legend()
    return _save(fig, csv_path.with_suffix(".png"), plt)


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = ["plot_run", "plot_sweep"]
