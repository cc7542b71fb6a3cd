"""Every file under experiments/ still loads and runs: one tiny point of each.

Scenario files go through ``dagchain-sim run`` with a few nodes and a few simulated seconds;
sweep files (those with a ``[grid]``) go through ``load_sweep`` and ``run_point`` for every grid
point with the same tiny overrides, so a renamed scenario key or a bad grid value fails here.
The analysis script ``experiments/fairness.py`` runs once on a tiny scenario, and the Dask and Ray
executors (each when installed) must give the local executor's rows for the same sweep file.
"""

import csv
import importlib.util
import io
import json
import math
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from simulator.cli import main
from simulator.scenario import parse_override
from simulator.simulation import WALL_FIELDS
from simulator.sweep import flatten, load_sweep, run_point, run_sweep

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
FILES = sorted(EXPERIMENTS.glob("*.toml"))
TINY = ["nodes=4", "duration_s=4", "miners.count=2", "attack.trials=200"]


def is_sweep(path: Path) -> bool:
    return "grid" in tomllib.loads(path.read_text(encoding="utf-8"))


def tiny_for(path: Path) -> list[str]:
    """TINY, but a file with explicit ``miners.shares`` keeps its miners (nodes >= miners), and
    one with late nodes keeps one, joining at 2 s."""
    data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    if "base" in data:
        data = tomllib.loads((path.parent / data["base"]).read_text(encoding="utf-8"))
    if data.get("network", {}).get("late_nodes"):  # one late node, joining mid-run
        return [*TINY, "nodes=5", "network.late_nodes=1", "network.late_join_s=2"]
    shares = data.get("miners", {}).get("shares", [])
    if not shares:
        return TINY
    return [f"nodes={max(4, len(shares))}", "duration_s=4", "attack.trials=200"]


SCENARIOS = [p for p in FILES if not is_sweep(p)]
SWEEPS = [p for p in FILES if is_sweep(p)]


def test_every_documented_experiment_file_is_shipped() -> None:
    names = {p.name for p in FILES}
    for name in (
        "capacity.toml",
        "sweep_capacity.toml",
        "assignment.toml",
        "sweep_assignment.toml",
        "sweep_double_spend.toml",
        "sweep_selfish.toml",
        "bandwidth.toml",
        "sweep_bandwidth.toml",
        "sweep_saturation_k.toml",
        "sweep_saturation_nakamoto.toml",
        "stale.toml",
        "sweep_stale.toml",
        "sweep_assignment_n.toml",
        "sweep_assignment_n1000.toml",
        "fairness.toml",
        "double_spend_network.toml",
        "sweep_double_spend_network.toml",
        "selfish_network.toml",
        "sweep_selfish_network.toml",
    ):
        assert name in names


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_scenario_file_runs(path: Path, tmp_path: Path) -> None:
    args = ["run", str(path), "--no-plots", "--out", str(tmp_path)]
    for item in tiny_for(path):
        args += ["--set", item]
    assert main(args) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert "throughput_tps" in metrics  # nakamoto (tau = 10 s) may mine no block in 4 s


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_sweep_file_runs(path: Path) -> None:
    base, points, seeds = load_sweep(path)
    assert points
    assert seeds
    tiny = [parse_override(item) for item in tiny_for(path)]
    for point in points:
        row = run_point(base, tiny + point, seeds[0])  # the grid wins
        assert "throughput_tps" in row
        for key_path, value in point:
            assert row[".".join(key_path)] == value


