"""The shared who-knows-what index and the relay fan-out of the network model."""

import math
import random

import pytest

from simulator.knowledge import COMPILED_LEARN_EACH, Knowledge
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


def test_knowledge_over_nodes_from_an_offset_counts_and_forgets_each() -> None:
    """The relay-only nodes' index: ids 10 ... 19 (bitmaps from id 0). An item moves to
    ``everywhere`` when all ten know it; forgetting there brings back exactly the other nine;
    the last node to forget it leaves no bitmap behind."""
    k = Knowledge(10, 10)
    for node in range(10, 20):
        assert k.count(b"x") == node - 10
        assert k.learn(node, b"x")
    assert k.known_everywhere(b"x")
    assert k.count(b"x") == 10
    assert not k.holders
    assert not k.counts
    k.forget(13, b"x")
    assert k.count(b"x") == 9
    assert [n for n in range(24) if k.knows(n, b"x")] == [*range(10, 13), *range(14, 20)]
    k.forget(13, b"x")  # twice: no change
    assert k.count(b"x") == 9
    for node in (*range(10, 13), *range(14, 20)):
        k.forget(node, b"x")
    assert k.count(b"x") == 0
    assert b"x" not in k.holders
    assert b"x" not in k.counts
    assert not any(k.knows(n, b"x") for n in range(24))
    assert k.learn(19, b"x")
    assert k.count(b"x") == 1
    assert len(k.holders[b"x"]) == 3  # 20 ids: three bytes, not one set per item


@pytest.mark.parametrize("compiled", [False, True], ids=["python", "compiled"])
@pytest.mark.parametrize("first", [0, 5])
def test_learn_each_is_learn_in_turn(compiled: bool, first: int) -> None:
    """``learn_each`` (a block's txs) leaves the index as ``learn`` one key after another,
    through keys known everywhere, repeated keys and the last node completing a key, in
    Python and compiled (simulator/_flow.c), over node ids from 0 or after the full nodes'."""
    if compiled and not COMPILED_LEARN_EACH:
        pytest.skip("simulator._flow not built, or DAGCHAIN_FLOW_KERNEL=python")
    rng = random.Random(4)
    one, each = Knowledge(9, first), Knowledge(9, first)
    learn_each = each.learn_each if compiled else each.learn_each_python
    for _ in range(300):
        node = first + rng.randrange(9)
        keys = [bytes([rng.randrange(12)]) for _ in range(rng.randrange(6))]
        for key in keys:
            one.learn(node, key)
        learn_each(node, keys)
        assert (each.holders, each.counts, each.everywhere) == (
            one.holders,
            one.counts,
            one.everywhere,
        )
        if rng.random() < 0.2:
            key, forgetter = bytes([rng.randrange(12)]), first + rng.randrange(9)
            one.forget(forgetter, key)
            each.forget(forgetter, key)
    assert one.everywhere, "some key reached every node"


@pytest.mark.parametrize("compiled", [False, True], ids=["python", "compiled"])
def test_knows_at_answers_as_knows_through_learning_and_forgetting(compiled: bool) -> None:
    """A relay-only node's ``has_tx`` (``Knowledge.knows_at``, bound once) answers as
    ``knows`` while keys spread, reach every node (``everywhere``) and are forgotten again."""
    if compiled and not COMPILED_LEARN_EACH:
        pytest.skip("simulator._flow not built, or DAGCHAIN_FLOW_KERNEL=python")
    rng = random.Random(7)
    k = Knowledge(11, 3)
    bound = {node: k.knows_at(node, compiled) for node in range(3, 14)}
    keys = [bytes([n]) for n in range(8)]
    seen_everywhere = False
    for _ in range(400):
        node, key = rng.randrange(3, 14), rng.choice(keys)
        if rng.random() < 0.8:
            k.learn(node, key)
        else:
            k.forget(node, key)
        seen_everywhere = seen_everywhere or bool(k.everywhere)
        for n, knows in bound.items():
            for x in keys:
                assert knows(x) is k.knows(n, x)
    assert seen_everywhere


def _net(bandwidth: float) -> Network:
    return Network(12, 4, "uniform:0.01:0.2", bandwidth, 2.0, random.Random(5))


def test_fan_out_matches_per_link_arrivals_and_skips() -> None:
    for bandwidth in (0.0, 1.0):
        fast, slow = _net(bandwidth), _net(bandwidth)
        src = 3
        links = slow.neighbours[src]
        excluded, knowledge = links[0].peer, Knowledge(12)
        knowledge.learn(links[1].peer, b"k")
        known = knowledge.holders[b"k"]
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
