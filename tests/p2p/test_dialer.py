"""p2p/dialer.py and p2p/settings.py: whom to dial and when, from typed settings."""

from pathlib import Path

from node.config import NodeConfig
from p2p import wire
from p2p.dialer import MISMATCH_NO_REDIAL_S, Dialer
from p2p.settings import P2PSettings

SEED = ("127.0.0.1", 9001)


def test_settings_come_from_the_config_with_the_networks_limits() -> None:
    config = NodeConfig(network="devnet", peers=("127.0.0.1:9001",), datadir=Path("/tmp/x"))
    settings = config.resolved().p2p_settings()
    assert settings.seeds == (SEED,)
    assert (settings.max_outbound, settings.max_inbound, settings.ban_duration_ms) == (
        8,
        16,
        60_000,
    )
    assert settings.own_address == ("127.0.0.1", config.resolved_p2p_port)
    assert settings.max_frame == wire.MAX_FRAME
    mine = P2PSettings.for_network("mainnet", max_outbound=2, discovery=False)
    assert (mine.max_outbound, mine.discovery, mine.own_address) == (2, False, None)


def test_seeds_then_learnt_addresses_up_to_max_outbound_never_ourselves() -> None:
    settings = P2PSettings.for_network("devnet", max_outbound=2, seeds=(SEED,), listen_port=9000)
    dialer = Dialer(settings)
    learnt = [("127.0.0.1", 9000), ("10.0.0.1", 1), ("10.0.0.2", 2)]
    assert dialer.next_dials(learnt, 0, lambda a: False, 0.0) == [SEED, ("10.0.0.1", 1)]
    assert dialer.next_dials(learnt, 0, lambda a: False, 0.0) == []  # two dials under way
    dialer.done(SEED)
    assert dialer.next_dials(learnt, 0, lambda a: False, 0.0) == [SEED]


def test_a_failed_dial_backs_off_and_a_mismatch_is_not_redialed_for_an_hour() -> None:
    dialer = Dialer(P2PSettings.for_network("devnet", seeds=(SEED,)))
    assert not dialer.tried_all()
    dialer.next_dials([], 0, lambda a: False, 0.0)
    assert dialer.failed(SEED, 0.0) == 1.0
    dialer.done(SEED)
    assert dialer.tried_all()
    assert dialer.next_dials([], 0, lambda a: False, 0.5) == []
    assert dialer.next_dials([], 0, lambda a: False, 1.0) == [SEED]
    dialer.done(SEED)
    dialer.closed(SEED, wire.CLOSE_DUPLICATE, 1.0)  # a duplicate is no mismatch
    assert dialer.next_dials([], 0, lambda a: False, 1.0) == [SEED]
    dialer.done(SEED)
    dialer.closed(SEED, wire.CLOSE_GENESIS, 1.0)
    assert dialer.next_dials([], 0, lambda a: False, MISMATCH_NO_REDIAL_S) == []
    assert dialer.next_dials([], 0, lambda a: False, MISMATCH_NO_REDIAL_S + 1.0) == [SEED]
