"""Every HTTP API endpoint fuzzed with Hypothesis against a real node: LevelDB, aiohttp, 127.0.0.1.

The node is a devnet NodeService on a LevelDBStore with a registered peer chain, one confirmed
transaction, one transaction in the mempool and one pending block, served by the real app of
node/api.py. Every answer must be below 500, an error must have the ``{"error": {"code",
"message"}}`` shape, no answer may carry a traceback, and a refused request must change nothing:
the best milestone, the stored blocks, the pending set, the UTXO set, the operator's marks and the
mempool are compared around every such request, and the store is reindexed at the end.
"""

import asyncio
import base64
import gzip
import json
import zlib
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from yarl import URL

from dagchain.blocks import Block
from dagchain.chain import BlockStatus, Chain
from dagchain.crypto import encode_address
from dagchain.mempool import Mempool
from dagchain.params import DEVNET
from dagchain.reindex import reindex
from dagchain.storage.leveldb import LevelDBStore
from dagchain.transactions import Transaction
from node.api import ApiContext, create_app
from node.metrics import NodeMetrics
from p2p.service import NodeService
from tests.dagchain.builders import build_block
from tests.dagchain.chainkit import NOW_AFTER_GENESIS_MS, key, transfer

FAUCET_COINS = 10**14
_, ALICE = key(2)
_, BOB = key(3)
_, CAROL = key(4)
TOKEN = "fuzz-" + "ab" * 16
BODY_LIMIT = 1 << 16
HEX = "0123456789abcdef"
TRACEBACK = "Traceback (most recent call last)"
URL_MAX = 7000
"""Fuzzed URLs stay below aiohttp's request-line limit (8190 bytes): its HTTP parser refuses a
longer line before the app runs (test_requests_the_http_parser_refuses_...)."""


