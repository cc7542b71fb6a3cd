"""``dagchain-miner`` user errors: one line on stderr, exit 2, no traceback (INTERFACES.md)."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from apiclient.models import BestMilestone, MempoolSummary, StatusResponse, Targets
from dagchain.crypto import address_from_pubkey, encode_address, xonly_pubkey
from miner.cli import main
from tests.functional.framework import free_port

MINER = [sys.executable, "-m", "miner.cli"]
PAYOUT = encode_address("ddag", address_from_pubkey(xonly_pubkey((7).to_bytes(32, "big"))))
STATUS = StatusResponse(
    network="devnet",
    version="0",
    node_id="00" * 32,
    best_milestone=BestMilestone(hash="00" * 32, height=0, chainwork="1", timestamp_ms=0),
    blocks=1,
    pending_blocks=0,
    mempool=MempoolSummary(size=0, bytes=0),
    peers=0,
    synced=True,
    targets=Targets(block=0x2100FFFF, milestone=0x2100FFFF),
    p2p=False,
)


def _fake_node() -> web.Application:
    """A devnet status endpoint, and a template endpoint that refuses every token."""

    async def status(request: web.Request) -> web.Response:
        return web.json_response(json.loads(STATUS.model_dump_json()))

    async def template(request: web.Request) -> web.Response:
        error = {"code": "unauthorized", "message": "bad bearer token"}
        return web.json_response({"error": error}, status=401)

    app = web.Application()
    app.router.add_get("/v1/status", status)
    app.router.add_get("/v1/mining/template", template)
    return app


async def _run_miner(*args: str) -> subprocess.CompletedProcess[str]:
    proc = await asyncio.create_subprocess_exec(
        *MINER, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


def _one_line_error(result: subprocess.CompletedProcess[str], words: str) -> None:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert words in lines[0], lines[0]


async def test_unreachable_node_is_one_line_exit_2(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = await _run_miner("--node", url, "--address", PAYOUT, "--datadir", str(tmp_path))
    _one_line_error(result, "cannot reach the node")


async def test_a_status_that_is_not_a_nodes_is_one_line_exit_2(tmp_path: Path) -> None:
    """The status answer is parsed into its model: one without ``best_milestone`` is refused."""

    async def status(request: web.Request) -> web.Response:
        return web.json_response({"network": "devnet"})

    app = web.Application()
    app.router.add_get("/v1/status", status)
    async with TestServer(app) as server:
        url = str(server.make_url(""))
        result = await _run_miner("--node", url, "--address", PAYOUT, "--datadir", str(tmp_path))
    _one_line_error(result, "is not a node's status")


async def test_bad_address_is_one_line_exit_2(tmp_path: Path) -> None:
    async with TestServer(_fake_node()) as server:
        url = str(server.make_url(""))
        wrong_hrp = encode_address("dag", bytes(32))
        for bad in ("not-an-address", wrong_hrp, PAYOUT[:-1] + "q"):
            result = await _run_miner("--node", url, "--address", bad, "--datadir", str(tmp_path))
            _one_line_error(result, "bad --address")


async def test_an_address_of_no_network_is_named_before_the_node_is_asked(
    tmp_path: Path,
) -> None:
    """With the node down as well, a malformed ``--address`` is what the miner reports (it said
    'cannot reach the node', and the typo showed only once the node was up)."""
    url = f"http://127.0.0.1:{free_port()}"
    for bad in ("not-an-address", encode_address("xyz", bytes(32)), PAYOUT[:-1] + "q"):
        result = await _run_miner("--node", url, "--address", bad, "--datadir", str(tmp_path))
        _one_line_error(result, f"bad --address {bad!r}")


async def test_bad_token_is_one_line_exit_2(tmp_path: Path) -> None:
    token = tmp_path / "api.token"
    token.write_text("wrong\n")
    async with TestServer(_fake_node()) as server:
        url = str(server.make_url(""))
        args = ["--node", url, "--address", PAYOUT, "--token-file", str(token)]
        result = await _run_miner(*args, "--datadir", str(tmp_path / "m"))
    _one_line_error(result, "rejected the API token")


async def test_missing_token_file_is_one_line_exit_2(tmp_path: Path) -> None:
    async with TestServer(_fake_node()) as server:
        url = str(server.make_url(""))
        args = ["--node", url, "--address", PAYOUT, "--token-file", str(tmp_path / "none")]
        result = await _run_miner(*args, "--datadir", str(tmp_path / "m"))
    _one_line_error(result, "cannot read the API token")


def test_bad_flags_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--node", "http://x", "--address", PAYOUT, "--threads", "0"])
    assert exc.value.code == 2
    assert "--threads" in capsys.readouterr().err


def test_benchmark_prints_the_hashrate_last(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["benchmark", "--threads", "1", "--seconds", "0.3"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    key, value = last.split(": ")
    assert key == "hashrate_hs"
    assert float(value) > 100_000


def test_key_file_is_private_and_reused(tmp_path: Path) -> None:
    from miner.controller import KEY_FILE, load_or_create_key

    first = load_or_create_key(tmp_path)
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert load_or_create_key(tmp_path) == first


async def test_unusable_datadir_is_one_line_exit_2(tmp_path: Path) -> None:
    token = tmp_path / "api.token"
    token.write_text("t\n")
    blocked = tmp_path / "file"
    blocked.write_text("a file where the miner's datadir should be\n")
    async with TestServer(_fake_node()) as server:
        url = str(server.make_url(""))
        args = ["--node", url, "--address", PAYOUT, "--token-file", str(token)]
        result = await _run_miner(*args, "--datadir", str(blocked / "sub"))
    _one_line_error(result, "cannot use the miner datadir")
