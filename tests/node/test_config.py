"""NodeConfig from TOML and flags, and dagchain-node's user errors (exit 2, one line)."""

import subprocess
import sys
from pathlib import Path

import pytest

from node.cli import build_parser, lock_datadir, main, write_token
from node.config import ConfigError, load_config

NODE = [sys.executable, "-m", "node.cli"]


def test_defaults_resolve_from_the_network(tmp_path: Path) -> None:
    config = load_config({"network": "devnet", "datadir": tmp_path})
    assert config.resolved_api_port == 27708
    assert config.resolved_p2p_port == 27707
    assert config.api_host == "127.0.0.1"
    assert config.data_path == tmp_path
    assert config.resolved().api_port == 27708


def test_default_datadir_is_per_network() -> None:
    config = load_config({"network": "testnet"})
    assert config.data_path == Path.home() / ".dagchain" / "testnet"


def test_file_values_apply_and_flags_override(tmp_path: Path) -> None:
    (tmp_path / "dagchain.toml").write_text(
        'network = "devnet"\napi-port = 1234\np2p_port = 1235\npeers = ["a:1", "[::1]:2"]\n'
        'log_format = "json"\n'
    )
    config = load_config({"datadir": tmp_path, "api_port": 999, "network": None})
    assert config.network == "devnet"
    assert config.api_port == 999
    assert config.p2p_port == 1235
    assert config.peer_addresses == [("a", 1), ("::1", 2)]
    assert config.log_format == "json"


def test_explicit_config_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config({}, tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bogus = 1\n", "unknown config key 'bogus'"),
        ("api_port = 70000\n", "bad value for api_port"),
        ('peers = ["nohostport"]\n', "is not HOST:PORT"),
        ('network = "moon"\n', "bad value for network"),
        ("api_port = \n", "not valid TOML"),
    ],
)
def test_bad_config_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        load_config({}, path)
    assert "\n" not in str(err.value)


def test_token_file_is_private_and_random(tmp_path: Path) -> None:
    first = write_token(tmp_path)
    mode = (tmp_path / "api.token").stat().st_mode & 0o777
    assert mode == 0o600
    assert len(first) == 64
    assert write_token(tmp_path) != first


def test_datadir_lock_is_exclusive(tmp_path: Path) -> None:
    held = lock_datadir(tmp_path)
    try:
        with pytest.raises(ConfigError, match="in use by another dagchain-node"):
            lock_datadir(tmp_path)
    finally:
        held.close()
    lock_datadir(tmp_path).close()


def test_missing_command_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "a command is required" in err
    assert err.count("\n") == 1, err


def test_bad_config_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "dagchain.toml").write_text("nope = true\n")
    assert main(["start", "--network", "devnet", "--datadir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unknown config key 'nope'" in err


@pytest.mark.parametrize(
    "args",
    [
        ["start", "--network", "moon"],
        ["start", "--api-port", "x"],
        ["start", "--bogus"],
        ["frobnicate"],
    ],
)
def test_bad_flags_exit_2_with_one_line_and_no_traceback(args: list[str]) -> None:
    proc = subprocess.run([*NODE, *args], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_version_prints_and_exits_0() -> None:
    proc = subprocess.run(
        [*NODE, "--version"], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0
    assert proc.stdout.startswith("dagchain ")


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ('peer = "10.0.0.1:7707"\n', ("10.0.0.1:7707",)),
        ('peer = ["a:1", "b:2"]\n', ("a:1", "b:2")),
        ('peers = "a:1"\n', ("a:1",)),
    ],
)
def test_config_file_peer_key_takes_one_string_or_a_list(
    tmp_path: Path, text: str, want: tuple[str, ...]
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    assert load_config({}, path).peers == want


def test_every_long_option_is_a_config_key(tmp_path: Path) -> None:
    # INTERFACES.md: the file takes "the same keys as the long options", flag spelling included.
    path = tmp_path / "c.toml"
    path.write_text(
        'network = "devnet"\ndatadir = "~/dd"\np2p-host = "127.0.0.1"\np2p-port = 1\n'
        'api-host = "127.0.0.2"\napi-port = 2\npeer = ["h:3"]\nno-discovery = true\n'
        'log-level = "debug"\nlog-format = "json"\nmax-inbound = 4\nmax-outbound = 5\n'
        "api-body-limit = 4096\nin-memory = true\nno-p2p = true\n"
    )
    config = load_config({}, path)
    assert config.data_path == Path.home() / "dd", "~ is expanded in the file too"
    assert (config.p2p_host, config.p2p_port, config.api_host, config.api_port) == (
        "127.0.0.1",
        1,
        "127.0.0.2",
        2,
    )
    assert config.no_discovery
    assert config.in_memory
    assert config.p2p is False
    assert (config.log_level, config.log_format) == ("debug", "json")
    assert (config.max_inbound, config.max_outbound, config.api_body_limit) == (4, 5, 4096)


def test_the_command_line_overrides_no_p2p_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("no-p2p = false\n")
    assert load_config({}, path).p2p is True
    assert load_config({"p2p": False}, path).p2p is False


def test_choices_are_case_insensitive_on_the_command_line_as_in_the_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = build_parser().parse_args(
        ["start", "--network", "DevNet", "--log-level", "DEBUG", "--log-format", "JSON"]
    )
    assert (args.network, args.log_level, args.log_format) == ("devnet", "debug", "json")


def test_start_help_names_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["start", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for words in (
        "default: mainnet",
        "default: ~/.dagchain/<network>",
        "default: <datadir>/dagchain.toml",
        "default: 0.0.0.0",
        "default: 127.0.0.1",
        "27707",
        "27708",
        "repeatable",
        "default: info",
        "default: text",
    ):
        assert words in text, words


@pytest.mark.parametrize("blocker", ["api.token", "chain"])
def test_an_unusable_token_or_chain_path_exits_2_with_one_line(
    tmp_path: Path, blocker: str
) -> None:
    # api.token a directory (cannot be written), chain a file (cannot hold the database)
    if blocker == "api.token":
        (tmp_path / blocker).mkdir()
    else:
        (tmp_path / blocker).write_text("not a database\n")
    args = ["start", "--network", "devnet", "--datadir", str(tmp_path), "--no-p2p"]
    args += ["--api-port", "0", "--log-level", "error"]
    proc = subprocess.run([*NODE, *args], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert blocker in proc.stderr
    assert "Traceback" not in proc.stderr


def test_prune_depth_is_a_flag_and_a_config_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('network = "devnet"\nprune-depth = 50\n')
    assert load_config({}, path).prune_depth == 50
    assert load_config({"prune_depth": 20}, path).prune_depth == 20, "the flag wins"
    assert load_config({"network": "devnet"}).prune_depth is None, "off by default"
    args = build_parser().parse_args(["start", "--prune-depth", "30"])
    assert args.prune_depth == 30


@pytest.mark.parametrize(
    ("network", "depth", "bound"), [("devnet", "19", 20), ("mainnet", "20", 100)]
)
def test_a_prune_depth_below_punctuality_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], network: str, depth: str, bound: int
) -> None:
    argv = ["start", "--network", network, "--datadir", str(tmp_path), "--prune-depth", depth]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"bad value for prune_depth: prune depth {depth} is below" in err
    assert f"use at least {bound}" in err
