"""The peer-to-peer wire codec, sans-I/O (PROTOCOL.md §11.1-§11.3, STYLE.md rule 10).

One binary WebSocket frame is msgpack ``[type: str, payload: map]``. :func:`decode_frame` maps a
frame to a message dataclass or raises :class:`RemoteProtocolError` carrying the misbehaviour
score of the §11.7 table; :func:`encode_message` is its inverse. :class:`Handshake` is the
transition table of P3/P4. No sockets, no event loop: the aiohttp shell (``node.net.peer``) only
pumps frames through this module, and the simulator and the fuzz tests use it directly.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any, ClassVar

import msgpack

from dagchain.blocks import BLOCK_PREFIX, HEADER_SIZE, compute_block_id

PROTOCOL_PATH = "/dagchain/p2p/v1"
PROTOCOL_VERSION = 1
MAX_FRAME = 4 * 1024 * 1024
"""P1: ``max_msg_size`` on both sides of the WebSocket (4,194,304 bytes)."""

U8 = 0xFF
U16 = 0xFFFF
U32 = 0xFFFFFFFF
U64 = 0xFFFFFFFFFFFFFFFF

MAX_ADDRS = 1000
MAX_INV = 1000
MAX_GETDATA = 500
MAX_LOCATOR = 64
MAX_HEADERS = 2000
MAX_IDS = 4096
MAX_HOST = 255
MAX_AGENT = 64
HEADER_BYTES = 150

# §11.7 scores
SCORE_BAD_FRAME = 20
"""Text frame, undecodable msgpack, not [str, map], missing or mistyped key (P2)."""
SCORE_OVER_CAP = 20
"""A list longer than its cap."""
SCORE_FATAL = 100
"""Frame over max_frame (P1); first frame not hello, or a second hello (P3)."""

CLOSE_PROTOCOL_ERROR = 1002
CLOSE_TOO_BIG = 1009
CLOSE_NETWORK = 4001
CLOSE_GENESIS = 4002
CLOSE_PROTO = 4003
CLOSE_DUPLICATE = 4004
CLOSE_BANNED = 4005
CLOSE_MISBEHAVING = 4006


class InvKind(IntEnum):
    """``inv``/``getdata``/``notfound`` item kinds (§11.3)."""

    BLOCK = 1
    TX = 2
    LEVEL_SET = 3


class ProtocolError(Exception):
    """Base of the codec's errors."""

    def __init__(self, reason: str, score: int = 0, close_code: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.score = score
        self.close_code = close_code


class LocalProtocolError(ProtocolError):
    """Our own bug: we tried to send something the protocol forbids."""


class RemoteProtocolError(ProtocolError):
    """The peer's fault: ``score`` is its §11.7 penalty, ``close_code`` set if we must close."""


# ----------------------------------------------------------------------------- field specs
Spec = Callable[[Any, str], Any]
"""A field checker: returns the (typed) value or raises RemoteProtocolError."""


def _bad(what: str, score: int = SCORE_BAD_FRAME) -> RemoteProtocolError:
    return RemoteProtocolError(what, score)


def _uint(bits: int) -> Spec:
    maximum = (1 << bits) - 1

    def check(value: Any, name: str) -> int:
        if type(value) is not int or not 0 <= value <= maximum:
            raise _bad(f"{name}: expected u{bits}")
        return value

    return check


def _str(max_len: int) -> Spec:
    def check(value: Any, name: str) -> str:
        if type(value) is not str or len(value) > max_len:
            raise _bad(f"{name}: expected a string of at most {max_len} characters")
        return value

    return check


def _bin(length: int | None = None) -> Spec:
    def check(value: Any, name: str) -> bytes:
        if type(value) is not bytes or (length is not None and len(value) != length):
            raise _bad(f"{name}: expected bin{'' if length is None else f'({length})'}")
        return value

    return check


def _list(item: Spec, cap: int) -> Spec:
    def check(value: Any, name: str) -> tuple[Any, ...]:
        if type(value) is not list:
            raise _bad(f"{name}: expected an array")
        if len(value) > cap:
            raise _bad(f"{name}: {len(value)} entries exceed the cap of {cap}", SCORE_OVER_CAP)
        return tuple(item(v, name) for v in value)

    return check


def _row(*items: Spec) -> Spec:
    def check(value: Any, name: str) -> tuple[Any, ...]:
        if type(value) is not list or len(value) != len(items):
            raise _bad(f"{name}: expected an array of {len(items)}")
        return tuple(spec(v, name) for spec, v in zip(items, value, strict=True))

    return check


def _items(cap: int) -> Spec:
    """``_list(_row(_u8, _bin32), cap)``: inventory pairs, the bulk of relay traffic.

    The same checks and errors, with one pass for well-formed pairs; a pair that fails is
    handed to the generic row checker, which raises the error it would have raised.
    """
    row = _row(_u8, _bin32)

    def check(value: Any, name: str) -> tuple[Any, ...]:
        if type(value) is not list:
            raise _bad(f"{name}: expected an array")
        if len(value) > cap:
            raise _bad(f"{name}: {len(value)} entries exceed the cap of {cap}", SCORE_OVER_CAP)
        out = []
        for v in value:
            if type(v) is list and len(v) == 2:
                kind, item = v
                if (
                    type(kind) is int
                    and 0 <= kind <= 0xFF
                    and type(item) is bytes
                    and len(item) == 32
                ):
                    out.append((kind, item))
                    continue
            out.append(row(v, name))
        return tuple(out)

    return check


_u8, _u16, _u32, _u64 = _uint(8), _uint(16), _uint(32), _uint(64)
_bin32 = _bin(32)
_inv_items = _items(MAX_INV)


# ----------------------------------------------------------------------------- messages
@dataclass(frozen=True, slots=True)
class Message:
    """Base of every wire message; ``TYPE`` is the frame's type string."""

    TYPE: ClassVar[str] = ""


@dataclass(frozen=True, slots=True)
class Hello(Message):
    """P4: the handshake message."""

    TYPE: ClassVar[str] = "hello"
    proto: int
    network: str
    genesis: bytes
    node: bytes
    best: bytes
    height: int
    work: bytes
    """Chainwork of ``best``, 32 bytes little-endian."""
    port: int
    agent: str
    time: int

    @property
    def chainwork(self) -> int:
        """``work`` as a number."""
        return int.from_bytes(self.work, "little")


@dataclass(frozen=True, slots=True)
class Ping(Message):
    TYPE: ClassVar[str] = "ping"
    nonce: int


@dataclass(frozen=True, slots=True)
class Pong(Message):
    TYPE: ClassVar[str] = "pong"
    nonce: int


@dataclass(frozen=True, slots=True)
class GetAddr(Message):
    TYPE: ClassVar[str] = "getaddr"


@dataclass(frozen=True, slots=True)
class Addr(Message):
    """P12: ``addrs`` = ((host, port, seen_s), ...)."""

    TYPE: ClassVar[str] = "addr"
    addrs: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True)
