"""Serving a catching-up peer: our answers to ``getmilestones``, ``getlevelset`` and
``getpending`` (PROTOCOL.md P7-P9), read from a :class:`p2p.service.NodeService`.

The exchange's handlers of those messages (:mod:`p2p.dispatch`) call these, in the daemon and in
the simulator's full nodes alike.
"""

from p2p import wire
from p2p.service import NodeService


def serve_milestones(
    service: NodeService, msg: wire.GetMilestones, key: str | None = None
) -> wire.Milestones:
    """Our answer to peer ``key``'s ``getmilestones`` (P7, P8): headers after the locator's
    fork (what we list is held from pruning: decision 40)."""
    headers = service.milestone_headers_after(list(msg.locator), wire.MAX_HEADERS, key)
    return wire.Milestones(tuple(headers))


def serve_levelset(
    service: NodeService, msg: wire.GetLevelSet, key: str | None = None
) -> wire.LevelSet | wire.NotFound:
    """Our answer to peer ``key``'s ``getlevelset`` (P9): one page of ids, or ``notfound``."""
    ids = service.level_set_ids(msg.ms, key)
    if ids is None:
        return wire.NotFound(((int(wire.InvKind.LEVEL_SET), msg.ms),))
    page = tuple(ids[msg.offset : msg.offset + wire.MAX_IDS])
    return wire.LevelSet(msg.ms, msg.offset, len(ids), page)


def serve_pending(service: NodeService, msg: wire.GetPending) -> wire.Pending:
    """Our answer to a peer's ``getpending`` (P9): our pending block ids."""
    return wire.Pending(tuple(service.pending_ids(wire.MAX_IDS)))


__all__ = ["serve_levelset", "serve_milestones", "serve_pending"]
