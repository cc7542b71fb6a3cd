"""The sans-I/O wire codec: frames, caps, scores, handshake table (PROTOCOL.md §11.1-§11.3)."""

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from p2p import wire
from p2p.wire import (
    Addr,
    BlockMsg,
    GetAddr,
    GetData,
    GetLevelSet,
    GetMilestones,
    GetPending,
    Handshake,
    Hello,
    Inv,
    LevelSet,
    LocalInfo,
    LocalProtocolError,
    Message,
    Milestones,
    NotFound,
    Pending,
    Ping,
    Pong,
    RemoteProtocolError,
    Role,
    TxMsg,
    Unknown,
    check_hello,
    decode_frame,
    encode_message,
)

GENESIS = bytes(range(32))
NODE = b"\x01" * 32


def make_hello(**changes: object) -> Hello:
    fields: dict[str, object] = {
        "proto": 1,
        "network": "dagchain-devnet",
        "genesis": GENESIS,
        "node": b"\x02" * 32,
        "best": GENESIS,
        "height": 0,
        "work": bytes(32),
        "port": 27707,
        "agent": "dagchain/test",
        "time": 1_767_225_600_000,
    }
    fields.update(changes)
    return Hello(**fields)  # type: ignore[arg-type]


def frame(kind: object, payload: object) -> bytes:
    return msgpack.packb([kind, payload], use_bin_type=True)  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- strategies
ids = st.binary(min_size=32, max_size=32)
u8 = st.integers(0, wire.U8)
u16 = st.integers(0, wire.U16)
u32 = st.integers(0, wire.U32)
u64 = st.integers(0, wire.U64)
items = st.lists(st.tuples(u8, ids), max_size=20).map(tuple)
messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(
        Hello,
        proto=u16,
        network=st.text(max_size=40),
        genesis=ids,
        node=ids,
        best=ids,
        height=u64,
        work=ids,
        port=u16,
        agent=st.text(max_size=64),
        time=u64,
    ),
    st.builds(Ping, nonce=u64),
    st.builds(Pong, nonce=u64),
    st.just(GetAddr()),
    st.builds(
        Addr,
        addrs=st.lists(st.tuples(st.text(max_size=255), u16, u64), max_size=10).map(tuple),
    ),
    st.builds(Inv, items=items),
    st.builds(GetData, items=items),
    st.builds(NotFound, items=items),
    st.builds(BlockMsg, data=st.binary(max_size=300)),
    st.builds(TxMsg, data=st.binary(max_size=300)),
    st.builds(GetMilestones, locator=st.lists(ids, max_size=64).map(tuple)),
    st.builds(
        Milestones, headers=st.lists(st.binary(min_size=150, max_size=150), max_size=5).map(tuple)
    ),
    st.builds(GetLevelSet, ms=ids, offset=u32),
    st.builds(LevelSet, ms=ids, offset=u32, total=u32, ids=st.lists(ids, max_size=20).map(tuple)),
    st.just(GetPending()),
    st.builds(Pending, ids=st.lists(ids, max_size=20).map(tuple)),
)


@given(msg=messages)
def test_every_message_round_trips(msg: Message) -> None:
    assert decode_frame(encode_message(msg)) == msg


@given(data=st.binary(max_size=200))
def test_random_bytes_raise_only_remote_protocol_errors(data: bytes) -> None:
    score = 0
    try:
        decode_frame(data)
    except RemoteProtocolError as exc:
        score = exc.score
    assert score in (0, wire.SCORE_BAD_FRAME)


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.binary(max_size=40)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(
    kind=st.sampled_from(sorted(wire.MESSAGE_TYPES)),
    payload=st.dictionaries(
        st.sampled_from(["items", "data", "nonce", "ids", "ms", "offset", "total", "addrs", "x"]),
        msgpack_values,
        max_size=5,
    ),
)
def test_well_framed_garbage_payloads_raise_only_remote_protocol_errors(
    kind: str, payload: dict[str, object]
) -> None:
    try:
        msg = decode_frame(frame(kind, payload))
    except RemoteProtocolError:
        return
    assert decode_frame(encode_message(msg)) == msg


def test_text_frame_costs_20() -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode_frame("hello")
    assert (info.value.score, info.value.close_code) == (20, None)