def fuzz_settings(cap: int = 200) -> settings:
    """The loaded profile's example count, at most ``cap`` (the ci profile asks for 300)."""
    profile = settings.default
    assert profile is not None
    return settings(
        max_examples=min(profile.max_examples, cap),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


class FuzzNode:
    """A devnet NodeService on LevelDB holding a little real data for lookups to hit."""

    def __init__(self, path: Path) -> None:
        self.store = LevelDBStore(path)
        self.chain = Chain(DEVNET, self.store)
        self.now_ms = DEVNET.genesis_timestamp_ms + NOW_AFTER_GENESIS_MS
        self.service = NodeService(DEVNET, self.chain, Mempool(DEVNET), lambda: self.now_ms)
        genesis = self.chain.genesis_id
        warm = [self.mine(genesis, register=ALICE, ms=True)]
        for _ in range(DEVNET.sortition_warmup - 1):
            warm.append(self.mine(warm[-1].id, ms=True))
        self.confirmed_tx = transfer(  # S5 (devnet c = 1/16): assigned to the block on warm[-1]
            [(genesis, 0)], [(FAUCET_COINS - 5, BOB)], DEVNET, assigned_to=[warm[-1].id]
        )
        self.service.submit_tx(self.confirmed_tx.raw)
        tx_block = self.mine(warm[-1].id, txs=[self.confirmed_tx], ms=True)
        pending = self.mine(tx_block.id, ms=False)
        self.pool_tx = transfer([(genesis, 1)], [(FAUCET_COINS - 7, CAROL)], DEVNET)
        self.service.submit_tx(self.pool_tx.raw)
        self.milestones: list[Block] = [*warm, tx_block]
        self.blocks: list[Block] = [*self.milestones, pending]
        self.root = warm[0].id
        self.txs: list[Transaction] = [self.confirmed_tx, self.pool_tx]
        # Never submitted: a valid block on the pending one and signed txs the pool must refuse
        # (unknown input, overspend) or could take (an unspent genesis output).
        self.fresh_block = build_block(
            self.chain, previous=pending.id, tip=tx_block.id, milestone=tx_block.id
        )
        self.fresh_txs = [
            transfer([(bytes(32), 0)], [(5, BOB)], DEVNET),
            transfer([(genesis, 2)], [(FAUCET_COINS + 1, BOB)], DEVNET),
            transfer([(genesis, 2)], [(FAUCET_COINS - 9, BOB)], DEVNET),
        ]
        assert self.chain.best_id == tx_block.id
        assert list(self.service.mempool.txids_by_fee_rate()) == [self.pool_tx.txid]

    def mine(
        self,
        previous: bytes,
        *,
        ms: bool,
        txs: Sequence[Transaction] = (),
        register: bytes | None = None,
    ) -> Block:
        """Build (real PoW) a block on the best milestone and have the service accept it."""
        chain = self.chain
        ms_link = chain.best_id
        tip: bytes = ms_link
        if previous == ms_link:
            parent = chain.get_block(ms_link)
            assert parent is not None
            tip = parent.header.milestone_link if ms_link != chain.genesis_id else ms_link
        block = build_block(
            chain,
            previous=previous,
            tip=tip,
            milestone=ms_link,
            txs=txs,
            register=register,
            want_milestone=ms,
        )
        assert self.service.submit_block(block.raw, peer="test").status is BlockStatus.ACCEPTED
        return block

    def state(self) -> tuple[Any, ...]:
        """Everything a refused request must leave as it was."""
        chain = self.chain
        pool = self.service.mempool
        return (
            chain.best_id,
            chain.best_height,
            chain.best_snapshot.chainwork,
            chain.final_id,
            chain.state.block_count,
            frozenset(chain.pending_blocks()),
            chain.utxos(),
            chain.roots(),
            frozenset(chain.state.invalidated),
            frozenset(pool.txids_by_fee_rate()),
            pool.total_bytes,
        )

    def ids(self) -> list[str]:
        """Real hashes: blocks, txids, the genesis id."""
        out = [b.id.hex() for b in self.blocks] + [t.txid.hex() for t in self.txs]
        return [*out, self.chain.genesis_id.hex()]


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes


class Api:
    """The real app on 127.0.0.1, driven from a private event loop (one test at a time)."""

    def __init__(
        self, node: FuzzNode, loop: asyncio.AbstractEventLoop, client: TestClient[Any, Any]
    ):
        self.node = node
        self.loop = loop
        self.client = client
        self.base = str(client.make_url("/")).rstrip("/")

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        *,
        chunked: bool = False,
    ) -> Answer:
        """Send ``path`` exactly as given (already percent-encoded) and read the whole answer.

        ``chunked``: the body goes in 4 KiB chunks without a Content-Length.
        """
        coro = self._request(method, path, body, headers or {}, chunked)
        return self.loop.run_until_complete(coro)

    async def _request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        chunked: bool,
    ) -> Answer:
        url = URL(self.base + path, encoded=True)
        skip = () if "Content-Type" in headers else ("Content-Type",)
        data: Any = body
        if chunked and body is not None:
            data = _chunks(body)
        async with (
            asyncio.timeout(10),
            self.client.session.request(
                method, url, data=data, headers=headers, skip_auto_headers=skip
            ) as resp,
        ):
            if resp.status == 101:  # a WebSocket handshake that succeeded: nothing to read
                return Answer(101, "", b"")
            return Answer(resp.status, resp.headers.get("Content-Type", ""), await resp.read())


async def _chunks(body: bytes) -> AsyncIterator[bytes]:
    for at in range(0, len(body), 4096):
        yield body[at : at + 4096]


@contextmanager
def serving(tmp_path: Path) -> Iterator[Api]:
    """A FuzzNode in ``tmp_path`` behind the API app; store and server closed on exit."""
    node = FuzzNode(tmp_path / "chain")
    loop = asyncio.new_event_loop()

    async def start() -> TestClient[Any, Any]:
        metrics = NodeMetrics(node.service, lambda: 0)
        ctx = ApiContext(node.service, "devnet", "test", bytes(32), TOKEN, metrics)
        client = TestClient(TestServer(create_app(ctx, BODY_LIMIT), host="127.0.0.1"))
        await client.start_server()
        return client

    try:
        client = loop.run_until_complete(start())
        try:
            yield Api(node, loop, client)
        finally:
            loop.run_until_complete(client.close())
    finally:
        loop.close()
        node.store.close()