class Inv(Message):
    """Announcements: ``items`` = ((kind, id), ...)."""

    TYPE: ClassVar[str] = "inv"
    items: tuple[tuple[int, bytes], ...]


@dataclass(frozen=True, slots=True)
class GetData(Message):
    TYPE: ClassVar[str] = "getdata"
    items: tuple[tuple[int, bytes], ...]


@dataclass(frozen=True, slots=True)
class NotFound(Message):
    TYPE: ClassVar[str] = "notfound"
    items: tuple[tuple[int, bytes], ...]


@dataclass(frozen=True, slots=True)
class BlockMsg(Message):
    """A canonical block (checked by the core, not here)."""

    TYPE: ClassVar[str] = "block"
    data: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class TxMsg(Message):
    TYPE: ClassVar[str] = "tx"
    data: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class GetMilestones(Message):
    TYPE: ClassVar[str] = "getmilestones"
    locator: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Milestones(Message):
    TYPE: ClassVar[str] = "milestones"
    headers: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class GetLevelSet(Message):
    TYPE: ClassVar[str] = "getlevelset"
    ms: bytes
    offset: int


@dataclass(frozen=True, slots=True)
class LevelSet(Message):
    TYPE: ClassVar[str] = "levelset"
    ms: bytes
    offset: int
    total: int
    ids: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class GetPending(Message):
    TYPE: ClassVar[str] = "getpending"


@dataclass(frozen=True, slots=True)
class Pending(Message):
    TYPE: ClassVar[str] = "pending"
    ids: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Unknown(Message):
    """A frame of a type we do not know: ignored (P2 forward compatibility)."""

    type: str


