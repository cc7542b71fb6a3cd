"""INTERFACES.md, pinned: names, JSON field types, status codes, defaults and exit codes.

What tests/functional/test_api.py and the unit tests already assert (values, rule ids, 409/413
cases, the token) is not repeated here; this module checks the *shape* a script relies on: every
field the contract lists, with its JSON type (big integers as decimal strings; compact targets,
heights, counts and times as numbers), the status codes not asserted elsewhere (202 orphan, 404
JSON under /static/, 413 before authentication), the CLI defaults and exit codes.

Two real devnet nodes for the whole module (node 1 dials node 0), blocks with real PoW from
:class:`BlockFactory`.
"""

import asyncio
import contextlib
import itertools
import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dagchain.blocks import compute_tips_root, decode_block
from dagchain.crypto import encode_address
from dagchain.genesis import FAUCET_ADDRESS
from dagchain.params import DEVNET
from miner.cli import build_benchmark_parser, build_mine_parser
from node.cli import build_parser as node_parser
from node.config import load_config
from tests.dagchain.chainkit import key, transfer
from tests.functional.framework import BlockFactory, NodeProcess, network_context
from wallet.cli import build_parser as wallet_parser

pytestmark = pytest.mark.integration

HEX64 = re.compile(r"^[0-9a-f]{64}$")
DECIMAL = re.compile(r"^(0|[1-9][0-9]*)$")
FAUCET_COINS = 10**14
_, BOB = key(8)
BIN = Path(sys.executable).parent


# ---------------------------------------------------------------------- type checks


def is_hash(value: object) -> bool:
    """Lowercase hex of 32 bytes."""
    return isinstance(value, str) and HEX64.match(value) is not None


def is_decimal(value: object) -> bool:
    """A big integer as a decimal string."""
    return isinstance(value, str) and DECIMAL.match(value) is not None


def is_int(value: object) -> bool:
    """A JSON integer (not a bool, not a string)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """A JSON number."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def check(obj: dict[str, Any], spec: dict[str, Any], where: str) -> None:
    """Every key of ``spec`` is in ``obj`` and passes its check (a predicate or a nested spec)."""
    for name, want in spec.items():
        assert name in obj, f"{where}: no field {name!r} in {sorted(obj)}"
        if isinstance(want, dict):
            assert isinstance(obj[name], dict), f"{where}.{name}: {obj[name]!r}"
            check(obj[name], want, f"{where}.{name}")
        else:
            assert want(obj[name]), f"{where}.{name}: {obj[name]!r} fails {want.__name__}"


def is_hash_or_null(value: object) -> bool:
    return value is None or is_hash(value)


def is_int_or_null(value: object) -> bool:
    return value is None or is_int(value)


def is_str(value: object) -> bool:
    return isinstance(value, str)


def is_bool(value: object) -> bool:
    return isinstance(value, bool)


def is_hash_list(value: object) -> bool:
    return isinstance(value, list) and all(is_hash(v) for v in value)


def is_tip_list(value: object) -> bool:
    """PROTOCOL.md v2 §2.2: 1..max_tip_links ids, strictly ascending."""
    return (
        is_hash_list(value)
        and isinstance(value, list)
        and 1 <= len(value) <= DEVNET.max_tip_links
        and all(bytes.fromhex(a) < bytes.fromhex(b) for a, b in itertools.pairwise(value))
    )


HEADER = {
    "version": is_int,
    "milestone_link": is_hash,
    "previous_link": is_hash,
    "tips_root": is_hash,
    "tip_links": is_tip_list,
    "merkle_root": is_hash,
    "timestamp_ms": is_int,
    "target": is_int,
}


def _tips_root(tip_links: list[str]) -> str:
    """PROTOCOL.md v2 §2.1 over the hex tip links."""
    return compute_tips_root([bytes.fromhex(t) for t in tip_links]).hex()


# ---------------------------------------------------------------------- the two nodes