def check(answer: Answer, what: str) -> Any:
    """The contract for every answer; returns the JSON body of an error (else None)."""
    text = answer.body.decode("utf-8", "replace")
    assert answer.status < 500, (what, answer.status, text[:300])
    assert TRACEBACK not in text, what
    if answer.status < 400:
        return None
    assert answer.content_type.startswith("application/json"), (what, answer)
    data = json.loads(answer.body)
    assert isinstance(data, dict), (what, data)
    assert set(data) == {"error"}, (what, data)
    error = data["error"]
    assert isinstance(error, dict), (what, data)
    assert set(error) == {"code", "message"}, (what, data)
    assert isinstance(error["code"], str), (what, data)
    assert error["code"], (what, data)
    assert isinstance(error["message"], str), (what, data)
    return data


def assert_store_consistent(node: FuzzNode) -> None:
    """The stored rows are exactly what replaying the stored blocks gives."""
    report = reindex(DEVNET, node.store)
    assert report.ok, report.summary()


# ---------------------------------------------------------------------- strategies

LITERAL_SEGMENTS = (
    "..",
    ".",
    "%2e%2e",
    "%ff",
    "%ff%fe",
    "%00",
    "%2F",
    "a%2Fb",
    "%c0%af",
    "%",
    "%zz",
    "%25",
    "",
)


def segments(real: Sequence[str]) -> st.SearchStrategy[str]:
    """One path segment, percent-encoded for the URL (or a hostile literal)."""
    real_list = list(real)
    raw = st.one_of(
        st.sampled_from(real_list),
        st.sampled_from(real_list).map(str.upper),
        st.sampled_from(real_list).map(lambda s: s[:-1]),
        st.sampled_from(real_list).map(lambda s: s + "0"),
        st.sampled_from(real_list).map(lambda s: s[:10] + " " + s[11:]),
        st.sampled_from(real_list).map(lambda s: s[:-2] + "  "),
        st.text(max_size=80),
        st.text(HEX, max_size=130),
        st.text(HEX + HEX.upper(), min_size=64, max_size=64),
        st.text(HEX + " \t\n", min_size=64, max_size=64),
        st.integers(min_value=-(2**80), max_value=2**80).map(str),
        st.integers(min_value=1, max_value=4400).map(lambda n: "9" * n),
        st.sampled_from(["-0", "+1", "1_0", " 1", "1e3", "0x1", "\u0663", "nan", "ddag1", "1"]),
    )
    return st.one_of(raw.map(lambda s: quote(s, safe="")), st.sampled_from(LITERAL_SEGMENTS))


GET_TEMPLATES = (
    "/v1/blocks/{}",
    "/v1/blocks/{}/raw",
    "/v1/milestones/{}/level-set",
    "/v1/txs/{}",
    "/v1/addresses/{}",
    "/v1/lookup/{}",
    "/static/{}",
    "/v1/{}",
    "/{}",
    "/v1/blocks/{}/{}",
    "/v1/mining/{}",
)

QUERY_PATHS = (
    "/v1/milestones",
    "/v1/dag",
    "/v1/mining/template",
    "/v1/status",
    "/v1/mempool",
    "/v1/peers",
    "/metrics",
    "/v1/openapi.json",
    "/",
    "/v1/events",
)

