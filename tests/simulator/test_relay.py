"""The shared who-knows-what index and the relay fan-out of the network model."""

import math
import random

from simulator.knowledge import Knowledge
from simulator.network import Network


def test_knowledge_moves_an_item_known_by_all_to_everywhere_and_back() -> None:
    k = Knowledge(3)
    assert not k.knows(0, b"a")
    assert k.learn(0, b"a")
    assert not k.learn(0, b"a")  # already known
    assert k.knows(0, b"a")
    assert not k.knows(1, b"a")
    assert k.learn(1, b"a")
    assert k.learn(2, b"a")
    assert k.known_everywhere(b"a")
    assert b"a" not in k.holders
    assert all(k.knows(i, b"a") for i in range(3))
    assert not k.learn(1, b"a")
    k.forget(1, b"a")  # a block to retry later
    assert not k.known_everywhere(b"a")
    assert k.knows(0, b"a")
    assert not k.knows(1, b"a")
    assert k.knows(2, b"a")
    assert k.learn(1, b"a")
    assert k.known_everywhere(b"a")


def _net(bandwidth: float) -> Network:
    return Network(12, 4, "uniform:0.01:0.2", bandwidth, 2.0, random.Random(5))


def test_fan_out_matches_per_link_arrivals_and_skips() -> None:
    for bandwidth in (0.0, 1.0):
        fast, slow = _net(bandwidth), _net(bandwidth)
        src = 3
        links = slow.neighbours[src]
        excluded, known = links[0].peer, {links[1].peer}
        # A copy in flight to links[2] lands very early: not sent at all. The one in flight to
        # links[3] lands much later than ours: sent, and ours will be the one that counts.
        late = float("1e9")  # the event time object the engine knows this copy by
        pending = {links[2].peer: 0.0, links[3].peer: late}
        dropped: set[int] = set()
        sends = fast.fan_out(src, 1000, 5.0, excluded, known, pending, b"k", b"raw", dropped)
        assert all(args == (args[0], b"k", b"raw", src) for _, args in sends)
        got = [(args[0], at) for at, args in sends]
        assert pending == {links[2].peer: 0.0, **dict(got)}
        assert dropped == {id(late)}  # overtaken by ours, it would change nothing: dropped
        want = [(link.peer, slow.arrival_ms(src, link, 1000, 5.0)) for link in links[3:]]
        assert got == want
        assert (fast.messages, fast.bytes_sent) == (slow.messages, slow.bytes_sent)
        assert got[0][0] == links[3].peer
        if bandwidth:  # the uplink queue serialises the sends
            assert fast._upload_free[src] == slow._upload_free[src] > 5.0
        else:
            assert fast._upload_free[src] == 0.0
            assert not math.isinf(got[0][1])
