"""A whole run through the CLI: outputs of INTERFACES.md, and byte-identical reruns."""

import csv
import io
import json
import sys
from pathlib import Path

import pytest

from simulator import cli
from simulator.cli import ProgressLog, main
from simulator.simulation import WALL_FIELDS

METRICS_KEYS = {
    "offered_tps",
    "throughput_tps",
    "duplicate_tx_rate",
    "blocks_per_s",
    "milestones_per_s",
    "stale_milestone_rate",
    "confirmation_latency_s",
    "propagation_s",
    "mempool_wait_s",
    "revenue_share",
    "events",
    "events_per_s",
    "wall_s",
}
SMALL = [
    "--nodes", "6", "--duration", "40",
    "--set", "load.tps=4", "--set", "miners.count=4", "--set", 'network.delay="uniform:0.01:0.1"',
]  # fmt: skip


def run(out: Path, *extra: str) -> dict[str, object]:
    assert main(["run", *SMALL, "--out", str(out), "--no-plots", *extra]) == 0
    return json.loads((out / "metrics.json").read_text())  # type: ignore[no-any-return]


def stable_bytes(out: Path) -> bytes:
    metrics = json.loads((out / "metrics.json").read_text())
    for key in WALL_FIELDS:
        metrics.pop(key)
    return json.dumps(metrics, sort_keys=True).encode()


