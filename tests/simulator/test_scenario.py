"""Scenario files and overrides: the keys of INTERFACES.md, clear errors for anything else."""

from pathlib import Path

import pytest

from simulator.cli import main
from simulator.scenario import ScenarioError, load_scenario


def test_unknown_keys_fail_with_their_names(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("nodes = 3\ncolour = 'red'\n[network]\ndelay = 'fixed:0'\ndegre = 2\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert "unknown scenario key 'colour'" in str(err.value)
    assert "unknown scenario key 'network.degre'" in str(err.value)


def test_unknown_override_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--set", "chain.blocks=4", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == ["dagchain-sim: error: unknown scenario key 'chain.blocks'"]


def test_overrides_and_flags_apply_in_order(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("nodes = 3\nseed = 4\n[load]\ntps = 1.5\n")
    sc = load_scenario(
        path, ["load.tps=3", 'network.delay="uniform:0.01:0.2"', "chain.sortition_c=1/50"], seed=9
    )
    assert (sc.nodes, sc.seed, sc.load.tps) == (3, 9, 3.0)
    assert sc.network.delay == "uniform:0.01:0.2"
    params = sc.to_params()
    assert (params.sortition_c_num, params.sortition_c_den) == (1, 50)


def test_bad_values_are_named() -> None:
    with pytest.raises(ScenarioError, match=r"network\.delay"):
        load_scenario(None, ['network.delay="lognormal"'])
    with pytest.raises(ScenarioError, match="not a positive integer"):
        load_scenario(None, ["chain.block_rate=3", "chain.milestone_interval_s=0.5"])


def test_nakamoto_is_a_params_choice() -> None:
    sdag = load_scenario(None).to_params()
    nak = load_scenario(None, protocol="nakamoto").to_params()
    assert (sdag.blocks_per_ms, nak.blocks_per_ms) == (80, 1)
    assert nak.block_capacity == 80 * sdag.block_capacity
    assert nak.max_block_bytes == 80 * sdag.max_block_bytes
    assert not nak.sortition_enabled
