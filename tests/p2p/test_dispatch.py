"""p2p/dispatch.py: one registration table from message type to handler, driven by the daemon
and by every simulated node; a second dispatch written anywhere fails here."""

import ast
import inspect
from pathlib import Path

from node.net.manager import PeerManager
from p2p import wire
from p2p.dispatch import HANDLERS, SYNC_REQUESTS, Dispatcher
from p2p.exchange import Exchange
from simulator.late_node import LateNode
from simulator.sim_node import RelayPort

ROOT = Path(__file__).resolve().parents[2]
NOT_DISPATCHED = {wire.Hello, wire.Unknown}
"""The handshake runs before dispatch (P3, P4); unknown types are ignored (§11.1)."""
CLASSIFIERS = {
    "p2p/scores.py:is_solicited_reply",  # §11.7: which replies the token bucket does not charge
    "simulator/sim_node.py:_block_of",  # which block a one-block inv or a block message is of
}
"""Functions that look at a message's type to classify it, not to handle it."""


def test_every_message_type_but_the_handshake_has_one_handler() -> None:
    types = {cls for cls in vars(wire).values() if isinstance(cls, type)}
    messages = {cls for cls in types if issubclass(cls, wire.Message) and cls is not wire.Message}
    assert set(HANDLERS) == messages - NOT_DISPATCHED
    assert set(SYNC_REQUESTS) == {wire.GetMilestones, wire.GetLevelSet, wire.GetPending}


def test_the_exchange_and_the_daemon_implement_every_handler_of_their_role() -> None:
    for role, owner in (("exchange", Exchange), ("connection", PeerManager)):
        names = {name for r, name in HANDLERS.values() if r == role}
        missing = sorted(n for n in names if not inspect.isfunction(getattr(owner, n, None)))
        assert not missing, f"{owner.__name__} lacks {missing}"


def test_a_missing_handler_goes_to_on_unexpected() -> None:
    class Partial:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def on_inv(self, key: str, msg: wire.Inv, now: int) -> None:
            self.seen.append(f"inv from {key}")

        def on_unexpected(self, key: str, msg: wire.Message, now: int) -> None:
            self.seen.append(f"unexpected {msg.TYPE}")

    handlers = Partial()
    dispatcher = Dispatcher(handlers)
    for msg in (wire.Inv(()), wire.Ping(1), wire.Pending(()), wire.Unknown("nope")):
        dispatcher.dispatch("p", msg, 0)
    assert handlers.seen == [
        "inv from p",
        "unexpected ping",
        "unexpected pending",
        "unexpected ",
    ]


def test_the_daemon_and_the_simulated_nodes_dispatch_through_the_table() -> None:
    """PeerManager hands ready peers' messages to ``Exchange.receive``; the late node does too;
    the relay port (always-on full nodes, relay-only nodes) binds its own Dispatcher."""
    assert "self.exchange.receive(" in inspect.getsource(PeerManager._on_frame)
    assert "receive(key, msg, now)" in inspect.getsource(LateNode.on_frames)
    assert "Dispatcher(self)" in inspect.getsource(RelayPort.__init__)
    assert "dispatcher.handlers" in inspect.getsource(RelayPort.on_frames)
    assert "self.dispatcher.dispatch(" in inspect.getsource(Exchange.receive)


def _message_classes(node: ast.AST) -> set[str]:
    """Names of wire message classes a type test in ``node`` compares against."""
    names = {cls.__name__ for cls in HANDLERS} | {"Hello"}
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr in names:
            value = sub.value
            if isinstance(value, ast.Name) and value.id == "wire":
                found.add(sub.attr)
        elif isinstance(sub, ast.Name) and sub.id in names:
            found.add(sub.id)
    return found


def _type_tests(func: ast.AST) -> set[str]:
    """Message classes named in ``isinstance`` calls and ``is``/``in`` comparisons of ``func``."""
    found: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance":
            found |= _message_classes(node.args[1]) if len(node.args) == 2 else set()
        elif isinstance(node, ast.Compare) and any(
            isinstance(op, ast.Is | ast.IsNot | ast.In | ast.Eq) for op in node.ops
        ):
            for comparator in node.comparators:
                found |= _message_classes(comparator)
    return found


def test_no_module_dispatches_messages_by_type_of_its_own() -> None:
    """An if/elif chain over message types (two or more classes in one function) is a second
    dispatch: register the message in p2p/dispatch.py's table instead."""
    bad = []
    for package in ("p2p", "node", "simulator"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in ("p2p/wire.py", "p2p/dispatch.py"):
                continue  # the codec and the table itself
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for func in ast.walk(tree):
                if not isinstance(func, ast.FunctionDef):
                    continue
                classes = _type_tests(func)
                if len(classes) >= 2 and f"{rel}:{func.name}" not in CLASSIFIERS:
                    bad.append(f"{rel}:{func.lineno} {func.name} tests {sorted(classes)}")
    assert not bad, "\n".join(bad)


def test_the_scan_sees_an_isinstance_chain() -> None:
    """The check above can fail: it finds the chain the daemon had before the table."""
    code = (
        "def _dispatch(self, peer, msg, now):\n"
        "    if isinstance(msg, wire.Ping):\n"
        "        pass\n"
        "    elif type(msg) is wire.GetData:\n"
        "        pass\n"
    )
    func = ast.parse(code).body[0]
    assert _type_tests(func) == {"Ping", "GetData"}