def test_oversized_frame_closes_1009_with_100() -> None:
    data = encode_message(BlockMsg(b"\x00" * 100))
    with pytest.raises(RemoteProtocolError) as info:
        decode_frame(data, max_frame=len(data) - 1)
    assert (info.value.score, info.value.close_code) == (100, 1009)


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1",  # never-used msgpack byte
        msgpack.packb({"a": 1}),
        msgpack.packb(["ping"]),
        msgpack.packb([1, {}]),
        msgpack.packb(["ping", []]),
        msgpack.packb(["ping", {1: 2}]),
        frame("ping", {}),  # missing key
        frame("ping", {"nonce": -1}),  # mistyped
        frame("ping", {"nonce": True}),  # bools are not ints
        frame("getlevelset", {"ms": b"x" * 31, "offset": 0}),
        frame("milestones", {"headers": [b"x" * 149]}),
    ],
)
def test_malformed_frames_cost_20(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode_frame(data)
    assert info.value.score == 20


@pytest.mark.parametrize(
    ("kind", "key", "cap", "item"),
    [
        ("inv", "items", 1000, [1, b"\x00" * 32]),
        ("getdata", "items", 500, [1, b"\x00" * 32]),
        ("getmilestones", "locator", 64, b"\x00" * 32),
        ("pending", "ids", 4096, b"\x00" * 32),
        ("addr", "addrs", 1000, ["127.0.0.1", 1, 2]),
    ],
)
def test_lists_over_their_cap_cost_20(kind: str, key: str, cap: int, item: object) -> None:
    decode_frame(frame(kind, {key: [item] * cap}))
    with pytest.raises(RemoteProtocolError, match="cap") as info:
        decode_frame(frame(kind, {key: [item] * (cap + 1)}))
    assert info.value.score == 20


def test_unknown_types_and_keys_are_ignored() -> None:
    assert decode_frame(frame("future", {"x": 1})) == Unknown("future")
    assert decode_frame(frame("ping", {"nonce": 7, "extra": [1]})) == Ping(7)


def test_encoding_a_field_out_of_range_is_our_bug() -> None:
    with pytest.raises(LocalProtocolError):
        encode_message(Ping(-1))
    with pytest.raises(LocalProtocolError):
        encode_message(Unknown("x"))


# ----------------------------------------------------------------------------- handshake
def test_client_and_server_become_ready_after_both_hellos() -> None:
    client, server = Handshake(Role.CLIENT), Handshake(Role.SERVER)
    client.on_send(make_hello())
    server.on_receive(make_hello())
    ready_before_answer = server.ready
    server.on_send(make_hello(proto=3))
    client.on_receive(make_hello(proto=3))
    assert (ready_before_answer, client.ready, server.ready) == (False, True, True)
    assert client.proto == 1


def test_first_frame_not_hello_closes_1002_with_100() -> None:
    server = Handshake(Role.SERVER)
    with pytest.raises(RemoteProtocolError) as info:
        server.on_receive(Ping(1))
    assert (info.value.score, info.value.close_code) == (100, 1002)


def test_second_hello_closes_1002_with_100() -> None:
    server = Handshake(Role.SERVER)
    server.on_receive(make_hello())
    server.on_send(make_hello())
    with pytest.raises(RemoteProtocolError) as info:
        server.on_receive(make_hello())
    assert (info.value.score, info.value.close_code) == (100, 1002)


def test_sending_before_the_handshake_is_our_bug() -> None:
    client = Handshake(Role.CLIENT)
    with pytest.raises(LocalProtocolError):
        client.on_send(Ping(1))
    server = Handshake(Role.SERVER)
    with pytest.raises(LocalProtocolError):
        server.on_send(make_hello())


@pytest.mark.parametrize(
    ("hello", "code"),
    [
        (make_hello(network="dagchain-mainnet"), 4001),
        (make_hello(genesis=b"\x09" * 32), 4002),
        (make_hello(proto=0), 4003),
        (make_hello(node=NODE), 4004),
        (make_hello(node=b"\x05" * 32), 4004),  # already connected
        (make_hello(node=b"\x06" * 32), 4005),  # banned
        (make_hello(), None),
    ],
)
def test_hello_mismatch_close_codes(hello: Hello, code: int | None) -> None:
    local = LocalInfo("dagchain-devnet", GENESIS, NODE)
    got = check_hello(
        hello,
        local,
        is_connected=lambda n: n == b"\x05" * 32,
        is_banned=lambda n: n == b"\x06" * 32,
    )
    assert got == code


_pair_parts = st.one_of(
    st.integers(-2, 300),
    st.booleans(),
    st.binary(min_size=31, max_size=33),
    st.just(b"\x00" * 32),
    st.text(max_size=2),
    st.none(),
)
_pair_like = st.one_of(
    st.tuples(st.integers(0, 255), st.binary(min_size=32, max_size=32)).map(list),
    st.lists(_pair_parts, max_size=3),
    st.tuples(st.integers(0, 255), st.binary(min_size=32, max_size=32)),
    _pair_parts,
)


def _outcome(check: wire.Spec, value: object) -> object:
    try:
        return check(value, "inv.items")
    except RemoteProtocolError as exc:
        return ("error", exc.reason, exc.score, exc.close_code)


@given(st.one_of(st.lists(_pair_like, max_size=6), _pair_parts))
def test_inventory_pairs_check_as_the_generic_list_of_rows(value: object) -> None:
    """The one-pass checker of inv/getdata/notfound items: same values, same errors."""
    generic = wire._list(wire._row(wire._u8, wire._bin32), 4)
    result = _outcome(wire._items(4), value)
    assert result == _outcome(generic, value)
    if type(result) is tuple and result[:1] != ("error",):
        assert all(type(pair) is tuple for pair in result)
