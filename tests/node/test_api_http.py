"""HTTP-level behaviour of the API (INTERFACES.md, RFC 9110) on the real app, LevelDB and 127.0.0.1.

- 405 answers carry ``Allow`` (RFC 9110 §15.5.6); HEAD on a GET route answers like GET, no body.
- Integers in paths and queries are ASCII decimal digits only, in one stated bound, and every
  malformed or out-of-range one is the same 400 with the JSON error shape, on every endpoint.
- ``raw`` bodies are hex digits only (``bytes.fromhex`` alone skips whitespace).
- The OpenAPI document states those bounds and patterns, and an operationId and description on
  every operation.
- The rate-limited line that replaces aiohttp's traceback for requests its parser refuses.
"""

import asyncio
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from yarl import URL

from node.api import INT_MAX, ParserErrorFilter, openapi_document
from p2p.service import NodeEvent
from tests.node.test_api_fuzz import TOKEN, Api, check, serving

INT_PATHS = (
    "/v1/milestones?start={}",
    "/v1/dag?start={}",
    "/v1/milestones/{}/level-set",
)
LIMIT_PATHS = ("/v1/milestones?limit={}", "/v1/dag?limit={}")
MALFORMED = (
    "1_0",  # int() reads 10
    "%D9%A1",  # ARABIC-INDIC DIGIT ONE: int() reads 1
    "%EF%BC%91",  # FULLWIDTH DIGIT ONE
    "%201",  # " 1"
    "1%20",  # "1 "
    "+1",  # a query's "+" is a space
    "%2B1",  # "+1"
    "-1",
    "-0",
    "",
    "0x1",
    "1.0",
    "1e3",
    str(2**63),  # one past the bound
    "9" * 40,
    "9" * 5000,  # more digits than int() converts (4300)
)


def get(api: Api, method: str, path: str, headers: dict[str, str] | None = None) -> Any:
    """(status, headers, body) of one request, ``path`` sent as given (percent-encoded)."""

    async def go() -> tuple[int, Any, bytes]:
        url = URL(api.base + path, encoded=True)
        async with (
            asyncio.timeout(10),
            api.client.session.request(method, url, headers=headers or {}) as resp,
        ):
            return resp.status, resp.headers, await resp.read()

    return api.loop.run_until_complete(go())


def test_405_names_the_allowed_methods(tmp_path: Path) -> None:
    with serving(tmp_path) as api:
        for method, path, allowed in (
            ("POST", "/v1/status", {"GET", "HEAD"}),
            ("DELETE", "/v1/txs", {"POST"}),
            ("GET", "/v1/mining/submit", {"POST"}),
            ("PUT", "/v1/events", {"GET", "HEAD"}),
        ):
            status, headers, body = get(api, method, path)
            assert status == 405, (method, path)
            assert {m.strip() for m in headers["Allow"].split(",")} == allowed, (method, path)
            assert json.loads(body)["error"]["code"] == "method-not-allowed"


def test_head_on_every_get_route_answers_like_get_without_a_body(tmp_path: Path) -> None:
    with serving(tmp_path) as api:
        block = api.node.blocks[-1].id.hex()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for path in (
            "/v1/status",
            f"/v1/blocks/{block}",
            f"/v1/blocks/{block}/raw",
            "/v1/milestones",
            "/v1/milestones/1/level-set",
            "/v1/dag",
            f"/v1/lookup/{block}",
            f"/v1/txs/{block}",
            f"/v1/addresses/{block}",
            "/v1/mempool",
            "/v1/peers",
            f"/v1/mining/template?root={api.node.root.hex()}",
            "/v1/events",  # no upgrade: 400, as for GET
            "/metrics",
            "/",
            "/v1/openapi.json",
            "/static/explorer.js",
            "/v1/blocks/zz",  # an error: the same 400
        ):
            g_status, g_headers, _ = get(api, "GET", path, auth)
            h_status, h_headers, h_body = get(api, "HEAD", path, auth)
            assert h_status == g_status, path
            assert h_body == b"", path
            assert h_headers.get("Content-Type") == g_headers.get("Content-Type"), path


def test_malformed_or_out_of_range_integers_are_one_400_everywhere(tmp_path: Path) -> None:
    with serving(tmp_path) as api:
        bound = f"0..{INT_MAX}"
        for template in INT_PATHS + LIMIT_PATHS:
            codes = set()
            for text in MALFORMED:
                if text == "" and "?" not in template:
                    continue  # an empty path segment matches no route: 404
                path = template.format(text)
                answer = api.request("GET", path)
                data = check(answer, path)
                assert answer.status == 400, (path, answer.status)
                codes.add(data["error"]["code"])
                if template in INT_PATHS:
                    assert bound in data["error"]["message"], (path, data)
            assert len(codes) == 1, (template, codes)


