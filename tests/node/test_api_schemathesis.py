"""The node answers as its own /v1/openapi.json says: schemathesis against a live devnet node.

One ``dagchain-node start --network devnet`` process on 127.0.0.1 (real LevelDB, real aiohttp).
Schemathesis loads the document the node serves and, for every operation, sends a bounded number
of generated requests (valid ones, then ones that break the document's constraints) and checks
each answer: never 5xx, a status the document lists, its content type, a body that conforms to its
schema, the response headers, and that input the document rules out is refused with 4xx. A few
requests for real data (genesis, milestone 0) are validated the same way, so the block schemas
meet a real block and not only 404s. Document and server cannot drift apart without this failing.
"""

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.result import Ok

from tests.functional.framework import NodeProcess, wait_until

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

EXAMPLES = {GenerationMode.POSITIVE: 12, GenerationMode.NEGATIVE: 8}
"""Generated requests per operation and mode: about 300 in all, some 20 s on a busy core."""
NO_NEGATIVE = {"GET /v1/lookup/{query}"}
"""Operations whose only input is an unconstrained string: there is nothing to break."""
BUDGET_S = 45.0
"""The whole run, node start included, stays under this (the task: well under 60 s)."""
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    n = NodeProcess(0, tmp_path / "node0" / "data")
    n.start()
    try:
        yield n
    finally:
        n.kill()
        if n.log_path.exists():
            log.info("node log:\n%s", n.log_tail(40))


def test_every_answer_conforms_to_the_openapi_document(node: NodeProcess) -> None:
    started = time.monotonic()
    schema = schemathesis.openapi.from_url(f"{node.url}/v1/openapi.json")
    auth = {"Authorization": f"Bearer {node.token}"}
    session = requests.Session()
    results = list(schema.get_all_operations())
    assert all(isinstance(r, Ok) for r in results), [r for r in results if not isinstance(r, Ok)]
    operations = [r.ok() for r in results if isinstance(r, Ok)]
    document = node.request("GET", "/v1/openapi.json")
    listed = {f"{m.upper()} {p}" for p, item in document["paths"].items() for m in item}
    # Schemathesis leaves out the operation it loaded the document from; checked below.
    assert {op.label for op in operations} == listed - {"GET /v1/openapi.json"}
    ran = 0

    def fuzz(operation: Any, mode: GenerationMode, count: int) -> None:
        headers = auth if operation.definition.raw.get("security") else {}
        checks = [*CHECKS, negative_data_rejection] if mode is GenerationMode.NEGATIVE else CHECKS

        @settings(
            max_examples=count,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def run(case: Any) -> None:
            nonlocal ran
            ran += 1
            case.call_and_validate(session=session, headers=headers, checks=checks)

        try:
            run()
        except Exception as exc:
            raise AssertionError(f"{operation.label} ({mode.value}): {exc}") from exc

    for operation in operations:
        t0 = time.monotonic()
        raw = operation.definition.raw
        for mode, count in EXAMPLES.items():
            if mode is GenerationMode.POSITIVE or (
                ("parameters" in raw or "requestBody" in raw) and operation.label not in NO_NEGATIVE
            ):
                fuzz(operation, mode, count)
        log.info("%s: %.1f s", operation.label, time.monotonic() - t0)
    assert ran >= 150, ran

    # Real data: the block schemas meet real blocks, and 401 is the documented answer.
    genesis = node.request("GET", "/v1/status")["best_milestone"]["hash"]
    by_label = {op.label: op for op in operations}
    for label, path in (
        ("GET /v1/blocks/{hash}", f"/v1/blocks/{genesis}"),
        ("GET /v1/milestones", "/v1/milestones?start=0&limit=5"),
        ("GET /v1/milestones/{height}/level-set", "/v1/milestones/0/level-set"),
        ("GET /v1/dag", "/v1/dag?start=0"),
        ("GET /v1/lookup/{query}", f"/v1/lookup/{genesis}"),
        ("GET /v1/mining/template", "/v1/mining/template"),  # no token: 401
    ):
        response = session.get(node.url + path, timeout=10)
        assert response.status_code < 500, path
        assert by_label[label].validate_response(response) is not False, path
    spec = session.get(node.url + "/v1/openapi.json", timeout=10)
    assert spec.status_code == 200
    assert spec.json() == document
    assert time.monotonic() - started < BUDGET_S


REFUSED = (
    b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
    b"POST /v1/txs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /v1/" + b"x" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
)
PARSER_LINE = "refused a malformed HTTP request from"


def test_requests_the_http_parser_refuses_write_one_line_not_tracebacks(
    node: NodeProcess,
) -> None:
    sent = 30
    started = time.monotonic()
    for i in range(sent):
        with socket.create_connection(("127.0.0.1", node.api_port), timeout=10) as conn:
            conn.sendall(REFUSED[i % len(REFUSED)])
            assert conn.recv(4096).split(b" ", 2)[1] == b"400"
    elapsed = time.monotonic() - started
    wait_until(lambda: PARSER_LINE in node.log_path.read_text(), 10, "the parser-refusal line")
    assert node.request("GET", "/v1/status")["network"] == "devnet"  # still serving
    text = node.log_path.read_text()
    lines = [line for line in text.splitlines() if PARSER_LINE in line]
    # One line per 10 s window: the first refusal, and one more per window the loop spanned.
    assert 1 <= len(lines) <= 1 + int(elapsed // 10), lines
    assert "Traceback" not in text
    assert "Error handling request" not in text
