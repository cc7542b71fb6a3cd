"""Sans-I/O outbound dialing policy (§10, P12): whom to dial, backoff, no redial after a mismatch.

The shell (``node.net.manager``) opens the sockets; this object only decides, from the times it is
given (monotonic seconds), and remembers which seeds were tried (P10 a).
"""

from collections.abc import Callable, Iterable

from p2p import wire
from p2p.settings import P2PSettings

Addr = tuple[str, int]
MISMATCH_NO_REDIAL_S = 3600.0
"""A peer of another network, genesis or protocol version is not dialed again for an hour."""
MAX_DIAL_BACKOFF_S = 30.0


class Dialer:
    """Outbound dial targets of one node.

    Args:
        settings: Seeds, discovery, ``max_outbound`` and our own address.
    """

    def __init__(self, settings: P2PSettings) -> None:
        self.settings = settings
        self.dialing: set[Addr] = set()
        self.tried: set[Addr] = set()
        self.dialed_to: dict[Addr, str] = {}
        """Dialed address → the connection's key."""
        self._no_redial_until: dict[Addr, float] = {}
        self._failures: dict[Addr, int] = {}

    def next_dials(
        self,
        learnt: Iterable[Addr],
        outbound: int,
        connected: Callable[[Addr], bool],
        now_s: float,
    ) -> list[Addr]:
        """Addresses to dial now (seeds first, then ``learnt`` ones with discovery), up to
        ``max_outbound`` with the ``outbound`` connections and the dials under way; each is
        marked as being dialed until :meth:`done`."""
        s = self.settings
        outbound += len(self.dialing)
        candidates = list(s.seeds) + (list(learnt) if s.discovery else [])
        out: list[Addr] = []
        for addr in candidates:
            if outbound >= s.max_outbound:
                break
            if addr in self.dialing or addr == s.own_address or connected(addr):
                continue
            if self._no_redial_until.get(addr, 0.0) > now_s:
                continue
            self.dialing.add(addr)
            outbound += 1
            out.append(addr)
        return out

    def done(self, addr: Addr) -> None:
        """The dial of ``addr`` ended (its connection, if any, too)."""
        self.dialing.discard(addr)

    def connected(self, addr: Addr, key: str) -> None:
        """The dial of ``addr`` opened connection ``key``."""
        self._failures.pop(addr, None)
        self.dialed_to[addr] = key

    def failed(self, addr: Addr, now_s: float) -> float:
        """The dial failed: back off (1 s doubling, at most 30 s); returns the backoff."""
        self.tried.add(addr)
        failures = self._failures.get(addr, 0) + 1
        self._failures[addr] = failures
        backoff = min(MAX_DIAL_BACKOFF_S, 0.5 * float(2 ** min(failures, 6)))
        self._no_redial_until[addr] = now_s + backoff
        return backoff

    def closed(self, addr: Addr, close_code: int | None, now_s: float) -> None:
        """A dialed connection ended: after a hello mismatch (4001-4003) do not dial it again
        for an hour (P4). A refusal as banned (4005) waits out the ban instead, at most an hour
        (docs/protocol.md decision 36: a healed partition left honest nodes apart for an hour);
        a duplicate (4004) is no mismatch."""
        if close_code is None or not 4001 <= close_code <= 4005:
            return
        if close_code == wire.CLOSE_BANNED:
            wait_s = min(MISMATCH_NO_REDIAL_S, self.settings.ban_duration_ms / 1000)
            self._no_redial_until[addr] = now_s + wait_s
        elif close_code != wire.CLOSE_DUPLICATE:
            self._no_redial_until[addr] = now_s + MISMATCH_NO_REDIAL_S

    def tried_all(self) -> bool:
        """Every seed was dialed at least once (P10 a)."""
        return all(a in self.tried for a in self.settings.seeds)


__all__ = ["MAX_DIAL_BACKOFF_S", "MISMATCH_NO_REDIAL_S", "Dialer"]