def _load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fairness_script_runs_and_its_shares_add_up(tmp_path: Path) -> None:
    fairness = _load_script("fairness")
    args = ["--set", "duration_s=20", "--set", "load.tps=5", "--window", "5", "--skip", "5"]
    assert fairness.main([str(EXPERIMENTS / "fairness.toml"), *args, "--out", str(tmp_path)]) == 0
    with (tmp_path / "fairness.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    configs = {r["config"] for r in rows}
    assert configs == {"sdag share", "sdag uniform", "nakamoto"}
    for config in configs:
        mine = [r for r in rows if r["config"] == config]
        assert len(mine) == 11  # one row per miner of fairness.toml
        for key in ("hash_share", "block_share", "revenue_share", "intake_closed_form"):
            assert sum(float(r[key]) for r in mine) == pytest.approx(1.0, abs=1e-4)
        pool = max(mine, key=lambda r: float(r["hash_share"]))
        assert float(pool["hash_share"]) == pytest.approx(0.5)
        # The square law: a 50 % pool beside ten 5 % miners is eligible for 0.25 / 0.275 of the
        # intake with share weighting, for its hash share otherwise.
        expected = 0.25 / 0.275 if config == "sdag share" else 0.5
        assert float(pool["intake_closed_form"]) == pytest.approx(expected, abs=1e-5)
    sdag = [r for r in rows if r["config"] == "sdag share"]
    assert sum(int(r["txs_packed"]) for r in sdag) > 0  # the load reached the chain


def _four_tiny_runs(tmp_path: Path) -> Path:
    """A sweep file of 2 points x 2 seeds of 5-node, 5 s runs of ``stale.toml``."""
    sweep = tmp_path / "sweep.toml"
    base = (EXPERIMENTS / "stale.toml").as_posix()
    sweep.write_text(
        f'base = "{base}"\nseeds = [1, 2]\nset = ["nodes=5", "duration_s=5", "miners.count=3"]\n'
        '[grid]\n"chain.block_rate" = [8, 16]\n',
        encoding="utf-8",
    )
    return sweep


@pytest.mark.parametrize(
    ("executor", "module", "workers"), [("dask", "dask.distributed", 1), ("ray", "ray", 2)]
)
def test_cluster_executor_gives_the_local_rows(
    tmp_path: Path, executor: str, module: str, workers: int
) -> None:
    """The same sweep file on Dask or Ray writes the local sweep.csv byte for byte."""
    pytest.importorskip(module)
    sweep = _four_tiny_runs(tmp_path)
    local = run_sweep(sweep, "local", 1, tmp_path / "local")
    remote = run_sweep(sweep, executor, workers, tmp_path / executor)
    local_text = local.read_text(encoding="utf-8")
    assert local_text.count("\n") == 5  # header + 2 points x 2 seeds
    assert remote.read_text(encoding="utf-8") == local_text  # same rows, in grid order


def test_the_local_dask_cluster_does_not_kill_a_large_run() -> None:
    """Dask's default worker memory limit (machine memory / workers, restart at 95 %) killed
    10-15 GiB capacity runs on a two-worker local cluster; ours has none, one thread each."""
    pytest.importorskip("dask.distributed")
    from dask.distributed import Client

    from simulator.sweep import local_dask_cluster

    with local_dask_cluster(2) as cluster, Client(cluster) as client:
        workers = client.scheduler_info()["workers"].values()
        assert len(workers) == 2
        for info in workers:
            assert not info["memory_limit"]
            assert info["nthreads"] == 1


def test_equal_security_depth_is_the_smallest_safe_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    eq = _load_script("equal_security")
    from simulator.adversary import double_spend_probability

    assert eq.effective_share(0.1, 0.0) == pytest.approx(0.1)
    assert eq.effective_share(0.1, 0.2) == pytest.approx(0.1 / (0.1 + 0.9 * 0.8))
    for q in (0.1, 0.25):
        z = eq.depth_for(q, 1e-3)
        assert double_spend_probability(q, z) <= 1e-3 < double_spend_probability(q, z - 1)
        assert eq.depth_for(eq.effective_share(q, 0.2), 1e-3) > z  # stale milestones cost depth
    assert eq.depth_for(0.5, 1e-3) is None
    sweep = tmp_path / "sweep.csv"
    sweep.write_text(
        "protocol,stale_milestone_rate,milestones_per_s,"
        "confirmation_latency_s.p50,confirmation_latency_s.p90\n"
        "sdag,0.0,0.5,1.5,4.0\nnakamoto,0.2,0.4,2.0,8.0\n",
        encoding="utf-8",
    )
    assert eq.main([str(sweep), "--q", "0.1", "--eps", "0.001"]) == 0
    lines = capsys.readouterr().out.splitlines()
    z = eq.depth_for(0.1, 1e-3)
    assert lines[2].split(" | ")[-3] == str(z)  # sdag row: depth z at q' = q
    assert lines[2].split(" | ")[-2] == f"{1.5 + (z - 1) * 2.0:.1f}"


def test_second_half_throughput_counts_the_late_confirmations() -> None:
    from simulator.scenario import load_scenario
    from simulator.simulation import Simulation

    scenario = load_scenario(
        EXPERIMENTS / "bandwidth.toml",
        ["nodes=6", "duration_s=40", "miners.count=3", "load.tps=20", 'protocol="nakamoto"'],
    )
    sim = Simulation(scenario)
    metrics = sim.run().metrics
    confirmed = sim.recorder.tx_confirmed_ms
    offered = sim.recorder.tx_offered_ms
    late = [t for t in offered if confirmed.get(t, -1.0) >= 20_000.0]
    assert metrics["throughput_tps_second_half"] == pytest.approx(len(late) / 20.0, abs=1e-6)
    waits = sorted((confirmed[t] - offered[t]) / 1000.0 for t in late)
    for q in (0.5, 0.9, 0.99):  # nearest rank over the late confirmations only
        rank = max(1, math.ceil(q * len(waits)))
        assert metrics["confirmation_latency_s_second_half"][f"p{round(q * 100)}"] == (
            pytest.approx(waits[rank - 1], abs=1e-6)
        )
    assert metrics["confirmation_latency_s_second_half"] != metrics["confirmation_latency_s"]
    late_offers = sum(1 for at in offered.values() if at >= 20_000.0)
    assert metrics["offered_tps_second_half"] == pytest.approx(late_offers / 20.0, abs=1e-6)
    # Nakamoto's warm-up (S1: a peer chain's first K blocks carry no valid tx) starves the first
    # half, so the steady state confirms more per second than the whole-run average.
    assert metrics["throughput_tps_second_half"] > metrics["throughput_tps"] > 0


def test_tables_script_reads_the_sweep_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = _load_script("tables")
    stale = tmp_path / "stale.csv"
    stale.write_text(
        "chain.milestone_interval_s,chain.block_rate,seed,milestones_mined,stale_milestone_rate,"
        "bytes_sent,propagation_s.p50,propagation_s.p90\n"
        "2,8,1,100,0.1,4800000,0.1,0.2\n2,8,2,300,0.0,4800000,0.1,0.2\n",
        encoding="utf-8",
    )
    assert tables.main(["stale", str(stale), "--nodes", "20", "--duration", "240"]) == 0
    row = capsys.readouterr().out.splitlines()[2].split(" | ")
    assert row[5] == "0.025"  # 10 stale of 400 mined, pooled over the seeds
    assert float(row[7]) == pytest.approx(-2 * math.log(1 - 0.025), abs=1e-3)  # implied delta
    assert row[9].rstrip(" |") == "8"  # 4.8 MB x 8 / (20 nodes x 240 s) = 8 kbit/s
    sweep = tmp_path / "assign.csv"
    sweep.write_text(
        "miners.count,chain.sortition_c,offered_tps,throughput_tps,duplicate_tx_rate,"
        "mempool_wait_s.p50,mempool_wait_s.p90\n10,1/10,20,19,0.1,1.0,3.0\n",
        encoding="utf-8",
    )
    assert tables.main(["assignment", str(sweep), "--delay-s", "0.2"]) == 0
    row = capsys.readouterr().out.splitlines()[2].split(" | ")
    assert row[6] == f"{0.1 * 8 * 0.2:.4f}"  # uniform C1: c lambda delta
    assert row[10] == f"{1 / (8 * 0.1):.2f}"  # uniform C2: 1 / (lambda c)


def test_tables_spread_groups_the_seeds_of_each_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = _load_script("tables")
    sweep = tmp_path / "seeds.csv"
    sweep.write_text(
        "chain.sortition_c,seed,duplicate_tx_rate,mempool_wait_s.p50\n"
        "1/10,1,0.10,1.0\n1/10,2,0.14,2.0\n1/100,1,0.01,9.0\n",
        encoding="utf-8",
    )
    metrics = ["duplicate_tx_rate", "mempool_wait_s.p50", "waste_x_wait"]
    assert (
        tables.main(["spread", str(sweep), "--by", "chain.sortition_c", "--metrics", *metrics]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4  # header, rule, one line per point
    point = lines[2].split(" | ")
    assert point[:2] == ["| 1/10", "1, 2"]
    assert point[2] == "0.1200 [0.1000, 0.1400]"
    assert point[3] == "1.50 [1.00, 2.00]"
    products = [0.10 * 1.0 / math.log(2), 0.14 * 2.0 / math.log(2)]
    assert point[4].rstrip(" |") == (
        f"{sum(products) / 2:.4f} [{min(products):.4f}, {max(products):.4f}]"
    )
    assert lines[3].split(" | ")[1] == "1"


def test_ordering_lag_counts_every_ordered_block() -> None:
    lag = _load_script("ordering_lag")
    result = lag.measure(
        EXPERIMENTS / "assignment.toml",
        ["nodes=6", "miners.count=4", "duration_s=20", "load.tps=5", "chain.sortition_k=2"],
    )
    lags = result["lags"]
    assert sum(lags.values()) > 0
    assert min(lags) >= 1  # a block is ordered after its milestone link
    assert result["sortition_freshness"] == 3
    verdicts = result["verdicts"]
    assert set(verdicts) <= {"valid", "sortition", "double-spend", "warmup", "missing-input"}
    assert verdicts.get("valid", 0) == result["txs_confirmed"] > 0


def test_ordering_lag_json_holds_the_sweep_metrics_of_the_same_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Section 2c takes duplicates and waits of its N = 1,000 runs from ``--json``, not a sweep."""
    lag = _load_script("ordering_lag")
    overrides = ["nodes=6", "miners.count=4", "duration_s=12", "load.tps=5", "chain.sortition_k=2"]
    out = tmp_path / "lag.json"
    sets = [a for o in overrides for a in ("--set", o)]
    assert lag.main([str(EXPERIMENTS / "assignment.toml"), *sets, "--json", str(out)]) == 0
    dumped = json.loads(out.read_text(encoding="utf-8"))
    assert sum(dumped["lags"].values()) > 0
    assert "blocks ordered" in capsys.readouterr().out
    base = tomllib.loads((EXPERIMENTS / "assignment.toml").read_text(encoding="utf-8"))
    row = run_point(base, [parse_override(o) for o in overrides], 1)
    metrics = {k: v for k, v in flatten(dumped["metrics"]).items() if k not in WALL_FIELDS}
    assert {"duplicate_tx_rate", "mempool_wait_s.p50", "txs_confirmed"} <= set(metrics)
    assert metrics == {k: v for k, v in row.items() if k in metrics}


def test_tables_bandwidth_utilisation_and_steady_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = _load_script("tables")
    sweep = tmp_path / "bw.csv"
    sweep.write_text(
        "network.bandwidth_mbps,chain.sortition_k,offered_tps_second_half,"
        "throughput_tps_second_half,throughput_tps,confirmation_latency_s.p50,"
        "confirmation_latency_s.p90,stale_milestone_rate,propagation_s.p90,duplicate_tx_rate,"
        "bytes_sent\n5,10,200,100,90,1,2,0.05,0.2,0.01,75000000\n",
        encoding="utf-8",
    )
    assert tables.main(["bandwidth", str(sweep), "--extra", "chain.sortition_k"]) == 0
    row = capsys.readouterr().out.splitlines()[2].split(" | ")
    assert row[0] == "| 10"
    assert row[6] == "0.50"  # confirmed / offered in the second half
    assert row[-1] == "0.050 |"  # 75 MB x 8 / (20 nodes x 120 s x 5 Mbit/s)


def test_tables_capacity_reads_the_runs_and_their_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = _load_script("tables")
    sweep = tmp_path / "sweep.csv"
    sweep.write_text(
        "load.tps,protocol,seed,offered_tps,throughput_tps,offered_tps_second_half,"
        "throughput_tps_second_half,confirmation_latency_s.p50,confirmation_latency_s.p90,"
        "confirmation_latency_s_second_half.p50,confirmation_latency_s_second_half.p90,"
        "stale_milestone_rate,duplicate_tx_rate,propagation_s.p90,bytes_sent,txs_starved\n"
        "1024,sdag,1,900,700,1000,800,3,6,4.5,9.25,0.1,0.05,0.5,6000000000,1234\n"
        "1024,nakamoto,1,900,700,1000,800,3,6,,,0.1,0.05,0.5,6000000000,\n",
        encoding="utf-8",
    )
    (tmp_path / "resources.csv").write_text(
        "load.tps,protocol,seed,cpu_s,wall_s,peak_rss_mib,host\n1024,sdag,1,2500.4,2600,3072,h\n",
        encoding="utf-8",
    )
    assert tables.main(["capacity", str(sweep), "--nodes", "10000", "--duration", "60"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = lines[2].split(" | ")
    assert row[5] == "0.80"  # confirmed / offered in the second half
    assert row[8] == "4.50 / 9.25"  # the latency of the txs confirmed in the second half
    assert lines[3].split(" | ")[8] == "-"  # a sweep from before that metric
    assert row[-4] == "10.0"  # 6 GB / (10,000 nodes x 60 s) = 10 kB/s
    assert row[-3] == "1,234"  # arrivals skipped: the wallet had no confirmed output
    assert row[-2:] == ["2,500", "3.0 |"]


def test_tables_capacity_reads_run_folders_beside_a_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A single ``dagchain-sim run --out`` folder is a row of its own, with its manifest's cost,
    beside the rows of a sweep CSV."""
    tables = _load_script("tables")
    out = tmp_path / "c120"
    args = ["run", str(EXPERIMENTS / "small.toml"), "--duration", "10", "--no-plots"]
    assert main([*args, "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    sweep = tmp_path / "sweep.csv"
    sweep.write_text(
        "load.tps,protocol,seed,offered_tps,throughput_tps,offered_tps_second_half,"
        "throughput_tps_second_half,confirmation_latency_s.p50,confirmation_latency_s.p90,"
        "stale_milestone_rate,duplicate_tx_rate,propagation_s.p90,bytes_sent\n"
        "1024,nakamoto,1,900,700,1000,800,3,6,0.1,0.05,0.5,6000000000\n",
        encoding="utf-8",
    )
    capsys.readouterr()
    with pytest.raises(SystemExit, match="needs --duration"):  # the sweep's rows have none
        tables.main(["capacity", str(sweep), str(out), "--nodes", "10000"])
    assert (
        tables.main(["capacity", str(sweep), str(out), "--nodes", "10000", "--duration", "60"]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| nakamoto | 900 |")
    assert lines[2].split(" | ")[-4] == "10.0"  # 6 GB / (10,000 nodes x 60 s); the run: its own
    row = lines[3].split(" | ")
    assert row[0] == f"| {manifest['scenario']['protocol']} (c120)"
    nodes, seconds = manifest["scenario"]["nodes"], manifest["scenario"]["duration_s"]
    assert row[-4] == f"{metrics['bytes_sent'] / (nodes * seconds) / 1000:,.1f}"  # its own nodes
    assert row[-2:] == [f"{manifest['cpu_s']:,.0f}", f"{manifest['peak_rss_mib'] / 1024:.1f} |"]
    with pytest.raises(SystemExit, match="not a dagchain-sim run's output folder"):
        tables.main(["capacity", str(tmp_path)])  # a folder that holds no run


def test_ordering_lag_oldest_tip_variant_is_swapped_back() -> None:
    from dagchain import template

    lag = _load_script("ordering_lag")
    original = template.choose_tip_links
    result = lag.measure(
        EXPERIMENTS / "assignment.toml",
        ["nodes=6", "miners.count=4", "duration_s=10", "chain.sortition_k=2"],
        oldest_tip=True,
    )
    assert sum(result["lags"].values()) > 0
    assert template.choose_tip_links is original


def test_a_sweep_run_reports_its_progress_by_point_and_seed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An hour-long run of a sweep says how far it got, named by its point and seed, on the
    worker's stderr; the row is the same as without the lines (one per PROGRESS_EVERY_S)."""
    from simulator import sweep

    base = tomllib.loads((EXPERIMENTS / "stale.toml").read_text(encoding="utf-8"))
    overrides = [parse_override(o) for o in ("nodes=8", "duration_s=20", "miners.count=3")]
    quiet = run_point(base, overrides, 2)
    assert capsys.readouterr().err == ""  # shorter than a minute: no line
    monkeypatch.setattr(sweep, "PROGRESS_EVERY_S", 0.0)
    row = run_point(base, overrides, 2)
    lines = capsys.readouterr().err.splitlines()
    assert lines
    assert all(
        line.startswith("run nodes=8 duration_s=20 miners.count=3 seed 2: ") for line in lines
    )
    assert any("simulated" in line and "events, peak RSS" in line for line in lines)
    assert {k: v for k, v in row.items() if not k.startswith(sweep.RESOURCE_PREFIX)} == {
        k: v for k, v in quiet.items() if not k.startswith(sweep.RESOURCE_PREFIX)
    }


def test_relay_backlog_tells_a_relay_that_keeps_up_from_one_that_does_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """experiments/relay_backlog.py: one line per simulated second; at ample bandwidth the txs
    in flight stay level, on 0.2 Mbit/s links they pile up second after second."""
    backlog = _load_script("relay_backlog")
    shape = [
        "--nodes",
        "40",
        "--duration",
        "4",
        "--set",
        "network.full_nodes=5",
        "--set",
        "miners.count=5",
        "--set",
        "load.tps=150",
        "--set",
        "load.prefunded_outputs=1000",
    ]

    def in_flight(mbps: float) -> list[int]:
        scenario = str(EXPERIMENTS / "capacity_10k.toml")
        assert backlog.main([scenario, *shape, "--set", f"network.bandwidth_mbps={mbps}"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [line.split(":")[0] for line in lines] == ["t=1 s", "t=2 s", "t=3 s", "t=4 s"]
        assert all("uplink queue p50/p90 s: " in line for line in lines)
        return [int(line.split(": ")[1].split(" txs")[0].replace(",", "")) for line in lines]

    ample = in_flight(100)
    assert max(ample[1:]) < 2 * min(ample[1:])
    starved = in_flight(0.2)
    assert starved == sorted(starved)
    assert starved[-1] > 3 * max(ample)


def test_a_sweep_keeps_each_finished_run_and_a_rerun_goes_on_from_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep of hour-long runs stopped before its end (Ctrl-C, a crash, a session that ends)
    keeps the runs it finished in ``OUT/runs/``; the same sweep into the same ``--out`` runs only
    the others and writes the ``sweep.csv`` an uninterrupted sweep writes, byte for byte. A
    changed sweep file reuses none of them."""
    from simulator import sweep

    spec = _four_tiny_runs(tmp_path)
    whole = run_sweep(spec, "local", 1, tmp_path / "whole").read_bytes()
    real = sweep.run_point
    calls: list[int] = []

    def stopped_at_the_third(*job: Any) -> dict[str, Any]:
        calls.append(job[2])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*job)

    monkeypatch.setattr(sweep, "run_point", stopped_at_the_third)
    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, "local", 1, cut)
    assert len(list((cut / "runs").glob("*.json"))) == 2
    assert not (cut / "sweep.csv").exists()
    capsys.readouterr()

    calls.clear()

    def counted(*job: Any) -> dict[str, Any]:
        calls.append(job[2])
        return real(*job)

    monkeypatch.setattr(sweep, "run_point", counted)
    assert run_sweep(spec, "local", 1, cut).read_bytes() == whole
    assert len(calls) == 2  # only the two runs not finished before
    assert "2 of 4 runs already done" in capsys.readouterr().err
    resources = list(csv.DictReader(io.StringIO((cut / "resources.csv").read_text("utf-8"))))
    assert len(resources) == 4
    assert all(float(r["cpu_s"]) > 0 for r in resources)  # the reused runs keep their cost

    calls.clear()
    spec.write_text(spec.read_text(encoding="utf-8").replace("duration_s=5", "duration_s=6"))
    run_sweep(spec, "local", 1, cut)
    assert len(calls) == 4  # another sweep: nothing of the first is reused
