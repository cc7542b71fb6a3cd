"""The one registration table from wire message type to handler (§11.3-§11.6).

Every driver of the protocol dispatches a ready peer's messages through :data:`HANDLERS`: the
daemon's :class:`node.net.manager.PeerManager` and the simulator's full, late and relay-only
nodes. So a rule that depends on the kind of message (the getdata cap of §11.7, a penalty for
an unexpected message, P10's gate) can live in one handler, never in a second ``if isinstance``
chain (``tests/p2p/test_dispatch.py`` fails if another one appears).

Messages have two roles. **Connection** messages (``ping``, ``pong``, ``getaddr``, ``addr``) are
about the link itself and are handled by the shell that owns it (the daemon's peer manager; the
simulator models no keepalive and no address gossip). **Exchange** messages (inventory, blocks,
txs, sync) are the node's business and are handled by :class:`p2p.exchange.Exchange` (or, for
the simulator's relay-only nodes, by their relay port). A message of a role with no handler, and
a message of no known type, goes to the exchange's ``on_unexpected``.
"""

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, Literal, Protocol

from p2p import wire

Role = Literal["connection", "exchange"]

HANDLERS: Final[Mapping[type[wire.Message], tuple[Role, str]]] = MappingProxyType(
    {
        wire.Ping: ("connection", "on_ping"),
        wire.Pong: ("connection", "on_pong"),
        wire.GetAddr: ("connection", "on_getaddr"),
        wire.Addr: ("connection", "on_addr"),
        wire.Inv: ("exchange", "on_inv"),
        wire.GetData: ("exchange", "on_getdata"),
        wire.NotFound: ("exchange", "on_notfound"),
        wire.BlockMsg: ("exchange", "on_block"),
        wire.TxMsg: ("exchange", "on_tx"),
        wire.GetMilestones: ("exchange", "on_getmilestones"),
        wire.GetLevelSet: ("exchange", "on_getlevelset"),
        wire.GetPending: ("exchange", "on_getpending"),
        wire.Milestones: ("exchange", "on_milestones"),
        wire.LevelSet: ("exchange", "on_levelset"),
        wire.Pending: ("exchange", "on_pending"),
    }
)
"""Message type -> (role, handler method name). ``hello`` is not here: the handshake (P3, P4)
is the connection's own state machine (:class:`p2p.wire.Handshake`), done before dispatch."""

SYNC_REQUESTS: Final = (wire.GetMilestones, wire.GetLevelSet, wire.GetPending)
"""The requests a catching-up node sends (P7-P9), answered by ``syncsession.serve``."""
REQUESTS: Final = (wire.Ping, wire.GetAddr, wire.GetData, *SYNC_REQUESTS)
"""The messages answered to their sender: what the daemon defers while its answers to that
peer wait for the socket (docs/protocol.md decision 44)."""

Sends = Sequence[tuple[str, wire.Message]]
Handler = Callable[[str, Any, int], Sends | None]
"""``handler(peer_key, message, now_ms)``: what to send, or None (a handler that sends through
its links itself, as the exchange's do)."""


class ExchangeHandlers(Protocol):
    """The exchange role: one method per exchange message of :data:`HANDLERS`, and
    ``on_unexpected`` for the rest."""

    def on_unexpected(self, key: str, msg: wire.Message, now: int) -> Sends | None:
        """A message with no handler of its role here."""
        ...


class Dispatcher:
    """:data:`HANDLERS` bound to the objects of one node: one dict lookup per message.

    A handler the object does not define (a relay-only node has no sync replies to take) leaves
    its messages to ``on_unexpected``.

    Args:
        exchange: Handles the exchange role and anything unexpected.
        connection: Handles the connection role (None: those messages are unexpected).
    """

    __slots__ = ("handlers", "unexpected")

    def __init__(self, exchange: ExchangeHandlers, connection: object | None = None) -> None:
        owners: dict[Role, object | None] = {"connection": connection, "exchange": exchange}
        bound: dict[type[wire.Message], Handler] = {}
        for cls, (role, name) in HANDLERS.items():
            handler = getattr(owners[role], name, None)
            if handler is not None:
                bound[cls] = handler
        self.handlers: Mapping[type[wire.Message], Handler] = bound
        """Message type -> bound handler (a hot loop may look up here itself)."""
        self.unexpected: Handler = exchange.on_unexpected

    def dispatch(self, key: str, msg: wire.Message, now: int) -> Sends | None:
        """Hand ``msg`` from peer ``key`` to its handler; what it returns to send."""
        handler = self.handlers.get(type(msg))
        if handler is None:
            return self.unexpected(key, msg, now)
        return handler(key, msg, now)


__all__ = [
    "HANDLERS",
    "REQUESTS",
    "SYNC_REQUESTS",
    "Dispatcher",
    "ExchangeHandlers",
    "Handler",
    "Role",
    "Sends",
]
