"""Defects that bench/soak.py found (issue 26, item 3), each fixed with these as regression tests.

Its 30-minute run (docs/benchmarks.md, "Soak"): once a 60 s partition healed under 200 tx/s of
payments, honest nodes banned each other (the first test; docs/protocol.md decision 35), and a
node that had been refused with 4005 did not dial that peer again for an hour (the second;
decision 36), so the network stayed split into nodes that no longer talked to each other, long
after every fault was over.
"""

from dagchain.crypto import hash32
from dagchain.mempool import Mempool
from dagchain.params import DEVNET
from p2p import wire
from p2p.dialer import MISMATCH_NO_REDIAL_S, Dialer
from p2p.intake import take_tx
from p2p.scores import Misbehaviour, MissingInputLimiter
from p2p.service import NodeService
from p2p.settings import P2PSettings
from tests.dagchain.chainkit import Node, key, transfer

_, BOB = key(3)
SEED = ("127.0.0.1", 9001)


def test_honest_peer_relaying_the_other_branchs_payments_is_not_banned() -> None:
    """An honest peer across a healed partition sends 250 payments (1.25 s of the soak's
    200 tx/s) that spend outputs this node's branch does not have yet. They cannot be admitted
    (§7.5 drops them), but relaying them is no misbehaviour: the peer must not be banned."""
    node = Node(DEVNET)
    service = NodeService(DEVNET, node.chain, Mempool(DEVNET), lambda: node.now_ms)
    limiter, score = MissingInputLimiter(), Misbehaviour()
    banned = False
    for i in range(250):
        other_branch_output = hash32(b"confirmed on the other side %d" % i)
        tx = transfer([(other_branch_output, 0)], [(1_000, BOB)], DEVNET)
        intake = take_tx(service, "peer", tx.raw, limiter, node.now_ms + 5 * i)
        if intake.penalty is not None:
            banned |= score.add(intake.penalty.score, node.now_ms + 5 * i)
    assert (banned, score.value(node.now_ms + 1_250)) == (False, 0)


def test_a_peer_that_refused_us_as_banned_is_dialed_again_after_the_ban() -> None:
    settings = P2PSettings.for_network("devnet", seeds=(SEED,))
    dialer = Dialer(settings)
    assert dialer.next_dials([], 0, lambda a: False, 0.0) == [SEED]
    dialer.done(SEED)
    dialer.closed(SEED, wire.CLOSE_BANNED, 0.0)
    after_ban_s = settings.ban_duration_ms / 1000 + 1.0
    assert dialer.next_dials([], 0, lambda a: False, after_ban_s - 2.0) == []  # still banned
    assert dialer.next_dials([], 0, lambda a: False, after_ban_s) == [SEED]
    dialer.done(SEED)
    # mainnet bans for 24 h: a refusal as banned waits at most P4's hour
    mainnet = Dialer(P2PSettings.for_network("mainnet", seeds=(SEED,)))
    assert mainnet.next_dials([], 0, lambda a: False, 0.0) == [SEED]
    mainnet.done(SEED)
    mainnet.closed(SEED, wire.CLOSE_BANNED, 0.0)
    assert mainnet.next_dials([], 0, lambda a: False, MISMATCH_NO_REDIAL_S - 1.0) == []
    assert mainnet.next_dials([], 0, lambda a: False, MISMATCH_NO_REDIAL_S + 1.0) == [SEED]