@dataclass
class Net:
    a: NodeProcess
    b: NodeProcess
    factory: BlockFactory
    milestone: str
    pending: str
    orphan: dict[str, Any]
    orphan_status: int


def http(
    node: NodeProcess,
    method: str,
    path: str,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, str, bytes]:
    """Status, content type and body of one request (no exception for 4xx/5xx)."""
    req = urllib.request.Request(node.url + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


def submit(node: NodeProcess, raw: bytes) -> tuple[int, dict[str, Any]]:
    status, _, body = http(
        node,
        "POST",
        "/v1/mining/submit",
        json.dumps({"raw": raw.hex()}).encode(),
        {"Authorization": f"Bearer {node.token}", "Content-Type": "application/json"},
    )
    return status, json.loads(body)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    with network_context(tmp_path_factory.mktemp("contract")) as network:
        a, b = network.start(2)
        factory = BlockFactory(miners=2)
        first = factory.mine(1, want_milestone=True)[0]  # registers miner 0: level set 1
        second = factory.mine(1, want_milestone=False)[0]  # registers miner 1: pending
        for block in (first, second):
            assert a.submit_block(block).status == "accepted"
        third, fourth = factory.mine(2, want_milestone=False)
        orphan_status, orphan = submit(a, fourth.raw)  # its parent `third` is not there yet
        assert a.submit_block(third).status == "accepted"
        a.wait(lambda n: n.has_block(fourth.id), 10, "to accept the released orphan")
        network.wait_connected([a, b])
        yield Net(a, b, factory, first.id.hex(), second.id.hex(), orphan, orphan_status)


def _status_spec() -> dict[str, Any]:
    return {
        "network": is_str,
        "version": is_str,
        "node_id": is_hash,
        "best_milestone": {
            "hash": is_hash,
            "height": is_int,
            "chainwork": is_decimal,
            "timestamp_ms": is_int,
        },
        "blocks": is_int,
        "pending_blocks": is_int,
        "mempool": {"size": is_int, "bytes": is_int},
        "peers": is_int,
        "synced": is_bool,
        "targets": {"block": is_int, "milestone": is_int},
    }


# ---------------------------------------------------------------------- HTTP API


def test_status_fields_and_types(net: Net) -> None:
    status = net.a.request("GET", "/v1/status")  # the JSON itself, not its model
    check(status, _status_spec(), "status")
    assert status["network"] == "devnet"
    assert status["best_milestone"]["hash"] == net.milestone
    assert status["blocks"] == 5, "genesis + 4 stored blocks, pending ones included"
    assert status["pending_blocks"] == 3
    assert status["peers"] == 1


def test_block_fields_and_types_for_a_milestone_and_a_pending_block(net: Net) -> None:
    milestone = net.a.request("GET", f"/v1/blocks/{net.milestone}")
    pending = net.a.request("GET", f"/v1/blocks/{net.pending}")
    for name, block in (("milestone", milestone), ("pending", pending)):
        check(
            block,
            {
                **HEADER,
                "nonce": is_decimal,
                "hash": is_hash,
                "txids": is_hash_list,
                "is_milestone": is_bool,
                "tx_status": lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
            },
            name,
        )
        assert "level_set_height" in block
        assert len(block["tx_status"]) == len(block["txids"])
        assert block["tips_root"] == _tips_root(block["tip_links"]), name
    assert milestone["is_milestone"] is True
    assert milestone["level_set_height"] == 1
    assert milestone["tx_status"] == ["valid"]
    assert pending["is_milestone"] is False
    assert pending["level_set_height"] is None, "null while pending"
    assert pending["tx_status"] == ["pending"]

    status, ctype, raw = http(net.a, "GET", f"/v1/blocks/{net.milestone}/raw")
    assert (status, ctype) == (200, "application/octet-stream")
    assert decode_block(raw, DEVNET).id.hex() == net.milestone


def test_milestones_and_level_sets(net: Net) -> None:
    rows = net.a.request("GET", "/v1/milestones?start=0&limit=10")
    assert isinstance(rows, list)
    assert [r["height"] for r in rows] == [0, 1]
    for row in rows:
        check(
            row,
            {"hash": is_hash, "height": is_int, "timestamp_ms": is_int, "level_set_size": is_int},
            "milestone",
        )
    assert net.a.request("GET", "/v1/milestones?start=1&limit=1") == rows[1:]
    level_set = net.a.request("GET", "/v1/milestones/1/level-set")
    assert is_hash_list(level_set)
    assert level_set[-1] == net.milestone
    assert len(level_set) == rows[1]["level_set_size"]


def test_tx_submit_status_and_unknown(net: Net) -> None:
    genesis = net.factory.chain.genesis_id
    pay = transfer([(genesis, 0)], [(FAUCET_COINS - 1000, BOB)], DEVNET)
    status, _, body = http(
        net.a,
        "POST",
        "/v1/txs",
        json.dumps({"raw": pay.raw.hex()}).encode(),
        {"Content-Type": "application/json"},
    )
    assert (status, json.loads(body)) == (202, {"txid": pay.txid.hex()})
    tx_spec = {
        "txid": is_hash,
        "status": is_str,
        "block": is_hash_or_null,
        "milestone_height": is_int_or_null,
        "confirmations": is_int,
    }
    tx = net.a.request("GET", f"/v1/txs/{pay.txid.hex()}")
    check(tx, tx_spec, "tx")
    assert "reason" in tx
    assert tx["status"] == "mempool"

    unknown = "cd" * 32
    status, ctype, body = http(net.a, "GET", f"/v1/txs/{unknown}")
    answer = json.loads(body)
    assert (status, ctype.split(";")[0]) == (200, "application/json")
    assert "error" not in answer, "unknown is a status of the normal answer, not an error"
    check(answer, tx_spec, "unknown tx")
    assert (answer["txid"], answer["status"], answer["block"]) == (unknown, "unknown", None)

    pool = net.a.request("GET", "/v1/mempool")
    check(pool, {"size": is_int, "bytes": is_int, "txids": is_hash_list}, "mempool")
    assert pay.txid.hex() in pool["txids"]


def test_address_fields_and_types(net: Net) -> None:
    text = encode_address(DEVNET.hrp, FAUCET_ADDRESS)
    answer = net.a.request("GET", f"/v1/addresses/{text}")
    check(answer, {"balance": is_decimal, "pending_balance": is_decimal}, "address")
    assert isinstance(answer["utxos"], list)
    assert answer["utxos"]
    for utxo in answer["utxos"]:
        check(
            utxo,
            {"txid": is_hash, "index": is_int, "amount": is_decimal, "confirmations": is_int},
            "utxo",
        )
        assert utxo["confirmations"] >= 1


def test_peers_fields_and_types_on_both_sides(net: Net) -> None:
    directions = []
    for node in (net.a, net.b):
        rows = node.request("GET", "/v1/peers")
        assert isinstance(rows, list)
        assert len(rows) == 1
        check(
            rows[0],
            {
                "node_id": is_hash,
                "address": is_str,
                "direction": is_str,
                "best_milestone_height": is_int,
                "score": is_int,
                "connected_s": is_number,
            },
            f"{node.name} peer",
        )
        directions.append(rows[0]["direction"])
    assert sorted(directions) == ["inbound", "outbound"]


def test_template_fields_and_types(net: Net) -> None:
    register = encode_address(DEVNET.hrp, net.factory.keys[0])
    root = net.a.request("GET", f"/v1/mining/template?register={register}", auth=True)
    spec = {
        "template_id": is_hash,
        **HEADER,
        "target_value": is_decimal,
        "txs": lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v),
        "peer_height": is_int,
        "redeemable": is_decimal,
        "needs_registration": is_bool,
    }
    check(root, spec, "register template")
    assert root["tips_root"] == _tips_root(root["tip_links"])
    assert "nonce" not in root, "header fields but the nonce"
    for name in ("root", "anchor", "anchor_address"):
        assert name in root
    assert root["needs_registration"] is True
    chain_root = net.a.request("GET", f"/v1/mining/template?root={net.milestone}", auth=True)
    check(chain_root, {**spec, "root": is_hash, "anchor_address": is_str}, "root template")
    assert chain_root["root"] == net.milestone
    assert chain_root["needs_registration"] is False


