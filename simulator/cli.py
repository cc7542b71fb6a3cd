"""``dagchain-sim`` (also ``python -m simulator``): run one scenario or a sweep.

User errors (bad flags, unknown scenario keys, missing files) exit with status 2 and one line.
"""

import argparse
import contextlib
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TextIO

from simulator.scenario import Scenario, ScenarioError, load_scenario

ATTACK_KEYS = (
    "double_spend_success_rate",
    "double_spend_closed_form",
    "double_spend_nakamoto_2008",
    "attacker_revenue_share",
    "attacker_revenue_share_closed_form",
)


class ProgressBar:
    """A one-line bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, total_ms: float, stream: TextIO) -> None:
        self.total_ms = total_ms
        self.stream = stream
        self.started = time.perf_counter()
        self._last = -1

    def __call__(self, now_ms: float) -> None:
        frac = min(1.0, now_ms / self.total_ms) if self.total_ms else 1.0
        step = int(frac * 200)
        if step == self._last:
            return
        self._last = step
        width = 30
        filled = int(frac * width)
        wall = time.perf_counter() - self.started
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {frac * 100:5.1f}%  "
            f"sim {now_ms / 1000:8.1f} s  wall {wall:6.1f} s"
        )
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


PROGRESS_LOG_S = 60.0
"""Wall seconds between two progress lines when stderr is not a terminal (a log file)."""


class ProgressLog:
    """Progress for a log: when stderr is not a terminal, one plain line every ``every_s`` wall
    seconds (none in a shorter run), so that an hour-long run in ``nohup`` or a batch job says
    how far it got: simulated time, wall time, events, peak RSS and the wall time left at the
    pace since the previous line (the recent pace: a long run's cost per simulated second grows
    with its backlog)."""

    def __init__(
        self,
        total_ms: float,
        stream: TextIO,
        events: Callable[[], int],
        every_s: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
        label: str = "progress",
    ) -> None:
        """``label`` starts each line (a sweep names the run: its point and seed)."""
        self.label = label
        self.total_ms = total_ms
        self.stream = stream
        self.events = events
        self.every_s = PROGRESS_LOG_S if every_s is None else every_s
        self.clock = clock
        self.started = clock()
        self._next = self.every_s
        self._last = (0.0, 0.0)  # (wall s, simulated ms) of the previous line

    def __call__(self, now_ms: float) -> None:
        wall = self.clock() - self.started
        if wall < self._next:
            return
        self._next = wall + self.every_s
        if now_ms <= self.total_ms:
            where = f"simulated {now_ms / 1000:.1f} of {self.total_ms / 1000:g} s"
            where += f" ({100 * now_ms / self.total_ms if self.total_ms else 100:.1f} %)"
        else:
            where = f"draining the network at simulated {now_ms / 1000:.1f} s"
        rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        last_wall, last_ms = self._last
        self._last = (wall, now_ms)
        left = ""
        if last_ms < now_ms <= self.total_ms:
            left_s = (self.total_ms - now_ms) * (wall - last_wall) / (now_ms - last_ms)
            left = f", about {_duration(left_s)} left"
        self.stream.write(
            f"{self.label}: {where}, wall {wall:.0f} s, {self.events():,} events, "
            f"peak RSS {rss_mib:,.0f} MiB{left}\n"
        )
        self.stream.flush()


def _duration(seconds: float) -> str:
    """``42 s``, ``3 min``, ``2.5 h``: a wall time left, to the precision that matters."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _pair(metrics: dict[str, Any], first: str, second: str, form: str) -> str:
    """Two metrics as ``a / b``, each formatted with ``form``."""
    return f"{form.format(metrics[first])} / {form.format(metrics[second])}"


