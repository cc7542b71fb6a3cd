"""Every file under experiments/ still loads and runs: one tiny point of each (issue 8).

Scenario files go through ``dagchain-sim run`` with a few nodes and a few simulated seconds;
sweep files (those with a ``[grid]``) go through ``load_sweep`` and ``run_point`` for every grid
point with the same tiny overrides, so a renamed scenario key or a bad grid value fails here.
"""

import json
import tomllib
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.scenario import parse_override
from simulator.sweep import load_sweep, run_point

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
FILES = sorted(EXPERIMENTS.glob("*.toml"))
TINY = ["nodes=4", "duration_s=4", "miners.count=2", "attack.trials=200"]


def is_sweep(path: Path) -> bool:
    return "grid" in tomllib.loads(path.read_text(encoding="utf-8"))


SCENARIOS = [p for p in FILES if not is_sweep(p)]
SWEEPS = [p for p in FILES if is_sweep(p)]


def test_the_issue_8_files_exist() -> None:
    names = {p.name for p in FILES}
    for name in (
        "capacity.toml",
        "sweep_capacity.toml",
        "assignment.toml",
        "sweep_assignment.toml",
        "sweep_double_spend.toml",
        "sweep_selfish.toml",
    ):
        assert name in names


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_scenario_file_runs(path: Path, tmp_path: Path) -> None:
    args = ["run", str(path), "--no-plots", "--out", str(tmp_path)]
    for item in TINY:
        args += ["--set", item]
    assert main(args) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert "throughput_tps" in metrics  # nakamoto (tau = 10 s) may mine no block in 4 s


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_sweep_file_runs(path: Path) -> None:
    base, points, seeds = load_sweep(path)
    assert points
    assert seeds
    tiny = [parse_override(item) for item in TINY]
    for point in points:
        row = run_point(base, point + tiny, seeds[0])
        assert "throughput_tps" in row
        for key_path, value in point:
            assert row[".".join(key_path)] == value