AUTH_HEADERS: tuple[dict[str, str], ...] = (
    {"Authorization": f"Bearer {TOKEN}"},
    {"Authorization": f"bearer  {TOKEN} "},
    {},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer "},
    {"Authorization": "Bearer wrong"},
    {"Authorization": f"Bearer {TOKEN}x"},
    {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": TOKEN},
    {"Authorization": "Bearer t\u00f6k\u00e9n"},
    {"Authorization": f"Bearer {TOKEN}\u00e9"},
)


def query_values(real: Sequence[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(
            [
                "",
                "0",
                "1",
                "-1",
                "abc",
                str(2**63),
                str(2**63 + 1),
                str(2**64),
                str(-(2**64)),
                "1e3",
                "0x10",
                " 5",
                "+5",
                "1_000",
                "\u0663",
                "9" * 4400,
                "nan",
            ]
        ),
        st.integers(min_value=-(2**80), max_value=2**80).map(str),
        st.text(max_size=40),
        st.sampled_from(list(real)),
    )


def query_strings(real: Sequence[str]) -> st.SearchStrategy[str]:
    names = st.one_of(st.sampled_from(["start", "limit", "root", "register"]), st.text(max_size=8))
    pairs = st.lists(st.tuples(names, query_values(real)), max_size=4)
    return pairs.map(_query)


def _query(pairs: list[tuple[str, str]]) -> str:
    """``?k=v&...`` percent-encoded, pairs beyond URL_MAX dropped (see URL_MAX)."""
    out = ""
    for k, v in pairs:
        item = ("&" if out else "?") + f"{quote(k, safe='')}={quote(v, safe='')}"
        if len(out) + len(item) > URL_MAX:
            break
        out += item
    return out


JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, raws: Sequence[bytes]) -> bytes:
    """Real canonical bytes with one to three edits: flip, set, truncate, append, insert, cut."""
    data = bytearray(draw(st.sampled_from(list(raws))))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        op = draw(st.sampled_from(["flip", "set", "truncate", "append", "insert", "cut"]))
        at = draw(st.integers(min_value=0, max_value=max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif op == "set" and data:
            data[at] = draw(st.integers(min_value=0, max_value=255))
        elif op == "truncate":
            del data[at:]
        elif op == "append":
            data += draw(st.binary(min_size=1, max_size=40))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "cut":
            del data[at : at + draw(st.integers(min_value=1, max_value=16))]
    return bytes(data)


def raw_json(value: Any) -> bytes:
    return json.dumps({"raw": value}).encode()


def bodies(raws: Sequence[bytes]) -> st.SearchStrategy[bytes]:
    """Request bodies from garbage to nearly valid ``{"raw": hex}`` documents."""
    return st.one_of(
        st.binary(max_size=300),
        JSON_VALUES.map(lambda v: json.dumps(v).encode()),
        JSON_VALUES.map(raw_json),
        st.text(HEX, max_size=99).filter(lambda s: len(s) % 2 == 1).map(raw_json),
        st.text(max_size=60).map(raw_json),
        st.binary(max_size=200).map(lambda b: raw_json(b.hex())),
        st.binary(max_size=200).map(lambda b: raw_json(b.hex().upper())),
        mutated(raws).map(lambda b: raw_json(b.hex())),
        mutated(raws).map(lambda b: raw_json(b.hex())),
        mutated(raws).map(lambda b: raw_json(b.hex())),
        st.sampled_from(list(raws)).map(lambda b: raw_json(b.hex())),
        st.sampled_from(list(raws)).map(lambda b: json.dumps({"raw": b.hex(), "x": 1}).encode()),
        st.binary(max_size=40).map(lambda b: b'{"raw": "' + b + b'"}'),
        st.integers(min_value=1, max_value=30_000).map(lambda n: b"[" * n + b"]" * n),
        st.sampled_from(list(raws)).map(lambda b: raw_json(b.hex()).decode().encode("utf-16")),
        st.just(b'{"raw": "' + b"0" * BODY_LIMIT + b'"}'),
    )


CONTENT_TYPES = (
    None,
    "application/json",
    "application/json; charset=utf-8",
    "application/json; charset=latin-1",
    "application/json; charset=utf-16",
    "application/json; charset=bogus-encoding",
    "application/json; charset=",
    "text/plain",
    "application/octet-stream",
    "multipart/form-data; boundary=zz",
    "application/x-www-form-urlencoded",
    "garbage",
)


# ---------------------------------------------------------------------- read endpoints


def test_fuzzed_get_paths_answer_json_errors_and_change_nothing(tmp_path: Path) -> None:
    with serving(tmp_path) as api:
        node = api.node
        before = node.state()
        real = [*node.ids(), encode_address(DEVNET.hrp, ALICE), ALICE.hex()]

        @fuzz_settings()
        @given(template=st.sampled_from(GET_TEMPLATES), parts=st.lists(segments(real), min_size=2))
        @example(template="/v1/addresses/{}", parts=[ALICE.hex()[:-2] + "%20%20", ""])  # was 500
        def run(template: str, parts: list[str]) -> None:
            path = template.format(*parts[: template.count("{}")])
            for method in ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
                check(api.request(method, path), f"{method} {path}")
            head = api.request("HEAD", path)  # the GET answer's headers, no body
            assert head.status < 500, path
            assert head.status < 400 or head.content_type.startswith("application/json"), path

        run()
        assert node.state() == before
        assert_store_consistent(node)


def test_fuzzed_query_strings_answer_json_errors_and_change_nothing(tmp_path: Path) -> None:
    with serving(tmp_path) as api:
        node = api.node
        before = node.state()
        real = [node.root.hex(), encode_address(DEVNET.hrp, ALICE), ALICE.hex(), *node.ids()]

        @fuzz_settings()
        @given(
            path=st.sampled_from(QUERY_PATHS),
            query=query_strings(real),
            auth=st.sampled_from(AUTH_HEADERS),
        )
        @example(path="/v1/mining/template", query="", auth=AUTH_HEADERS[-1])  # was 500
        def run(path: str, query: str, auth: dict[str, str]) -> None:
            answer = api.request("GET", path + query, headers=auth)
            check(answer, path + query)
            if not query and path not in ("/v1/mining/template", "/v1/events"):
                assert answer.status == 200, path  # the fuzzing reaches working endpoints

        run()
        assert node.state() == before
        assert_store_consistent(node)


def test_reads_of_real_data_still_answer(tmp_path: Path) -> None:
    """The fuzzed paths above are not all errors: the real ids and addresses resolve."""
    with serving(tmp_path) as api:
        node = api.node
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for block in node.blocks:
            assert api.request("GET", f"/v1/blocks/{block.id.hex()}").status == 200
            assert api.request("GET", f"/v1/blocks/{block.id.hex()}/raw").body == block.raw
        answer = api.request("GET", f"/v1/txs/{node.confirmed_tx.txid.hex()}")
        assert json.loads(answer.body)["status"] == "confirmed"
        answer = api.request("GET", f"/v1/txs/{node.pool_tx.txid.hex()}")
        assert json.loads(answer.body)["status"] == "mempool"
        answer = api.request("GET", f"/v1/addresses/{encode_address(DEVNET.hrp, BOB)}")
        assert json.loads(answer.body)["balance"] == str(FAUCET_COINS - 5)
        answer = api.request("GET", f"/v1/mining/template?root={node.root.hex()}", headers=auth)
        assert answer.status == 200, answer


# ---------------------------------------------------------------------- write endpoints


def test_fuzzed_posts_to_txs_and_submit_answer_json_errors_and_refusals_change_nothing(
    tmp_path: Path,
) -> None:
    with serving(tmp_path) as api:
        node = api.node
        raws = [b.raw for b in [*node.blocks, node.fresh_block]]
        raws += [t.raw for t in [*node.txs, *node.fresh_txs]]

        @fuzz_settings()
        @given(
            path=st.sampled_from(["/v1/txs", "/v1/mining/submit"]),
            body=bodies(raws),
            content_type=st.one_of(st.just("application/json"), st.sampled_from(CONTENT_TYPES)),
            auth=st.one_of(st.just(AUTH_HEADERS[0]), st.sampled_from(AUTH_HEADERS)),
            encoding=st.sampled_from(
                [None, None, "gzip", "deflate", "br", "zstd", "identity", "x"]
            ),
            compress=st.booleans(),
            chunked=st.booleans(),
        )
        def run(
            path: str,
            body: bytes,
            content_type: str | None,
            auth: dict[str, str],
            encoding: str | None,
            compress: bool,
            chunked: bool,
        ) -> None:
            headers = dict(auth)
            if content_type is not None:
                headers["Content-Type"] = content_type
            if encoding is not None:
                headers["Content-Encoding"] = encoding
                if compress and encoding in ("gzip", "deflate"):
                    body = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
            before = node.state()
            answer = api.request("POST", path, body, headers, chunked=chunked)
            error = check(answer, f"POST {path} {body[:80]!r}")
            if error is not None:
                assert node.state() == before, (path, error)
            elif path == "/v1/mining/submit" and json.loads(answer.body)["status"] == "duplicate":
                assert node.state() == before

        run()
        assert_store_consistent(node)


def test_admin_endpoints_act_only_on_real_milestones(tmp_path: Path) -> None:
    with serving(tmp_path) as api:
        node = api.node
        original = node.state()
        milestones = {b.id.hex() for b in node.milestones}
        real = [*node.ids(), encode_address(DEVNET.hrp, ALICE)]

        @fuzz_settings(cap=100)
        @given(
            action=st.sampled_from(["invalidate", "reconsider"]),
            target=segments(real),
            auth=st.sampled_from(AUTH_HEADERS),
            body=st.one_of(st.none(), st.binary(max_size=40)),
        )
        def run(action: str, target: str, auth: dict[str, str], body: bytes | None) -> None:
            before = node.state()
            answer = api.request("POST", f"/v1/admin/{action}/{target}", body, auth)
            error = check(answer, f"{action} {target}")
            if error is not None:
                assert node.state() == before, (action, target, error)
                return
            assert answer.status == 200
            assert target.lower() in milestones, f"{action} acted on {target!r}"
            data = json.loads(answer.body)
            assert data["best_milestone"] == node.chain.best_id.hex()
            assert data["changed"] == (node.state()[0] != before[0])

        run()
        for ms in node.milestones:  # undo every invalidation the fuzzer made
            node.service.reconsider(ms.id)
        assert node.state() == original


def test_events_handshake_with_garbage_headers_is_refused_in_json(tmp_path: Path) -> None:
    with serving(tmp_path) as api:
        header_values = st.one_of(
            st.sampled_from(["websocket", "WebSocket", "upgrade", "Upgrade", "13", "8", "", "x"]),
            st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40),
            st.binary(min_size=16, max_size=16).map(lambda b: base64.b64encode(b).decode()),
        )
        names = st.sampled_from(
            [
                "Upgrade",
                "Connection",
                "Sec-WebSocket-Key",
                "Sec-WebSocket-Version",
                "Sec-WebSocket-Protocol",
                "Sec-WebSocket-Extensions",
                "Origin",
            ]
        )

        @fuzz_settings(cap=60)
        @given(headers=st.dictionaries(names, header_values, max_size=7))
        def run(headers: dict[str, str]) -> None:
            check(api.request("GET", "/v1/events", headers=headers), repr(headers))

        run()
        assert api.node.service.chain.best_id == api.node.milestones[-1].id


# ---------------------------------------------------------------------- what the fuzzing found


def error_code(answer: Answer) -> tuple[int, str]:
    data = check(answer, "regression")
    assert data is not None, answer
    return answer.status, str(data["error"]["code"])


def test_64_characters_with_whitespace_are_not_a_hash(tmp_path: Path) -> None:
    """bytes.fromhex skips spaces: 62 hex digits and 2 spaces gave 31 bytes, which the store's
    prefix scans matched against real keys (an address answered 500, a lookup named a block)."""
    with serving(tmp_path) as api:
        node = api.node
        block = node.blocks[0].id.hex()
        txid = node.confirmed_tx.txid.hex()
        cut = "%20%20"
        assert error_code(api.request("GET", f"/v1/addresses/{ALICE.hex()[:-2]}{cut}")) == (
            400,
            "bad-address",
        )
        assert error_code(api.request("GET", f"/v1/txs/{txid[:-2]}{cut}")) == (400, "bad-txid")
        assert error_code(api.request("GET", f"/v1/blocks/{block[:-2]}{cut}")) == (400, "bad-hash")
        for query in (block, txid):
            answer = api.request("GET", f"/v1/lookup/{cut}{query[:-2]}")
            assert json.loads(answer.body)["kind"] == "unknown", query
        answer = api.request("GET", f"/v1/lookup/{block.upper()}")
        assert json.loads(answer.body)["kind"] == "block"  # upper-case hex still names it


def test_a_non_ascii_bearer_token_is_unauthorized(tmp_path: Path) -> None:
    """secrets.compare_digest raised TypeError on a str with non-ASCII characters: 500."""
    with serving(tmp_path) as api:
        for token in ("t\u00f6k\u00e9n", TOKEN + "\u00e9"):
            auth = {"Authorization": f"Bearer {token}"}
            answer = api.request("POST", "/v1/mining/submit", raw_json("00"), auth)
            assert error_code(answer) == (401, "unauthorized")


def test_an_unknown_charset_or_deep_nesting_is_bad_json(tmp_path: Path) -> None:
    """request.json() decoded by the declared charset (an unknown one: LookupError, 500), and
    json.loads exhausted the recursion limit on deeply nested arrays (RecursionError, 500)."""
    with serving(tmp_path) as api:
        node = api.node
        before = node.state()
        bogus = {"Content-Type": "application/json; charset=bogus-encoding"}
        answer = api.request("POST", "/v1/txs", raw_json(node.fresh_txs[2].raw.hex()), bogus)
        assert answer.status == 202  # the body is UTF-8 JSON whatever the header claims
        assert node.service.mempool.remove(node.fresh_txs[2].txid)
        assert error_code(api.request("POST", "/v1/txs", b"\x00", bogus)) == (400, "bad-json")
        deep = b"[" * 20_000 + b"]" * 20_000
        for path in ("/v1/txs", "/v1/mining/submit"):
            auth = {"Authorization": f"Bearer {TOKEN}"}
            assert error_code(api.request("POST", path, deep, auth)) == (400, "bad-json")
        assert node.state() == before


def test_admin_tools_refuse_ids_that_are_not_accepted_milestones(tmp_path: Path) -> None:
    """reconsider answered 200 (changed false) for any 64 hex characters: a typo looked fine."""
    with serving(tmp_path) as api:
        node = api.node
        before = node.state()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        not_milestones = [
            node.chain.genesis_id.hex(),
            node.blocks[-1].id.hex(),  # the pending block
            node.confirmed_tx.txid.hex(),
            "00" * 32,
        ]
        for action in ("invalidate", "reconsider"):
            for target in not_milestones:
                answer = api.request("POST", f"/v1/admin/{action}/{target}", None, auth)
                assert error_code(answer) == (404, "not-a-milestone"), (action, target)
        assert node.state() == before
        top = node.milestones[-1].id.hex()
        answer = api.request("POST", f"/v1/admin/invalidate/{top}", None, auth)
        assert json.loads(answer.body)["changed"] is True
        answer = api.request("POST", f"/v1/admin/reconsider/{top}", None, auth)
        assert json.loads(answer.body) == {
            "best_milestone": top,
            "height": node.chain.best_height,
            "changed": True,
        }
        assert node.state() == before


def test_a_content_encoding_is_not_decoded(tmp_path: Path) -> None:
    """aiohttp decoded Content-Encoding before the app: a gzip or deflate header over bytes that
    are not failed the body's read (500) or, when the bytes came with the headers, drew a plain-
    text 400 from its parser, as did br and zstd. Bodies are now read as sent."""
    with serving(tmp_path) as api:
        before = api.node.state()
        for encoding in ("gzip", "deflate", "br", "zstd", "bogus"):
            headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
            for body in (b"\x00", b"not compressed" * 100):
                answer = api.request("POST", "/v1/txs", body, headers)
                assert error_code(answer) == (400, "bad-json"), (encoding, body[:20])
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        answer = api.request("POST", "/v1/txs", gzip.compress(raw_json("00")), headers)
        assert error_code(answer) == (400, "bad-json")
        answer = api.request("POST", "/v1/txs", raw_json("00"), headers)
        assert error_code(answer) == (400, "T1")  # the bytes as sent are the JSON
        assert api.node.state() == before


def test_requests_the_http_parser_refuses_get_400_without_traceback(tmp_path: Path) -> None:
    """aiohttp's HTTP parser answers some requests with a plain-text 400 before the app (and its
    JSON error middleware) sees them: a request line or header over 8190 bytes, an unknown
    method, broken chunk framing; docs/node.md, "Input fuzzing"."""
    with serving(tmp_path) as api:
        for method, path in (("GET", "/v1/milestones?start=" + "9" * 9000), ("FOO", "/v1/status")):
            answer = api.request(method, path, b"{}")
            assert answer.status == 400, (method, path)
            assert TRACEBACK not in answer.body.decode("utf-8", "replace")
        for raw in (
            b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
            b"POST /v1/txs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ):
            reply = api.loop.run_until_complete(_exchange(api.client.port, raw))
            assert reply.split(b" ", 2)[1] == b"400", reply[:100]
            assert TRACEBACK.encode() not in reply
        assert api.request("GET", "/v1/status").status == 200  # the server still answers


async def _exchange(port: int | None, data: bytes) -> bytes:
    """Send raw bytes to the server and read its answer (it closes the connection after it)."""
    assert port is not None
    async with asyncio.timeout(10):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(data)
            await writer.drain()
            return await reader.read(4096)
        finally:
            writer.close()
            await writer.wait_closed()
