"""Parameter sweeps: a grid times seeds, one run per (point, seed), on an executor.

Each run is the pure function ``run_point(base, overrides, seed)`` of plain data, so it can go to
a local process pool (default), a Dask cluster or Ray; dask and ray are imported only when chosen
(extra ``cluster``). Results go to one CSV (one row per run, nested metrics flattened with dots),
plus a plot of the main metrics against the first grid key.

SWEEP.toml::

    base = "small.toml"          # optional scenario file, relative to the sweep file
    seeds = [1, 2, 3]
    set = ["load.tps=5"]         # optional overrides for every run
    [grid]
    "chain.sortition_c" = ["1/100", "1/10"]
    nodes = [10, 20]
"""

import csv
import itertools
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from simulator.scenario import ScenarioError, apply_override, build_scenario, parse_override
from simulator.simulation import WALL_FIELDS, Simulation

CLUSTER_HINT = "install the optional executors with: pip install 'dagchain[cluster]'"


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def run_point(
    base: dict[str, Any], overrides: list[tuple[list[str], Any]], seed: int
) -> dict[str, Any]:
    """One run of the sweep: a pure function of its arguments (wall fields dropped)."""
    data = _deep_copy(base)
    for path, value in overrides:
        apply_override(data, path, value)
    data["seed"] = seed
    scenario = build_scenario(data)
    metrics = Simulation(scenario).run().metrics
    row = {".".join(p): v for p, v in overrides}
    row["seed"] = seed
    row.update({k: v for k, v in flatten(metrics).items() if k not in WALL_FIELDS})
    return row


def _deep_copy(data: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in data.items()}


def load_sweep(path: Path) -> tuple[dict[str, Any], list[list[tuple[list[str], Any]]], list[int]]:
    """(base scenario data, one override list per grid point, seeds)."""
    try:
        spec = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ScenarioError(f"cannot read sweep {path}: {exc}") from None
    unknown = set(spec) - {"base", "seeds", "set", "grid"}
    if unknown:
        raise ScenarioError(f"unknown sweep key(s) {', '.join(sorted(unknown))}")
    base: dict[str, Any] = {}
    if "base" in spec:
        base = tomllib.loads((path.parent / spec["base"]).read_text(encoding="utf-8"))
    for item in spec.get("set", []):
        key_path, value = parse_override(item)
        apply_override(base, key_path, value)
    grid = spec.get("grid", {})
    if not grid:
        raise ScenarioError("a sweep needs a [grid] table with at least one key")
    keys = list(grid)
    points = [
        [(k.split("."), v) for k, v in zip(keys, combo, strict=True)]
        for combo in itertools.product(*(grid[k] for k in keys))
    ]
    seeds = [int(s) for s in spec.get("seeds", [1])]
    for point in points:  # fail before starting any run
        data = _deep_copy(base)
        for p, v in point:
            apply_override(data, p, v)
        build_scenario(data)
    return base, points, seeds


def _local(jobs: list[tuple[Any, ...]], workers: int) -> Iterable[dict[str, Any]]:
    from concurrent.futures import ProcessPoolExecutor

    if workers <= 1:
        return [run_point(*job) for job in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run_point, *zip(*jobs, strict=True)))


def _dask(
    jobs: list[tuple[Any, ...]], address: str | None, workers: int
) -> Iterable[dict[str, Any]]:
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise ScenarioError(f"--executor dask needs dask.distributed; {CLUSTER_HINT}") from None
    cluster = None if address else LocalCluster(n_workers=max(1, workers), processes=True)
    with Client(address or cluster) as client:
        futures = [client.submit(run_point, *job, pure=True) for job in jobs]
        return list(client.gather(futures))


def _ray(
    jobs: list[tuple[Any, ...]], address: str | None, workers: int
) -> Iterable[dict[str, Any]]:
    try:
        import ray
    except ImportError:
        raise ScenarioError(f"--executor ray needs ray; {CLUSTER_HINT}") from None
    ray.init(address=address, num_cpus=None if address else max(1, workers))
    remote = ray.remote(run_point)
    try:
        return list(ray.get([remote.remote(*job) for job in jobs]))
    finally:
        ray.shutdown()


EXECUTORS: dict[str, Callable[..., Iterable[dict[str, Any]]]] = {
    "local": lambda jobs, address, workers: _local(jobs, workers),
    "dask": _dask,
    "ray": _ray,
}


def run_sweep(
    path: Path, executor: str, workers: int, out: Path, address: str | None = None
) -> Path:
    """Run every (point, seed), write ``out/sweep.csv`` (rows in grid order) and its plot."""
    base, points, seeds = load_sweep(path)
    jobs = [(base, point, seed) for point in points for seed in seeds]
    rows = list(EXECUTORS[executor](jobs, address, workers))
    out.mkdir(parents=True, exist_ok=True)
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    csv_path = out / "sweep.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    first = ".".join(points[0][0][0])
    try:
        from simulator.plots import plot_sweep

        plot_sweep(csv_path, first, ("throughput_tps", "duplicate_tx_rate", "stale_milestone_rate"))
    except ImportError:
        pass
    return csv_path


__all__ = ["EXECUTORS", "flatten", "load_sweep", "run_point", "run_sweep"]