def test_submit_answers_and_orphans_get_202(net: Net) -> None:
    assert net.orphan_status == 202
    assert net.orphan["status"] == "orphan"
    assert is_hash(net.orphan["hash"])
    block = net.factory.blocks[0]
    status, answer = submit(net.a, block.raw)
    assert status == 200
    check(answer, {"hash": is_hash, "is_milestone": is_bool, "status": is_str}, "submit")
    assert (answer["hash"], answer["is_milestone"], answer["status"]) == (
        block.id.hex(),
        True,
        "duplicate",
    )


def test_errors_are_json_everywhere(net: Net) -> None:
    def error(status: int, ctype: str, body: bytes) -> tuple[int, str]:
        assert ctype.startswith("application/json"), (status, ctype, body[:80])
        answer = json.loads(body)
        assert set(answer) == {"error"}
        assert set(answer["error"]) == {"code", "message"}
        return status, answer["error"]["code"]

    assert error(*http(net.a, "GET", "/static/nope.js"))[0] == 404
    assert error(*http(net.a, "GET", "/static/../api.py"))[0] == 404
    assert error(*http(net.a, "POST", "/v1/nope", b"{}"))[0] == 404
    assert error(*http(net.a, "DELETE", "/v1/status"))[0] == 405
    status, ctype, _ = http(net.a, "GET", "/static/explorer.js")
    assert status == 200
    assert "javascript" in ctype

    log_big = b"x" * (1_048_576 + 1)
    for path in ("/v1/mining/submit", "/v1/txs", f"/v1/admin/invalidate/{net.milestone}"):
        assert error(*http(net.a, "POST", path, log_big)) == (413, "body-too-large"), path