def test_run_writes_every_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["run", *SMALL, "--out", str(out), "--seed", "3"]) == 0
    table = capsys.readouterr().out
    assert "throughput tps" in table
    metrics = json.loads((out / "metrics.json").read_text())
    # The summary shows metrics.json's counts, the steady state and the upload per node.
    shown = dict(line.split("  ", 1) for line in table.splitlines() if "  " in line)
    offered, confirmed = metrics["txs_offered"], metrics["txs_confirmed"]
    assert shown["txs offered / confirmed"].strip() == f"{offered:,} / {confirmed:,}"
    starved, lost = metrics["txs_starved"], metrics["txs_lost"]
    assert shown["txs starved / lost"].strip() == f"{starved:,} / {lost:,}"
    late = f"{metrics['offered_tps_second_half']:.3f} / {metrics['throughput_tps_second_half']:.3f}"
    assert shown["2nd half: offered / tps"].strip() == late
    upload = metrics["bytes_sent"] * 8 / 1000 / (40 * 6)
    assert shown["upload per node kbit/s"].strip() == f"{upload:,.1f}"
    assert set(metrics) >= METRICS_KEYS
    assert set(metrics["confirmation_latency_s"]) == {"p50", "p90", "p99"}
    assert set(metrics["mempool_wait_s"]) == {"p50", "p90"}
    assert sorted(metrics["revenue_share"]) == [f"miner_{i}" for i in range(4)]
    assert metrics["throughput_tps"] > 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert {"scenario", "seed", "code_version", "wall_s", "events", "events_per_s"} <= set(manifest)
    assert set(manifest["scenario"]) >= {"nodes", "duration_s", "seed", "protocol", "network"}
    assert set(manifest["scenario"]) >= {"chain", "miners", "load", "attack"}
    assert manifest["code_version"]
    assert manifest["seed"] == 3
    assert manifest["scenario"]["nodes"] == 6
    assert manifest["events"] == metrics["events"]
    # What the run cost, for the "What a run costs" rows: CPU s, the speed, peak RSS, the load.
    assert 0 < manifest["cpu_s"] < 600
    assert manifest["sim_s_per_cpu_s"] == pytest.approx(40 / manifest["cpu_s"], rel=1e-2)
    assert manifest["peak_rss_mib"] > 10
    assert set(manifest["load_average"]) == {"start", "end"}
    assert manifest["cpus"] >= 1
    assert shown["CPU s"].strip().startswith(f"{manifest['cpu_s']:,.1f} (")
    with (out / "blocks.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == metrics["blocks"]
    for name in ("propagation.png", "throughput.png", "confirmation.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    run(tmp_path / "a", "--seed", "11")
    run(tmp_path / "b", "--seed", "11")
    run(tmp_path / "c", "--seed", "12")
    assert stable_bytes(tmp_path / "a") == stable_bytes(tmp_path / "b")
    assert stable_bytes(tmp_path / "a") != stable_bytes(tmp_path / "c")
    assert (tmp_path / "a" / "blocks.csv").read_bytes() == (
        tmp_path / "b" / "blocks.csv"
    ).read_bytes()


def test_sweep_runs_each_point_and_seed_into_one_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "sweep.toml"
    spec.write_text(
        'seeds = [1, 2]\nset = ["nodes=3", "duration_s=10", "miners.count=2"]\n'
        '[grid]\n"chain.sortition_c" = ["1/10", "1/2"]\n'
    )
    assert main(["sweep", str(spec), "--executor", "local", "--out", str(tmp_path / "o")]) == 0
    progress = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("sweep: ")]
    assert [ln.split(" done")[0] for ln in progress] == [f"sweep: {i}/4" for i in range(1, 5)]
    assert "chain.sortition_c=1/2, seed=2" in progress[-1]
    with (tmp_path / "o" / "sweep.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["chain.sortition_c"], r["seed"]) for r in rows] == [
        ("1/10", "1"),
        ("1/10", "2"),
        ("1/2", "1"),
        ("1/2", "2"),
    ]
    assert "propagation_s.p90" in rows[0]
    assert not any(k.startswith("resource.") or k == "cpu_s" for k in rows[0])
    assert (tmp_path / "o" / "sweep.png").exists()
    with (tmp_path / "o" / "resources.csv").open() as fh:
        costs = list(csv.DictReader(fh))
    assert [(r["chain.sortition_c"], r["seed"]) for r in costs] == [
        (r["chain.sortition_c"], r["seed"]) for r in rows
    ]
    assert all(float(r["cpu_s"]) > 0 and float(r["peak_rss_mib"]) > 10 for r in costs)


def test_sweep_with_a_missing_executor_says_how_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ray (the test extra installs it: ``import ray`` made to fail) the sweep names
    the extra to install, exit 2."""
    pytest.importorskip("simulator.sweep")
    spec = tmp_path / "sweep.toml"
    spec.write_text('set = ["nodes=2", "duration_s=1"]\n[grid]\nseed = [1]\n')
    monkeypatch.setitem(sys.modules, "ray", None)  # a None entry: ``import ray`` raises ImportError
    assert main(["sweep", str(spec), "--executor", "ray", "--out", str(tmp_path / "o")]) == 2
    assert "dagchain[cluster]" in capsys.readouterr().err


def test_an_unwritable_out_dir_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the output directory should be\n")
    args = ["run", "--nodes", "2", "--duration", "1", "--no-plots", "--out", str(blocked / "o")]
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert "cannot write" in lines[0]


def test_a_run_logged_to_a_file_prints_a_progress_line_now_and_then(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """stderr not a terminal (a log file, ``nohup``): no bar, but a plain progress line every
    ``PROGRESS_LOG_S`` wall seconds; a run shorter than that prints none."""
    run(tmp_path / "quiet")
    assert "progress:" not in capsys.readouterr().err
    monkeypatch.setattr(cli, "PROGRESS_LOG_S", 0.0)
    run(tmp_path / "logged")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("progress:")]
    assert len(lines) >= 2  # the engine reports every 4,096 events
    assert "simulated " in lines[0]
    assert " of 40 s (" in lines[0]
    assert "events, peak RSS" in lines[0]
    assert "\r" not in "".join(lines)


def test_the_progress_log_spaces_its_lines_and_says_when_it_drains() -> None:
    """One line per ``every_s`` of wall time, however often it is called; past the duration it
    says the network is draining."""
    ticks = iter([0.0, 10.0, 59.0, 61.0, 62.0, 125.0, 130.0, 190.0])
    stream = io.StringIO()
    log = ProgressLog(40_000.0, stream, lambda: 1234, every_s=60.0, clock=lambda: next(ticks))
    for now_ms in (1_000.0, 2_000.0, 10_000.0, 20_000.0, 39_000.0, 40_500.0, 41_000.0):
        log(now_ms)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("progress: simulated 10.0 of 40 s (25.0 %), wall 61 s, 1,234 events")
    # what is left at the pace since the previous line: 30 s at 6.1 wall s per simulated s
    assert lines[0].endswith(", about 3 min left")
    assert "simulated 39.0 of 40 s" in lines[1]
    assert lines[1].endswith(", about 2 s left")  # 1 s at 64 wall s per 29 simulated s
    assert lines[2].startswith("progress: draining the network at simulated 41.0 s, wall 190 s")
    assert "left" not in lines[2]  # the drain's length is not known
