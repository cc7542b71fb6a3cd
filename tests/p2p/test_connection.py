"""p2p/connection.py: one peer's handshake, score and token bucket without a socket (P1-P3,
§11.7), as the daemon's peer manager drives it."""

from dagchain.crypto import hash32
from p2p import scores, wire
from p2p.connection import RATE, Connection, Deliver, HelloReceived, Misbehaved

HELLO = wire.Hello(
    proto=wire.PROTOCOL_VERSION,
    network="dagchain-devnet",
    genesis=bytes(32),
    node=bytes(range(32)),
    best=bytes(32),
    height=0,
    work=bytes(32),
    port=0,
    agent="test",
    time=0,
)


def _ready_server() -> Connection:
    conn = Connection("p", wire.Role.SERVER)
    assert conn.receive_frame(wire.encode_message(HELLO), 0) == HelloReceived(HELLO)
    conn.handshake.on_send(HELLO)  # our answer
    assert conn.ready
    return conn


def test_a_first_frame_other_than_hello_costs_100_and_closes_1002() -> None:
    conn = Connection("p", wire.Role.SERVER)
    event = conn.receive_frame(wire.encode_message(wire.Ping(1)), 0)
    assert isinstance(event, Misbehaved)
    assert (event.score, event.close) == (wire.SCORE_FATAL, wire.CLOSE_PROTOCOL_ERROR)
    assert not conn.ready


def test_a_ready_connection_delivers_messages_and_ignores_unknown_types() -> None:
    conn = _ready_server()
    assert conn.receive_frame(wire.encode_message(wire.Ping(7)), 0) == Deliver(wire.Ping(7))
    unknown = wire.encode_message(wire.Ping(7)).replace(b"ping", b"zzzz", 1)
    assert conn.receive_frame(unknown, 0) is None


def test_a_second_hello_costs_100_and_reaching_the_threshold_closes_4006() -> None:
    """P3 names close 1002, but +100 reaches ban_threshold: the peer is banned, close 4006."""
    conn = _ready_server()
    event = conn.receive_frame(wire.encode_message(HELLO), 0)
    assert isinstance(event, Misbehaved)
    assert event.close == wire.CLOSE_PROTOCOL_ERROR
    verdict = conn.penalise(event.score, event.close, 0)
    assert verdict.banned
    assert verdict.close == wire.CLOSE_MISBEHAVING


def test_an_oversize_frame_keeps_1009_even_when_it_bans() -> None:
    conn = _ready_server()
    verdict = conn.penalise(wire.SCORE_FATAL, wire.CLOSE_TOO_BIG, 0)
    assert (verdict.banned, verdict.close) == (True, wire.CLOSE_TOO_BIG)


def test_small_penalties_add_up_and_decay() -> None:
    conn = _ready_server()
    for _ in range(99):
        assert not conn.penalise(scores.SCORE_RATE, None, 0).banned
    assert conn.penalise(scores.SCORE_RATE, None, 0).banned
    fresh = _ready_server()
    fresh.penalise(99, None, 0)
    assert not fresh.penalise(1, None, scores.DECAY_MS).banned  # one point decayed first


def test_the_token_bucket_charges_floods_but_not_replies_we_asked_for() -> None:
    conn = _ready_server()
    ping = wire.encode_message(wire.Ping(1))
    events = [conn.receive_frame(ping, 0) for _ in range(scores.TOKEN_BURST + 1)]
    assert events[-1] == RATE
    assert all(isinstance(e, Deliver) for e in events[:-1])
    tx = wire.TxMsg(b"\x01" * 40)
    asked = frozenset({hash32(tx.data)})
    assert isinstance(conn.receive_frame(wire.encode_message(tx), 0, asked), Deliver)
    assert conn.receive_frame(wire.encode_message(tx), 0) == RATE