_SPECS: dict[type[Message], dict[str, Spec]] = {
    Hello: {
        "proto": _u16,
        "network": _str(MAX_HOST),
        "genesis": _bin32,
        "node": _bin32,
        "best": _bin32,
        "height": _u64,
        "work": _bin32,
        "port": _u16,
        "agent": _str(MAX_AGENT),
        "time": _u64,
    },
    Ping: {"nonce": _u64},
    Pong: {"nonce": _u64},
    GetAddr: {},
    Addr: {"addrs": _list(_row(_str(MAX_HOST), _u16, _u64), MAX_ADDRS)},
    Inv: {"items": _inv_items},
    GetData: {"items": _items(MAX_GETDATA)},
    NotFound: {"items": _inv_items},
    BlockMsg: {"data": _bin()},
    TxMsg: {"data": _bin()},
    GetMilestones: {"locator": _list(_bin32, MAX_LOCATOR)},
    Milestones: {"headers": _list(_bin(HEADER_BYTES), MAX_HEADERS)},
    GetLevelSet: {"ms": _bin32, "offset": _u32},
    LevelSet: {"ms": _bin32, "offset": _u32, "total": _u32, "ids": _list(_bin32, MAX_IDS)},
    GetPending: {},
    Pending: {"ids": _list(_bin32, MAX_IDS)},
}
MESSAGE_TYPES: dict[str, type[Message]] = {cls.TYPE: cls for cls in _SPECS}


# ----------------------------------------------------------------------------- codec
def decode_frame(data: bytes | str, max_frame: int = MAX_FRAME) -> Message:
    """One WebSocket frame → one message (P1, P2).

    Raises:
        RemoteProtocolError: text frame, oversized frame (close 1009, +100), undecodable msgpack,
            a frame that is not ``[str, map]`` with string keys, a missing or mistyped required
            key, or a list over its cap (+20 each).
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise RemoteProtocolError("text frame", SCORE_BAD_FRAME)
    if len(data) > max_frame:
        raise RemoteProtocolError(
            f"frame of {len(data)} bytes exceeds {max_frame}", SCORE_FATAL, CLOSE_TOO_BIG
        )
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True)
    except Exception as exc:  # msgpack raises many kinds; all mean "undecodable"
        raise RemoteProtocolError(
            f"undecodable msgpack: {type(exc).__name__}", SCORE_BAD_FRAME
        ) from None
    if (
        type(obj) is not list
        or len(obj) != 2
        or type(obj[0]) is not str
        or type(obj[1]) is not dict
    ):
        raise RemoteProtocolError("frame is not [type: str, payload: map]", SCORE_BAD_FRAME)
    kind, payload = obj
    if any(type(k) is not str for k in payload):
        raise RemoteProtocolError("payload keys must be strings", SCORE_BAD_FRAME)
    cls = MESSAGE_TYPES.get(kind)
    if cls is None:
        return Unknown(kind)
    values = {}
    for name, spec in _SPECS[cls].items():
        if name not in payload:
            raise RemoteProtocolError(f"{kind}: missing key {name!r}", SCORE_BAD_FRAME)
        values[name] = spec(payload[name], f"{kind}.{name}")
    return cls(**values)


def encode_message(msg: Message) -> bytes:
    """One message → one binary frame.

    Raises:
        LocalProtocolError: an Unknown message, or a field that violates its own spec.
    """
    cls = type(msg)
    specs = _SPECS.get(cls)
    if specs is None:
        raise LocalProtocolError(f"cannot encode {cls.__name__}")
    payload = {}
    for name, spec in specs.items():
        value = _as_wire(getattr(msg, name))
        try:
            spec(value, name)
        except RemoteProtocolError as exc:
            raise LocalProtocolError(f"{cls.TYPE}: {exc.reason}") from None
        payload[name] = value
    return msgpack.packb([cls.TYPE, payload], use_bin_type=True)  # type: ignore[no-any-return]


def _as_wire(value: Any) -> Any:
    if type(value) is bytes or type(value) is int:  # the leaves of most fields, as they are
        return value
    if isinstance(value, tuple):
        return [_as_wire(v) for v in value]
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


# ----------------------------------------------------------------------------- handshake
class Role(Enum):
    """Who dialed: the client sends ``hello`` first (P3)."""

    CLIENT = "client"
    SERVER = "server"


class HandshakeState(Enum):
    """States of the P3 transition table."""

    AWAIT_HELLO = "await_hello"
    READY = "ready"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class LocalInfo:
    """What P4 compares a peer's hello against."""

    network: str
    genesis: bytes
    node: bytes
    proto: int = PROTOCOL_VERSION


def check_hello(
    hello: Hello,
    local: LocalInfo,
    is_connected: Callable[[bytes], bool] = lambda _node: False,
    is_banned: Callable[[bytes], bool] = lambda _node: False,
) -> int | None:
    """P4: the close code a hello earns (4001-4005), or None if it is acceptable."""
    if hello.network != local.network:
        return CLOSE_NETWORK
    if hello.genesis != local.genesis:
        return CLOSE_GENESIS
    if hello.proto < 1:
        return CLOSE_PROTO
    if hello.node == local.node or is_connected(hello.node):
        return CLOSE_DUPLICATE
    if is_banned(hello.node):
        return CLOSE_BANNED
    return None


