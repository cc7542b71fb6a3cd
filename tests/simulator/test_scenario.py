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


@pytest.mark.parametrize(
    ("toml", "override", "want"),
    [
        ("sortition_c = 0.01\n", None, (1, 100)),
        ('sortition_c = "1/100"\n', None, (1, 100)),
        ("sortition_c = 0.3\n", None, (3, 10)),  # exact: Fraction(str(0.3)), not 0.299999...
        ("", "chain.sortition_c=0.05", (1, 20)),
        ("", "chain.sortition_c=1/3", (1, 3)),
        ("", 'chain.sortition_c="2/7"', (2, 7)),
        ("sortition_c = 1\n", None, (1, 1)),
    ],
)
def test_sortition_c_is_a_fraction_string_or_a_decimal_read_exactly(
    tmp_path: Path, toml: str, override: str | None, want: tuple[int, int]
) -> None:
    path = tmp_path / "s.toml"
    path.write_text("[chain]\n" + toml)
    params = load_scenario(path, [override] if override else []).to_params()
    assert (params.sortition_c_num, params.sortition_c_den) == want


def test_sortition_false_turns_assignment_off_from_a_file_or_an_override(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text("[chain]\nsortition = false\n")
    assert load_scenario(path).to_params().sortition_enabled is False
    assert load_scenario(None, ["chain.sortition=false"]).to_params().sortition_enabled is False
    assert load_scenario(None).to_params().sortition_enabled is True


def test_every_key_of_the_interfaces_table_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "all.toml"
    path.write_text(
        'nodes = 5\nduration_s = 7\nseed = 3\nprotocol = "sdag"\n'
        '[network]\ndelay = "regions2019"\nbandwidth_mbps = 25\ndegree = 3\n'
        "[chain]\nmilestone_interval_s = 5\nblock_rate = 2\nblock_capacity = 50\n"
        'max_block_bytes = 65536\nsortition_c = "1/4"\nsortition_k = 6\n'
        'sortition_weighting = "uniform"\nsortition = true\n'
        "[miners]\ncount = 3\nshares = [1, 2, 3]\n"
        "[load]\ntps = 2.5\ntx_bytes = 300\n"
        '[attack]\nkind = "selfish"\nshare = 0.25\ngamma = 0.5\nconfirmations = 3\ntrials = 50\n'
    )
    sc = load_scenario(path)
    params = sc.to_params()
    assert (sc.nodes, sc.duration_s, sc.seed, sc.protocol) == (5, 7, 3, "sdag")
    assert (sc.network.delay, sc.network.bandwidth_mbps, sc.network.degree) == (
        "regions2019",
        25,
        3,
    )
    assert params.blocks_per_ms == 10, "b = block_rate x milestone_interval_s"
    assert (params.block_capacity, params.max_block_bytes) == (50, 65536)
    assert (params.sortition_c_num, params.sortition_c_den, params.sortition_warmup) == (1, 4, 6)
    assert params.sortition_weighting == "uniform"
    assert sc.honest_shares() == pytest.approx([0.75 / 6, 1.5 / 6, 2.25 / 6])
    assert (sc.load.tps, sc.load.tx_bytes) == (2.5, 300)
    assert (sc.attack.kind, sc.attack.gamma, sc.attack.confirmations, sc.attack.trials) == (
        "selfish",
        0.5,
        3,
        50,
    )


@pytest.mark.parametrize(
    "bad", ["chain.sortition_c=0", "chain.sortition_c=3/2", "chain.sortition_c=x"]
)
def test_bad_sortition_c_exits_2_naming_the_key(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--set", bad, "--out", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert "chain.sortition_c" in lines[0]


@pytest.mark.parametrize(
    "args", [["run", "--nodes", "x"], ["run", "--protocol", "ghost"], ["sweep"], ["fly"]]
)
def test_bad_flags_exit_2_with_one_line(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(args)
    assert done.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
