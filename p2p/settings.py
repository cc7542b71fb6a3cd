"""The peer-to-peer settings of one node: typed, frozen, built once (§10, §11).

The daemon builds them from its configuration (``NodeConfig.p2p_settings``);
:class:`node.net.manager.PeerManager` and the sans-I/O objects it drives read their numbers here,
never from the config through ``getattr``. No I/O and no pydantic, so the simulator may build one
too.
"""

from dataclasses import dataclass
from pathlib import Path

from p2p import wire

DEFAULT_LIMITS: dict[str, tuple[int, int, int]] = {
    # network: (max_outbound, max_inbound, ban_duration_s)  (§10)
    "mainnet": (8, 32, 86_400),
    "testnet": (8, 32, 86_400),
    "devnet": (8, 16, 60),
}
SYNC_VERIFY_WORKERS = 2
"""Worker processes that check the signatures of downloaded level sets (0: none)."""


@dataclass(frozen=True, slots=True)
class P2PSettings:
    """What the peer manager needs of the configuration.

    Build it with :meth:`for_network` (``NodeConfig.p2p_settings`` in the daemon; tests, tools).
    """

    network: str
    max_outbound: int
    max_inbound: int
    ban_duration_ms: int
    seeds: tuple[tuple[str, int], ...] = ()
    """``--peer`` addresses, dialed first and kept dialed (P12)."""
    discovery: bool = True
    """P12 address gossip (``getaddr``/``addr``) and dialing addresses learnt from it."""
    stale_relay_filter: bool = True
    """P14: drop relayed blocks with a milestone link ``punctuality`` below our best."""
    datadir: Path | None = None
    """Where ``peers.json`` lives (None: the address book is not saved)."""
    listen_port: int = 0
    """The P2P port we listen on: sent in ``hello`` (0: none) and never dialed."""
    max_frame: int = wire.MAX_FRAME
    verify_workers: int = SYNC_VERIFY_WORKERS

    @classmethod
    def for_network(
        cls,
        network: str,
        *,
        max_outbound: int | None = None,
        max_inbound: int | None = None,
        ban_duration_s: int | None = None,
        seeds: tuple[tuple[str, int], ...] = (),
        discovery: bool = True,
        stale_relay_filter: bool = True,
        datadir: Path | None = None,
        listen_port: int = 0,
        verify_workers: int = SYNC_VERIFY_WORKERS,
    ) -> "P2PSettings":
        """The network's §10 limits unless given (an unknown network gets mainnet's)."""
        outbound, inbound, ban_s = DEFAULT_LIMITS.get(network, DEFAULT_LIMITS["mainnet"])
        return cls(
            network=network,
            max_outbound=outbound if max_outbound is None else max_outbound,
            max_inbound=inbound if max_inbound is None else max_inbound,
            ban_duration_ms=1000 * (ban_s if ban_duration_s is None else ban_duration_s),
            seeds=tuple(seeds),
            discovery=discovery,
            stale_relay_filter=stale_relay_filter,
            datadir=datadir,
            listen_port=listen_port,
            verify_workers=verify_workers,
        )

    @property
    def own_address(self) -> tuple[str, int] | None:
        """Our own listener as a dial target to skip."""
        return ("127.0.0.1", self.listen_port) if self.listen_port else None


__all__ = ["DEFAULT_LIMITS", "SYNC_VERIFY_WORKERS", "P2PSettings"]