def run_resources(scenario: Scenario, load_at_start: float) -> dict[str, Any]:
    """What this process has cost so far, for the manifest: CPU s (user + system, the build
    included), simulated s per CPU s, peak RSS, the 1-minute load average at the start and now,
    and the CPUs the machine has (docs/simulator.md, "What a run costs")."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    return {
        "cpu_s": round(cpu, 2),
        "sim_s_per_cpu_s": round(scenario.duration_s / cpu, 3) if cpu > 0 else 0.0,
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
        "load_average": {"start": round(load_at_start, 2), "end": round(os.getloadavg()[0], 2)},
        "cpus": os.cpu_count() or 0,
    }


def summary_table(
    scenario: Scenario, metrics: dict[str, Any], resources: dict[str, Any] | None = None
) -> str:
    """The run's headline numbers as an aligned two-column table (``resources``: what the run
    cost, :func:`run_resources`)."""
    rows = [
        ("protocol", scenario.protocol),
        ("nodes / miners", f"{scenario.nodes} / {scenario.mining_nodes}"),
        ("simulated s", f"{scenario.duration_s:g}"),
        ("offered tps", f"{metrics['offered_tps']:.3f}"),
        ("throughput tps", f"{metrics['throughput_tps']:.3f}"),
        (
            "2nd half: offered / tps",
            _pair(metrics, "offered_tps_second_half", "throughput_tps_second_half", "{:.3f}"),
        ),
        ("txs offered / confirmed", _pair(metrics, "txs_offered", "txs_confirmed", "{:,}")),
        ("txs starved / lost", _pair(metrics, "txs_starved", "txs_lost", "{:,}")),
        ("duplicate tx rate", f"{metrics['duplicate_tx_rate']:.4f}"),
        ("blocks/s", f"{metrics['blocks_per_s']:.3f}"),
        ("milestones/s", f"{metrics['milestones_per_s']:.4f}"),
        ("stale milestone rate", f"{metrics['stale_milestone_rate']:.4f}"),
        ("level-set size (mean)", f"{metrics['level_set_size_mean']:.2f}"),
    ]
    rows += [
        (key, "  ".join(f"{k} {v:.3f}" for k, v in metrics[key].items()))
        for key in (
            "confirmation_latency_s",
            "confirmation_latency_s_second_half",
            "propagation_s",
            "mempool_wait_s",
        )
    ]
    rows += [(key, str(metrics[key])) for key in ATTACK_KEYS if key in metrics]
    node_seconds = scenario.duration_s * scenario.nodes
    upload = metrics["bytes_sent"] * 8 / 1000 / node_seconds if node_seconds else 0.0
    rows.append(("upload per node kbit/s", f"{upload:,.1f}"))
    rows.append(("events", f"{metrics['events']} ({metrics['events_per_s']:.0f}/s)"))
    rows.append(("wall s", f"{metrics['wall_s']:.2f}"))
    if resources is not None:
        load = resources["load_average"]
        rows.append(
            (
                "CPU s",
                f"{resources['cpu_s']:,.1f} ({resources['sim_s_per_cpu_s']:.3f} simulated s per "
                f"CPU s), peak RSS {resources['peak_rss_mib']:,.0f} MiB, load average "
                f"{load['start']:.2f} -> {load['end']:.2f} on {resources['cpus']} CPUs",
            )
        )
    width = max(len(k) for k, _ in rows)
    line = "-" * (width + 40)
    body = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    return f"{line}\n{body}\n{line}"


def _cmd_run(args: argparse.Namespace) -> int:
    from simulator.output import write_outputs
    from simulator.simulation import Simulation

    scenario = load_scenario(
        args.scenario,
        args.set or [],
        protocol=args.protocol,
        nodes=args.nodes,
        duration_s=args.duration,
        seed=args.seed,
    )
    out = _output_dir(Path(args.out))  # before the run: a long run never ends in a failed write
    load_at_start = os.getloadavg()[0]
    sim = Simulation(scenario)
    total_ms = scenario.duration_s * 1000.0
    bar = ProgressBar(total_ms, sys.stderr) if sys.stderr.isatty() else None
    log = None if bar is not None else ProgressLog(total_ms, sys.stderr, lambda: sim.engine.events)
    result = sim.run(progress=bar or log)
    if bar is not None:
        bar.close()
    resources = run_resources(scenario, load_at_start)
    try:
        write_outputs(out, scenario, result, resources)
    except OSError as exc:
        raise ScenarioError(f"cannot write the results to {out}: {exc.strerror or exc}") from None
    if not args.no_plots:
        try:
            from simulator.plots import plot_run

            plot_run(out)
        except ImportError:
            print("matplotlib is not installed: no plots written", file=sys.stderr)
    print(summary_table(scenario, result.metrics, resources))
    plots = "" if args.no_plots else ", *.png"
    print(f"results in {out}/ (manifest.json, metrics.json, blocks.csv{plots})")
    return 0


def _output_dir(out: Path) -> Path:
    """``--out``, created now.

    Raises:
        ScenarioError: it cannot be created (a file in the way, no permission).
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError(f"cannot write to --out {out}: {exc.strerror or exc}") from None
    return out


def _cmd_sweep(args: argparse.Namespace) -> int:
    from simulator.sweep import check_cluster, load_sweep, run_sweep

    sweep = Path(args.sweep)
    load_sweep(sweep)  # a bad sweep file fails before anything is created or contacted
    if args.address and args.executor == "local":
        print("dagchain-sim: note: --address is ignored with --executor local", file=sys.stderr)
        args.address = None
    if args.address:
        if args.workers is not None:
            print(
                f"dagchain-sim: note: --workers is ignored with --address: the {args.executor} "
                "cluster's own workers run the sweep",
                file=sys.stderr,
            )
        check_cluster(args.executor, args.address)
    out = Path(args.out)
    created = not out.exists()
    out = _output_dir(out)
    try:
        path = run_sweep(sweep, args.executor, args.workers or 1, out, args.address)
    except BaseException:
        if created:  # leave no empty --out behind a sweep that never wrote anything
            with contextlib.suppress(OSError):
                out.rmdir()
        raise
    print(f"sweep results in {path}")
    return 0


class _Parser(argparse.ArgumentParser):
    """Argument errors are one line on stderr and exit 2 (like dagchain-node)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dagchain-sim",
        description="Discrete-event network simulator on the real dagchain core.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="run one scenario")
    run.add_argument("scenario", nargs="?", type=Path, help="scenario TOML (defaults if omitted)")
    run.add_argument("--protocol", choices=("sdag", "nakamoto"))
    run.add_argument("--nodes", type=int)
    run.add_argument("--duration", type=float, metavar="SIM_SECONDS")
    run.add_argument("--seed", type=int)
    run.add_argument(
        "--set", action="append", metavar="TABLE.KEY=VALUE", help="override one scenario key"
    )
    run.add_argument("--out", default="sim-out", help="output directory (default: sim-out)")
    run.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    run.set_defaults(func=_cmd_run)
    sweep = sub.add_parser("sweep", help="run a parameter grid")
    sweep.add_argument("sweep", help="sweep TOML")
    sweep.add_argument("--executor", choices=("local", "dask", "ray"), default="local")
    sweep.add_argument("--address", help="dask scheduler or ray cluster address")
    sweep.add_argument(
        "--workers",
        type=int,
        help="local processes or local Dask/Ray workers (default 1); ignored with --address",
    )
    sweep.add_argument("--out", required=True)
    sweep.set_defaults(func=_cmd_sweep)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``dagchain-sim``."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ScenarioError as exc:
        print(f"dagchain-sim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dagchain-sim: interrupted", file=sys.stderr)
        return 130


__all__ = ["ProgressBar", "build_parser", "main", "summary_table"]