def test_integers_in_the_bound_are_accepted(tmp_path: Path) -> None:
    with serving(tmp_path) as api:
        for path, status in (
            (f"/v1/milestones?start={INT_MAX}", 200),
            (f"/v1/dag?start={INT_MAX}", 200),
            (f"/v1/milestones/{INT_MAX}/level-set", 404),
            ("/v1/milestones?start=0&limit=1000", 200),
            ("/v1/dag?start=0&limit=100", 200),
            ("/v1/milestones/0/level-set", 200),
            ("/v1/milestones/001/level-set", 200),  # leading zeros are still decimal digits
        ):
            assert api.request("GET", path).status == status, path
        assert api.request("GET", "/v1/milestones?limit=1001").status == 400
        assert api.request("GET", "/v1/dag?limit=101").status == 400
        assert api.request("GET", "/v1/milestones?limit=0").status == 400
        body = json.loads(api.request("GET", "/v1/milestones/01/level-set").body)
        assert body == json.loads(api.request("GET", "/v1/milestones/1/level-set").body)


def test_raw_bodies_are_hex_digits_only(tmp_path: Path) -> None:
    with serving(tmp_path) as api:
        raw = api.node.fresh_txs[0].raw.hex()
        spaced = " ".join(raw[i : i + 2] for i in range(0, len(raw), 2))
        for text in (spaced, raw + "\n", "0", raw[:-1], "zz"):
            body = json.dumps({"raw": text}).encode()
            answer = api.request("POST", "/v1/txs", body, {"Content-Type": "application/json"})
            assert answer.status == 400, text[:20]
            assert json.loads(answer.body)["error"]["code"] == "bad-hex"
        assert api.node.fresh_txs[0].txid not in api.node.service.mempool


