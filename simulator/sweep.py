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
import hashlib
import itertools
import json
import resource
import socket
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator.cli import PROGRESS_LOG_S, ProgressLog
from simulator.scenario import ScenarioError, apply_override, build_scenario, parse_override
from simulator.simulation import WALL_FIELDS, Simulation

CLUSTER_HINT = "install the optional executors with: pip install 'dagchain[cluster]'"
CONNECT_TIMEOUT_S = 3.0
"""How long the check before a dask or ray sweep waits for a TCP connection to ``--address``."""
DASK_TIMEOUT_S = 10
"""How long the Dask client waits for a scheduler handshake once the port accepts connections."""
_DEFAULT_PORTS = {"dask": 8786, "ray": 6379, "ray://": 10001}
_SCHEMES = {"dask": ("tcp", "tls", "ws", "wss"), "ray": ("ray",)}


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


PROGRESS_EVERY_S = PROGRESS_LOG_S
"""Wall seconds between two progress lines of a run (on the worker's stderr: the terminal for
``--executor local``, the worker's log on a cluster); none in a shorter run."""

RESOURCE_PREFIX = "resource."
"""Row keys of what a run cost (CPU, wall, peak RSS, host): not results, so :func:`run_sweep`
writes them to ``resources.csv``, and ``sweep.csv`` stays the same on every executor."""


def run_point(
    base: dict[str, Any], overrides: list[tuple[list[str], Any]], seed: int
) -> dict[str, Any]:
    """One run of the sweep: a pure function of its arguments (wall fields dropped), plus what
    it cost under ``RESOURCE_PREFIX`` keys (CPU and wall seconds of this process during the run,
    its peak RSS so far: a pool worker's earlier runs count, so an upper bound)."""
    cpu, wall = time.process_time(), time.monotonic()
    data = _deep_copy(base)
    for path, value in overrides:
        apply_override(data, path, value)
    data["seed"] = seed
    scenario = build_scenario(data)
    sim = Simulation(scenario)
    point = " ".join(f"{'.'.join(p)}={v}" for p, v in overrides)
    log = ProgressLog(
        scenario.duration_s * 1000.0,
        sys.stderr,
        lambda: sim.engine.events,
        every_s=PROGRESS_EVERY_S,
        label=f"run {point} seed {seed}",
    )
    metrics = sim.run(progress=log).metrics
    row = {".".join(p): v for p, v in overrides}
    row["seed"] = seed
    row.update({k: v for k, v in flatten(metrics).items() if k not in WALL_FIELDS})
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    row.update(
        {
            f"{RESOURCE_PREFIX}cpu_s": round(time.process_time() - cpu, 2),
            f"{RESOURCE_PREFIX}wall_s": round(time.monotonic() - wall, 2),
            f"{RESOURCE_PREFIX}peak_rss_mib": round(peak_kib / 1024, 1),
            f"{RESOURCE_PREFIX}host": socket.gethostname(),
        }
    )
    return row


RUNS_DIR = "runs"
"""``OUT/runs/``: one JSON file per finished run (its job and its row), written as it finishes,
so a sweep stopped before its end keeps them and the same sweep into the same ``--out`` goes on
from them (:func:`run_sweep`)."""

Finished = Callable[[int, dict[str, Any]], None]
"""An executor's report of one finished run: (index into its jobs, the run's row)."""


def _job_data(job: tuple[Any, ...]) -> Any:
    """The job as JSON data: what a kept run must match to be reused."""
    base, overrides, seed = job
    return json.loads(json.dumps({"base": base, "overrides": overrides, "seed": seed}))


def _run_file(runs: Path, job: tuple[Any, ...]) -> Path:
    text = json.dumps(_job_data(job), sort_keys=True)
    return runs / f"{hashlib.sha256(text.encode()).hexdigest()[:20]}.json"


def _keep(runs: Path, job: tuple[Any, ...], row: dict[str, Any]) -> None:
    """Write a finished run's row (atomically: a stop mid-write leaves no half file)."""
    runs.mkdir(exist_ok=True)
    path = _run_file(runs, job)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"job": _job_data(job), "row": row}), encoding="utf-8")
    tmp.replace(path)