def test_openapi_describes_every_path_and_its_query_parameters(net: Net) -> None:
    spec = net.a.request("GET", "/v1/openapi.json")
    assert spec["openapi"].startswith("3.")

    def query(path: str) -> set[str]:
        params = spec["paths"][path]["get"].get("parameters", [])
        return {p["name"] for p in params if p["in"] == "query"}

    assert query("/v1/milestones") == {"start", "limit"}
    assert query("/v1/mining/template") == {"root", "register"}
    level_set = spec["paths"]["/v1/milestones/{height}/level-set"]["get"]["responses"]["200"]
    assert level_set["content"]["application/json"]["schema"]["type"] == "array"
    tx = spec["paths"]["/v1/txs/{txid}"]["get"]["responses"]
    assert "TxResponse" in str(tx["200"])
    assert "404" not in tx
    assert "unknown" in spec["components"]["schemas"]["TxResponse"]["properties"]["status"]["enum"]
    status = spec["components"]["schemas"]["StatusResponse"]["properties"]
    assert status["best_milestone"]
    assert spec["paths"]["/v1/mining/template"]["get"]["security"] == [{"bearer": []}]


def test_metrics_names_every_listed_family(net: Net) -> None:
    status, ctype, body = http(net.a, "GET", "/metrics")
    assert status == 200
    assert ctype.startswith("text/plain")
    families = {
        line.split()[2] for line in body.decode().splitlines() if line.startswith("# TYPE ")
    }
    for name in (
        "dagchain_blocks_accepted_total",  # blocks
        "dagchain_milestones_applied_total",  # milestones
        "dagchain_tps",  # tps
        "dagchain_mempool_txs",  # mempool
        "dagchain_mempool_bytes",
        "dagchain_peers",  # peers
        "dagchain_block_propagation_seconds",  # propagation delay histogram
        "dagchain_reorgs_total",  # reorgs
        "dagchain_rejected_total",  # rejected messages by reason
    ):
        assert name in families, (name, sorted(families))
    assert 'dagchain_block_propagation_seconds_bucket{le="+Inf"}' in body.decode()