def test_openapi_states_every_bound_and_pattern() -> None:
    doc = openapi_document("test", "ddag")
    ops = [op for item in doc["paths"].values() for op in item.values()]
    ids = [op["operationId"] for op in ops]
    assert len(ids) == len(set(ids))
    assert all(op["description"] for op in ops)

    def param(path: str, name: str, method: str = "get") -> dict[str, Any]:
        found = [p for p in doc["paths"][path][method]["parameters"] if p["name"] == name]
        assert len(found) == 1, (path, name)
        return dict(found[0]["schema"])

    hex64 = re.compile(param("/v1/blocks/{hash}", "hash")["pattern"])
    for path, name in (
        ("/v1/blocks/{hash}/raw", "hash"),
        ("/v1/txs/{txid}", "txid"),
        ("/v1/mining/template", "root"),
    ):
        assert param(path, name)["pattern"] == hex64.pattern
    for path, name in (
        ("/v1/admin/invalidate/{milestone}", "milestone"),
        ("/v1/admin/reconsider/{milestone}", "milestone"),
    ):
        assert param(path, name, "post")["pattern"] == hex64.pattern
    assert hex64.fullmatch("ab" * 32)
    assert not hex64.fullmatch("ab" * 31)
    addr = re.compile(param("/v1/addresses/{address}", "address")["pattern"])
    assert param("/v1/mining/template", "register")["pattern"] == addr.pattern
    assert addr.fullmatch("ab" * 32)
    display = "ddag1" + "q" * 58
    assert addr.fullmatch(display)
    assert addr.fullmatch(display.upper())
    assert not addr.fullmatch("dag1" + "q" * 58)
    for path, name in (
        ("/v1/milestones/{height}/level-set", "height"),
        ("/v1/milestones", "start"),
        ("/v1/dag", "start"),
    ):
        assert param(path, name) == {"type": "integer", "minimum": 0, "maximum": INT_MAX}
    assert param("/v1/milestones", "limit") | {"default": 0} == {
        "type": "integer",
        "minimum": 1,
        "maximum": 1000,
        "default": 0,
    }
    assert param("/v1/dag", "limit")["maximum"] == 100
    raw = doc["components"]["schemas"]["RawRequest"]["properties"]["raw"]
    assert re.fullmatch(raw["pattern"], "00ff")
    assert not re.fullmatch(raw["pattern"], "0")
    events = doc["paths"]["/v1/events"]["get"]
    assert set(events["responses"]) == {"101", "400"}
    assert "WebSocket" in events["description"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_parser_errors_are_one_line_per_window_with_a_count() -> None:
    clock = Clock()
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.Logger("test.parser")
    logger.addFilter(ParserErrorFilter(window_s=10.0, clock=clock))
    logger.addHandler(Keep())

    def refuse(exc: Exception) -> None:
        try:
            raise exc
        except Exception as caught:
            logger.exception("Error handling request from %s", "1.2.3.4", exc_info=caught)

    refuse(LineTooLong("line\r\ninjected", "8190"))
    for _ in range(25):
        clock.now += 0.1
        refuse(BadHttpMessage("bad"))
    clock.now += 10.0
    refuse(BadHttpMessage("later"))
    try:
        raise RuntimeError("a real bug")
    except RuntimeError as exc:
        logger.exception("Unhandled exception", exc_info=exc)
    lines = [r.getMessage() for r in records]
    assert len(lines) == 3, lines
    assert records[0].levelno == records[1].levelno == logging.WARNING
    assert records[0].exc_info is None
    assert records[1].exc_info is None
    assert "1.2.3.4" in lines[0]
    assert "\n" not in lines[0]
    assert "25 more suppressed" in lines[1]
    assert records[2].exc_info is not None  # anything else keeps its traceback


@pytest.mark.parametrize("size", [4095, 4096])
def test_events_closes_client_messages_of_4096_bytes_with_1009(tmp_path: Path, size: int) -> None:
    with serving(tmp_path) as api:

        async def go() -> int | None:
            async with (
                asyncio.timeout(10),
                api.client.session.ws_connect(api.base + "/v1/events") as ws,
            ):
                await ws.send_str("x" * size)
                if size < 4096:  # still open: a ping is answered
                    await ws.ping()
                    await ws.close()
                    return None
                msg = await ws.receive()
                return ws.close_code if msg.type.name in ("CLOSE", "CLOSED", "CLOSING") else -1

        code = api.loop.run_until_complete(go())
        assert code == (1009 if size >= 4096 else None)


def test_a_handler_bug_is_a_500_counted_in_metrics_and_the_next_request_is_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No exception swallowed without a log line, a counter and a reason (issue 22)."""
    with serving(tmp_path) as api:

        def broken(*args: object, **kwargs: object) -> None:
            raise RuntimeError("a bug")

        monkeypatch.setattr(api.node.service, "is_milestone", broken)
        path = f"/v1/admin/invalidate/{'ab' * 32}"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for _ in range(2):
            answer = api.request("POST", path, None, auth)
            assert answer.status == 500
            assert json.loads(answer.body)["error"]["code"] == "internal"
            assert "a bug" not in answer.body.decode()
        assert "RuntimeError: a bug" in caplog.text
        metrics = api.request("GET", "/metrics").body.decode()
        line = 'dagchain_internal_errors_total{where="api:POST /v1/admin/invalidate/{milestone}"}'
        assert f"{line} 2.0" in metrics
        monkeypatch.undo()
        assert api.request("GET", "/v1/status").status == 200


def test_events_types_keeps_only_those_kinds_and_an_unknown_kind_is_400(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``GET /v1/events?types=milestone,reorg`` (what a miner needs): no tx or block messages."""
    with serving(tmp_path) as api:
        node = api.node
        subscribe = node.service.subscribe
        subscribed = asyncio.Event()
        sockets: list[object] = []

        def counting(listener: Callable[[NodeEvent], None]) -> None:
            subscribe(listener)
            sockets.append(listener)
            if len(sockets) == 2:
                subscribed.set()

        monkeypatch.setattr(node.service, "subscribe", counting)

        async def go() -> tuple[list[str], list[str]]:
            async with (
                asyncio.timeout(20),
                api.client.session.ws_connect(api.base + "/v1/events") as every,
                api.client.session.ws_connect(
                    api.base + "/v1/events?types=milestone,reorg"
                ) as miner,
            ):
                await subscribed.wait()  # both sockets are listening
                node.service.submit_tx(node.fresh_txs[2].raw)
                node.mine(node.blocks[-1].id, ms=True)
                seen: list[list[str]] = [[], []]
                for ws, kinds in zip((every, miner), seen, strict=True):
                    while "milestone" not in kinds:
                        kinds.append(json.loads((await ws.receive()).data)["type"])
                return seen[0], seen[1]

        every, miner = api.loop.run_until_complete(go())
        assert every == ["tx", "block", "milestone"]
        assert miner == ["milestone"]
        for bad in ("tx,foo", "", "milestone,"):
            answer = api.request("GET", f"/v1/events?types={bad}")
            assert answer.status == 400
            assert json.loads(answer.body)["error"]["code"] == "bad-parameter"