@dataclass(slots=True)
class Handshake:
    """P3 as a transition table over received and sent messages.

    The client sends hello first and is ready on the server's hello. The server is ready once it
    has sent its hello in answer. Any other first frame, or a second hello, closes (1002, +100).
    """

    role: Role
    state: HandshakeState = HandshakeState.AWAIT_HELLO
    sent_hello: bool = False
    peer_hello: Hello | None = None
    proto: int = PROTOCOL_VERSION

    @property
    def ready(self) -> bool:
        """Both hellos exchanged."""
        return self.state is HandshakeState.READY

    def on_send(self, msg: Message) -> None:
        """Record an outgoing message.

        Raises:
            LocalProtocolError: a non-hello before our hello, a second hello, or anything after
                close.
        """
        if self.state is HandshakeState.CLOSED:
            raise LocalProtocolError("connection is closed")
        if isinstance(msg, Hello):
            if self.sent_hello:
                raise LocalProtocolError("hello sent twice")
            if self.role is Role.SERVER and self.peer_hello is None:
                raise LocalProtocolError("the server answers the client's hello")
            self.sent_hello = True
            self._maybe_ready()
            return
        if not self.ready:
            raise LocalProtocolError(f"{msg.TYPE} before the handshake completed")

    def on_receive(self, msg: Message) -> None:
        """Record an incoming message.

        Raises:
            RemoteProtocolError: first frame not hello, or a second hello (close 1002, +100).
        """
        if self.state is HandshakeState.CLOSED:
            raise LocalProtocolError("connection is closed")
        if isinstance(msg, Hello):
            if self.peer_hello is not None:
                raise RemoteProtocolError("second hello", SCORE_FATAL, CLOSE_PROTOCOL_ERROR)
            if self.role is Role.CLIENT and not self.sent_hello:
                raise LocalProtocolError("the client must send hello first")
            self.peer_hello = msg
            self.proto = min(msg.proto, PROTOCOL_VERSION)
            self._maybe_ready()
            return
        if self.peer_hello is None:
            raise RemoteProtocolError(
                f"first frame is {msg.TYPE or 'unknown'}, not hello",
                SCORE_FATAL,
                CLOSE_PROTOCOL_ERROR,
            )

    def close(self) -> None:
        """No more frames either way."""
        self.state = HandshakeState.CLOSED

    def _maybe_ready(self) -> None:
        if self.sent_hello and self.peer_hello is not None:
            self.state = HandshakeState.READY


def block_frame_id(raw: bytes) -> bytes | None:
    """The id of a ``block`` message's bytes: H(header) from the canonical prefix, or None."""
    if len(raw) < 3 + HEADER_SIZE or raw[:3] != BLOCK_PREFIX:
        return None
    return bytes(compute_block_id(raw[3 : 3 + HEADER_SIZE]))


MS_LINK_OFFSET = 2
"""The milestone link follows the u16 version in the 150-byte header (§2.1)."""


def block_frame_milestone_link(raw: bytes) -> bytes | None:
    """The milestone link of a ``block`` message's bytes, from the canonical prefix, or None."""
    if len(raw) < 3 + HEADER_SIZE or raw[:3] != BLOCK_PREFIX:
        return None
    return bytes(raw[3 + MS_LINK_OFFSET : 3 + MS_LINK_OFFSET + 32])


__all__ = [
    "CLOSE_BANNED",
    "CLOSE_DUPLICATE",
    "CLOSE_GENESIS",
    "CLOSE_MISBEHAVING",
    "CLOSE_NETWORK",
    "CLOSE_PROTO",
    "CLOSE_PROTOCOL_ERROR",
    "CLOSE_TOO_BIG",
    "MAX_FRAME",
    "MESSAGE_TYPES",
    "MS_LINK_OFFSET",
    "PROTOCOL_PATH",
    "PROTOCOL_VERSION",
    "Addr",
    "BlockMsg",
    "GetAddr",
    "GetData",
    "GetLevelSet",
    "GetMilestones",
    "GetPending",
    "Handshake",
    "HandshakeState",
    "Hello",
    "Inv",
    "InvKind",
    "LevelSet",
    "LocalInfo",
    "LocalProtocolError",
    "Message",
    "Milestones",
    "NotFound",
    "Pending",
    "Ping",
    "Pong",
    "ProtocolError",
    "RemoteProtocolError",
    "Role",
    "TxMsg",
    "Unknown",
    "block_frame_id",
    "block_frame_milestone_link",
    "check_hello",
    "decode_frame",
    "encode_message",
]