def test_token_file_is_private(net: Net) -> None:
    for node in (net.a, net.b):
        token = node.datadir / "api.token"
        assert token.stat().st_mode & 0o777 == 0o600
        assert len(token.read_text().strip()) >= 32


def test_wallet_send_prints_only_the_txid(net: Net) -> None:
    to = encode_address(DEVNET.hrp, BOB)
    pay = ["--to", to, "--amount", "5000", "--fee", "700"]
    proc = subprocess.run(
        [str(BIN / "dagchain-wallet"), "--devnet-faucet", "send", "--node", net.b.url, *pay],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    txid = proc.stdout.strip()
    assert is_hash(txid), proc.stdout
    assert net.b.request("GET", f"/v1/txs/{txid}")["status"] == "mempool"


async def _events(net: Net) -> dict[str, dict[str, Any]]:
    """The first message of each type while a tx, a milestone and a reorg happen on node 0."""
    node = net.a
    auth = {"Authorization": f"Bearer {node.token}"}
    seen: dict[str, dict[str, Any]] = {}
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(node.url + "/v1/events") as ws,
    ):
        genesis = net.factory.chain.genesis_id
        pay = transfer([(genesis, 2)], [(FAUCET_COINS - 900, BOB)], DEVNET)
        async with session.post(node.url + "/v1/txs", json={"raw": pay.raw.hex()}) as resp:
            assert resp.status == 202
        block = net.factory.mine(1, want_milestone=True)[0]
        async with session.post(
            node.url + "/v1/mining/submit", json={"raw": block.raw.hex()}, headers=auth
        ) as resp:
            assert resp.status == 200
        for action in ("invalidate", "reconsider"):
            url = f"{node.url}/v1/admin/{action}/{block.id.hex()}"
            async with session.post(url, headers=auth) as resp:
                assert resp.status == 200
                answer = await resp.json()
                check(
                    answer,
                    {"best_milestone": is_hash, "height": is_int, "changed": is_bool},
                    action,
                )
                assert answer["changed"] is True
        async with asyncio.timeout(10):
            while len(seen) < 4:
                message = await ws.receive_json()
                seen.setdefault(message["type"], message)
    return seen


def test_events_pushes_every_message_type(net: Net) -> None:
    seen = asyncio.run(_events(net))
    assert set(seen) == {"block", "milestone", "reorg", "tx"}
    check(seen["tx"], {"txid": is_hash}, "tx event")
    check(seen["block"], {"hash": is_hash, "is_milestone": is_bool}, "block event")
    check(seen["milestone"], {"hash": is_hash, "height": is_int}, "milestone event")
    check(seen["reorg"], {"old_head": is_hash, "new_head": is_hash}, "reorg event")


def test_sigint_exits_0_within_10_s(net: Net) -> None:
    process = net.b.process
    assert process is not None
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)
    assert process.returncode == 0, net.b.log_tail()
    assert time.monotonic() - started < 10


# ---------------------------------------------------------------------- command lines