def _finished(runs: Path, job: tuple[Any, ...]) -> dict[str, Any] | None:
    """The row a previous sweep kept for exactly this job, if any (a file that cannot be read
    or holds another job is not reused)."""
    path = _run_file(runs, job)
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("job") != _job_data(job):
        return None
    row = kept.get("row")
    return row if isinstance(row, dict) else None


def _resources(row: dict[str, Any]) -> dict[str, Any]:
    n = len(RESOURCE_PREFIX)
    return {k[n:]: v for k, v in row.items() if k.startswith(RESOURCE_PREFIX)}


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


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


def cluster_endpoint(executor: str, address: str) -> tuple[str, int] | None:
    """(host, port) that a dask or ray ``--address`` names, or None when it names no TCP endpoint.

    Dask: ``[tcp|tls|ws|wss://]HOST[:PORT]`` (port 8786 by default). Ray: ``HOST[:PORT]`` (the
    head's GCS port, 6379 by default), ``ray://HOST[:PORT]`` (Ray Client, 10001), or
    ``auto``/``local`` (no endpoint to check).

    Raises:
        ScenarioError: the address cannot be read.
    """
    text = address.strip()
    if executor == "ray" and text in ("auto", "local"):
        return None
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    elif scheme not in _SCHEMES.get(executor, ()):
        raise ScenarioError(f"--address {address}: unsupported scheme {scheme}:// for {executor}")
    default = _DEFAULT_PORTS["ray://" if scheme == "ray" else executor]
    rest = rest.rstrip("/")
    if rest.startswith("["):  # [IPv6]:port
        host, bracket, tail = rest[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
        if not bracket or (tail and not tail.startswith(":")):
            raise ScenarioError(f"--address {address}: cannot read the host and port")
    else:
        host, colon, port_text = rest.rpartition(":")
        if not colon:
            host, port_text = rest, ""
    if not host or (port_text and not (port_text.isascii() and port_text.isdigit())):
        raise ScenarioError(f"--address {address}: cannot read the host and port")
    port = int(port_text) if port_text else default
    if not 0 < port < 65536:
        raise ScenarioError(f"--address {address}: port {port} is not in 1..65535")
    return host, port


def check_cluster(executor: str, address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast, in one line, when nothing accepts TCP connections at ``--address``.

    Neither dask nor ray needs to be imported: without this check a Dask client retries for 30 s
    and ends in a traceback, and ``ray.init`` waits for a head that is not there until killed.

    Raises:
        ScenarioError: the address cannot be read, or the connection fails within ``timeout``.
    """
    endpoint = cluster_endpoint(executor, address)
    if endpoint is None:
        return
    what = "Dask scheduler" if executor == "dask" else "Ray cluster"
    try:
        with socket.create_connection(endpoint, timeout=timeout):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ScenarioError(f"cannot reach the {what} at {address}: {reason}") from None


def _describe(job: tuple[Any, ...]) -> str:
    _, overrides, seed = job
    return ", ".join([*(f"{'.'.join(p)}={v}" for p, v in overrides), f"seed={seed}"])


def _local(jobs: list[tuple[Any, ...]], workers: int, done: Finished) -> None:
    """Runs in a process pool; one progress line per finished run on stderr."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    started = time.monotonic()
    total = len(jobs)

    def report(count: int, job: tuple[Any, ...]) -> None:
        elapsed = time.monotonic() - started
        print(
            f"sweep: {count}/{total} done ({_describe(job)}), {elapsed:.0f} s elapsed",
            file=sys.stderr,
            flush=True,
        )

    if workers <= 1:
        for count, job in enumerate(jobs, 1):
            done(count - 1, run_point(*job))
            report(count, job)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_point, *job): i for i, job in enumerate(jobs)}
        for count, future in enumerate(as_completed(futures), 1):
            i = futures[future]
            done(i, future.result())
            report(count, jobs[i])


