"""Sans-I/O address gossip (PROTOCOL.md §11.5 P12): ``getaddr`` once per connection, ``addr``
answers and the relay of fresh unsolicited addresses.

It takes messages and times and returns ``[(peer_key, message)]`` to send plus a misbehaviour
score for the caller to apply; the address book is the only state it writes outside itself, and
its file is loaded and saved by the shell (``node.net.manager``).
"""

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from p2p import gossip, wire
from p2p.relay import Send


class AddrEntryLike(Protocol):
    """One address of the book."""

    host: str
    port: int
    seen_s: int


class AddrBookLike(Protocol):
    """What address gossip reads and writes of :class:`node.net.addrbook.AddrBook`."""

    def add(self, host: str, port: int, seen_s: int) -> bool:
        """Learn or refresh an address."""
        ...

    def mark_good(self, host: str, port: int, now_s: int) -> None:
        """A dial to this address reached a node."""
        ...

    def good(self, count: int) -> Sequence[AddrEntryLike]:
        """Up to ``count`` addresses worth sharing."""
        ...


@dataclass(slots=True)
class _PeerAddr:
    getaddr_sent: bool = False
    answered_getaddr: bool = False
    got_addr: bool = False
    limiter: gossip.AddrLimiter = field(default_factory=gossip.AddrLimiter)


@dataclass(frozen=True, slots=True)
class AddrVerdict:
    """An ``addr`` taken in: the score to add to its sender (0: none) and what to relay."""

    score: int = 0
    sends: tuple[Send, ...] = ()


class AddrGossip:
    """P12 for one node.

    Args:
        book: The address book (learns addresses; answers ``getaddr``).
        rng: Picks the two peers an unsolicited ``addr`` is relayed to.
        discovery: False with ``--no-discovery``: no ``getaddr``, no answers, nothing learnt.
    """

    def __init__(self, book: AddrBookLike, rng: random.Random, discovery: bool = True) -> None:
        self.book = book
        self.rng = rng
        self.discovery = discovery
        self._peers: dict[str, _PeerAddr] = {}

    def on_ready(
        self,
        key: str,
        host: str,
        port: int,
        outbound: bool,
        hello_port: int,
        now_ms: int,
    ) -> list[Send]:
        """``key`` completed its handshake: record its address, send ``getaddr`` once.

        Outbound: the dialed ``host:port`` worked. Inbound: its hello's listening port is
        learnt (with discovery).
        """
        peer = self._peers.setdefault(key, _PeerAddr())
        now_s = now_ms // 1000
        if outbound:
            self.book.mark_good(host, port, now_s)
        elif hello_port and self.discovery:
            self.book.add(host, hello_port, now_s)
        if self.discovery and not peer.getaddr_sent:
            peer.getaddr_sent = True
            return [(key, wire.GetAddr())]
        return []

    def remove_peer(self, key: str) -> None:
        """``key`` left."""
        self._peers.pop(key, None)

    def on_getaddr(self, key: str) -> list[Send]:
        """Answer the first ``getaddr`` of a connection with up to 1,000 good addresses."""
        peer = self._peers.get(key)
        if peer is None or peer.answered_getaddr or not self.discovery:
            return []
        peer.answered_getaddr = True
        rows = tuple((e.host, e.port, e.seen_s) for e in self.book.good(gossip.GETADDR_MAX))
        return [(key, wire.Addr(rows))]

    def on_addr(self, key: str, msg: wire.Addr, others: Sequence[str], now_ms: int) -> AddrVerdict:
        """Learn the addresses; relay fresh ones of an unsolicited ``addr`` to two ``others``.

        The first ``addr`` after our ``getaddr`` is the answer (any size); an unsolicited one
        of more than 10 entries costs 20, and one within 10 s of the last is dropped.
        """
        peer = self._peers.setdefault(key, _PeerAddr())
        solicited = peer.getaddr_sent and not peer.got_addr
        peer.got_addr = True
        verdict = peer.limiter.check(len(msg.addrs), solicited, now_ms)
        if verdict is not None:
            return AddrVerdict(verdict)
        if not self.discovery:
            return AddrVerdict()
        now_s = now_ms // 1000
        fresh = []
        for host, port, seen in msg.addrs:
            seen_s = min(seen, now_s)
            self.book.add(host, port, seen_s)
            if now_s - seen_s <= gossip.ADDR_RELAY_AGE_S:
                fresh.append((host, port, seen_s))
        if not fresh or solicited:
            return AddrVerdict()
        relay = wire.Addr(tuple(fresh[: gossip.ADDR_MAX_UNSOLICITED]))
        targets = [k for k in others if k != key]
        chosen = self.rng.sample(targets, min(gossip.ADDR_RELAY_FANOUT, len(targets)))
        return AddrVerdict(0, tuple((k, relay) for k in chosen))


__all__ = ["AddrBookLike", "AddrGossip", "AddrVerdict"]