def test_console_scripts_are_installed() -> None:
    scripts = {e.name: e.value for e in entry_points(group="console_scripts")}
    for name, target in (
        ("dagchain-node", "node.cli:main"),
        ("dagchain-miner", "miner.cli:main"),
        ("dagchain-wallet", "wallet.cli:main"),
        ("dagchain-sim", "simulator.cli:main"),
    ):
        assert scripts.get(name) == target, name
        assert (BIN / name).exists(), name
    module = subprocess.run(
        [sys.executable, "-m", "simulator", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert module.returncode == 0, module.stderr
    assert "--protocol" in module.stdout, "python -m simulator is dagchain-sim"


def test_node_defaults_are_the_documented_ones() -> None:
    config = load_config({})
    assert config.network == "mainnet"
    assert config.data_path == Path.home() / ".dagchain" / "mainnet"
    assert (config.p2p_host, config.resolved_p2p_port) == ("0.0.0.0", 7707)
    assert (config.api_host, config.resolved_api_port) == ("127.0.0.1", 7708)
    assert config.peers == ()
    assert config.no_discovery is False
    assert (config.log_level, config.log_format) == ("info", "text")
    testnet = load_config({"network": "testnet"})
    assert (testnet.resolved_p2p_port, testnet.resolved_api_port) == (17707, 17708)
    args = node_parser().parse_args(
        ["start", "--peer", "a:1", "--peer", "b:2", "--no-discovery", "--log-format", "json"]
    )
    assert args.peers == ["a:1", "b:2"]
    assert args.no_discovery is True
    assert config.prune_depth is None, "--prune-depth: off by default"
    assert node_parser().parse_args(["start", "--prune-depth", "100"]).prune_depth == 100


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--version"], 0),
        (["start", "--help"], 0),
        (["start", "--log-format", "xml"], 2),
        (["start", "--p2p-port", "99999"], 2),
    ],
)
def test_node_console_script_exit_codes(args: list[str], code: int) -> None:
    proc = subprocess.run(
        [str(BIN / "dagchain-node"), *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    if code == 2:
        assert proc.stderr.count("\n") == 1, proc.stderr


def test_node_unknown_config_key_exits_2(tmp_path: Path) -> None:
    (tmp_path / "dagchain.toml").write_text("api-port = 1\nrpcport = 2\n")
    proc = subprocess.run(
        [str(BIN / "dagchain-node"), "start", "--network", "devnet", "--datadir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "rpcport" in proc.stderr


def test_miner_flags_and_defaults() -> None:
    more = ["--datadir", "d", "--blocks", "3", "--redeem-every", "5", "--threads", "2"]
    args = build_mine_parser().parse_args(
        ["--node", "http://127.0.0.1:1", "--address", "ddag1x", "--token-file", "t", *more]
    )
    assert (args.threads, args.blocks, args.redeem_every, args.rate) == (2, 3, 5, 4.0)
    defaults = build_mine_parser().parse_args(["--node", "u", "--address", "a"])
    assert (defaults.threads, defaults.rate, defaults.datadir, defaults.blocks) == (
        1,
        4.0,
        None,  # ~/.dagchain/miner-<network>, once the node named its network
        None,
    )
    bench = build_benchmark_parser().parse_args(["--threads", "2", "--seconds", "0.5"])
    assert (bench.threads, bench.seconds) == (2, 0.5)


def test_wallet_command_lines_parse() -> None:
    parse = wallet_parser().parse_args
    assert parse(["--wallet", "w.json", "--password-file", "p", "new"]).command == "new"
    assert parse(["--wallet", "w.json", "address"]).command == "address"
    assert parse(["--wallet", "w.json", "balance", "--node", "u"]).node == "u"
    send = parse(["--devnet-faucet", "send", "--node", "u", "--to", "a", "--amount", "5"])
    assert (send.devnet_faucet, send.to, send.amount) == (True, "a", 5)
    assert parse(["send", "--node", "u", "--to", "a", "--amount", "5", "--fee", "9"]).fee == 9
    assert send.fee == "auto", "INTERFACES.md: --fee auto is the default"
    load = parse(["load", "--node", "u", "--rate", "2.5", "--duration", "3", "--accounts", "4"])
    assert (load.rate, load.duration, load.accounts) == (2.5, 3.0, 4)