def local_dask_cluster(workers: int) -> Any:
    """The local Dask cluster of ``--executor dask`` without ``--address``.

    One process per worker, one thread each (a run holds the GIL throughout), no fixed
    dashboard port (a second local cluster on the machine must not fail), and **no worker
    memory limit**: Dask's default gives each worker the machine's memory divided by the
    workers and restarts a worker past 95 % of it, so a 10,000-node run of 10-15 GiB on a
    24 GiB, two-worker machine was killed and retried instead of finishing as it does with
    ``--executor local``. A simulation is one task whose memory cannot be spilled.
    """
    from dask.distributed import LocalCluster

    return LocalCluster(
        n_workers=max(1, workers),
        processes=True,
        threads_per_worker=1,
        memory_limit=0,
        dashboard_address=":0",
    )


def _dask(jobs: list[tuple[Any, ...]], address: str | None, workers: int, done: Finished) -> None:
    try:
        from dask.distributed import Client
    except ImportError:
        raise ScenarioError(f"--executor dask needs dask.distributed; {CLUSTER_HINT}") from None
    if address:
        try:
            client = Client(address, timeout=DASK_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ScenarioError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    else:
        client = Client(local_dask_cluster(workers))
    from dask.distributed import as_completed

    with client:  # pure=False: a grid that repeats a point still gets one future per run
        futures = {client.submit(run_point, *job, pure=False): i for i, job in enumerate(jobs)}
        for future in as_completed(futures):
            done(futures[future], future.result())


def _ray(jobs: list[tuple[Any, ...]], address: str | None, workers: int, done: Finished) -> None:
    try:
        import ray
    except ImportError:
        raise ScenarioError(f"--executor ray needs ray; {CLUSTER_HINT}") from None
    ray.init(address=address, num_cpus=None if address else max(1, workers))
    remote = ray.remote(run_point)
    try:
        refs = {remote.remote(*job): i for i, job in enumerate(jobs)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            done(refs[ready[0]], ray.get(ready[0]))
    finally:
        ray.shutdown()


EXECUTORS: dict[str, Callable[..., None]] = {
    "local": lambda jobs, address, workers, done: _local(jobs, workers, done),
    "dask": _dask,
    "ray": _ray,
}


def run_sweep(
    path: Path, executor: str, workers: int, out: Path, address: str | None = None
) -> Path:
    """Run every (point, seed), write ``out/sweep.csv`` (rows in grid order) and its plot, and
    ``out/resources.csv`` (the same runs' CPU and wall seconds, peak RSS and host).

    With ``address`` the cluster is checked first (:func:`check_cluster`), before anything runs.
    """
    base, points, seeds = load_sweep(path)
    if address and executor != "local":
        check_cluster(executor, address)
    jobs = [(base, point, seed) for point in points for seed in seeds]
    out.mkdir(parents=True, exist_ok=True)
    runs = out / RUNS_DIR
    found: list[dict[str, Any] | None] = [_finished(runs, job) for job in jobs]
    todo = [i for i, row in enumerate(found) if row is None]
    if len(todo) < len(jobs):
        print(
            f"sweep: {len(jobs) - len(todo)} of {len(jobs)} runs already done in {runs}/, "
            f"running the other {len(todo)}",
            file=sys.stderr,
            flush=True,
        )

    def done(k: int, row: dict[str, Any]) -> None:
        found[todo[k]] = row
        _keep(runs, jobs[todo[k]], row)

    if todo:
        EXECUTORS[executor]([jobs[i] for i in todo], address, workers, done)
    rows = [row for row in found if row is not None]
    keys = [".".join(p) for p, _ in points[0]] + ["seed"]
    costs = [{**{k: row.get(k) for k in keys}, **_resources(row)} for row in rows]
    rows = [{k: v for k, v in row.items() if not k.startswith(RESOURCE_PREFIX)} for row in rows]
    csv_path = out / "sweep.csv"
    _write_csv(csv_path, rows)
    _write_csv(out / "resources.csv", costs)
    first = ".".join(points[0][0][0])
    try:
        from simulator.plots import plot_sweep

        plot_sweep(csv_path, first, ("throughput_tps", "duplicate_tx_rate", "stale_milestone_rate"))
    except ImportError:
        pass
    return csv_path


__all__ = [
    "EXECUTORS",
    "check_cluster",
    "cluster_endpoint",
    "flatten",
    "load_sweep",
    "run_point",
    "run_sweep",
]
