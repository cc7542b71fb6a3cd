"""One peer connection's protocol state, sans-I/O in h11's manner (PROTOCOL.md §11.1-§11.2,
§11.7).

Frames go in (:meth:`Connection.receive_frame`), events come out: a message of a ready peer to
dispatch (:class:`Deliver`, through :mod:`p2p.dispatch`), the peer's ``hello`` to check against
our own state (:class:`HelloReceived`), or misbehaviour with the close code it earns
(:class:`Misbehaved`); :meth:`Connection.penalise` turns points into the close the shell must
send, 4006 once the score reaches the ban threshold. The shell (``node/net/``) owns the socket,
the writer queue and the ban list; it never decides a close code or a charge of its own.
"""

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from p2p import scores, wire


@dataclass(frozen=True, slots=True)
class Deliver:
    """A message of a ready connection, for the dispatch table."""

    msg: wire.Message


@dataclass(frozen=True, slots=True)
class HelloReceived:
    """The peer's ``hello`` (P3): the shell checks it (P4) and answers or closes."""

    hello: wire.Hello


@dataclass(frozen=True, slots=True)
class Misbehaved:
    """Points the peer earned, why, and the close code of the rule (None: stay open)."""

    score: int
    reason: str
    close: int | None = None


Event = Deliver | HelloReceived | Misbehaved | None
"""What one frame gave (None: nothing to do, e.g. an unknown message type after the handshake)."""

RATE = Misbehaved(scores.SCORE_RATE, "message beyond the token bucket")


@dataclass(frozen=True, slots=True)
class CloseVerdict:
    """What a penalty does to the connection."""

    close: int | None
    """The close code to send (None: keep the connection)."""
    banned: bool = False
    """The score reached the ban threshold: ban the peer, close 4006 over any earlier code."""


class Connection:
    """Handshake, score and token bucket of one peer.

    Args:
        key: The shell's name for the peer.
        role: Client (we dialed) or server.
        max_frame: P1's frame limit.
        ban_threshold: §11.7's threshold.
    """

    __slots__ = ("bucket", "handshake", "key", "max_frame", "score")

    def __init__(
        self,
        key: str,
        role: wire.Role,
        max_frame: int = wire.MAX_FRAME,
        ban_threshold: int = scores.BAN_THRESHOLD,
    ) -> None:
        self.key = key
        self.max_frame = max_frame
        self.handshake = wire.Handshake(role)
        self.score = scores.Misbehaviour(ban_threshold)
        self.bucket = scores.TokenBucket()

    @property
    def ready(self) -> bool:
        """Both hellos exchanged (P3)."""
        return self.handshake.ready

    def receive_frame(
        self,
        data: bytes | str,
        now_ms: int,
        pending_items: AbstractSet[bytes] = frozenset(),
        requests: Mapping[str, object] | None = None,
    ) -> Event:
        """One frame from the peer (P1-P3, §11.7).

        ``pending_items`` and ``requests`` are what we asked this peer for (the relay's getdata,
        the sync session's requests): a reply to them is not charged to the token bucket.
        """
        ready = self.handshake.ready
        try:
            msg = wire.decode_frame(data, self.max_frame)
        except wire.RemoteProtocolError as exc:
            if ready and not self.bucket.take(now_ms):
                return RATE
            return self._refused(exc)
        if ready:
            solicited = scores.is_solicited_reply(msg, pending_items, requests or {})
            if scores.charge_inbound(self.bucket, solicited, now_ms):
                return RATE
        try:
            if isinstance(msg, wire.Unknown):
                if not ready:
                    raise wire.RemoteProtocolError(
                        "first frame is not hello", wire.SCORE_FATAL, wire.CLOSE_PROTOCOL_ERROR
                    )
                return None  # §11.1: unknown types are ignored once the handshake is done
            self.handshake.on_receive(msg)
        except wire.RemoteProtocolError as exc:
            return self._refused(exc)
        if isinstance(msg, wire.Hello):
            return HelloReceived(msg)
        return Deliver(msg)

    def _refused(self, exc: wire.RemoteProtocolError) -> Misbehaved:
        close = exc.close_code
        if close is None and not self.handshake.ready:
            close = wire.CLOSE_PROTOCOL_ERROR  # P3: nothing but hello before the handshake
        return Misbehaved(exc.score, exc.reason, close)

    def penalise(self, points: int, close: int | None, now_ms: int) -> CloseVerdict:
        """§11.7: add ``points``; at the threshold the peer is banned and closed with 4006,
        whatever code the event names (except an oversize frame, 1009, P1)."""
        if points and self.score.add(points, now_ms):
            code = wire.CLOSE_TOO_BIG if close == wire.CLOSE_TOO_BIG else wire.CLOSE_MISBEHAVING
            return CloseVerdict(code, banned=True)
        return CloseVerdict(close)


__all__ = [
    "RATE",
    "CloseVerdict",
    "Connection",
    "Deliver",
    "Event",
    "HelloReceived",
    "Misbehaved",
]
