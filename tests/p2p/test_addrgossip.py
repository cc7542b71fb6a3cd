"""p2p/addrgossip.py: P12 address gossip driven with wire messages and times, no sockets."""

import random

from node.net.addrbook import AddrBook
from p2p import gossip, scores, wire
from p2p.addrgossip import AddrGossip

NOW_MS = 1_000_000_000


def test_getaddr_is_sent_once_and_only_the_first_getaddr_is_answered() -> None:
    book = AddrBook(None)
    book.add("10.0.0.1", 9000, NOW_MS // 1000)
    addr = AddrGossip(book, random.Random(1))
    assert addr.on_ready("p", "10.0.0.2", 5555, False, 9001, NOW_MS) == [("p", wire.GetAddr())]
    assert "10.0.0.2:9001" in book  # an inbound peer's listening port is learnt
    (answer,) = addr.on_getaddr("p")
    assert isinstance(answer[1], wire.Addr)
    assert answer[1].addrs
    assert addr.on_getaddr("p") == []


def test_an_unsolicited_addr_of_fresh_entries_is_relayed_to_two_others() -> None:
    addr = AddrGossip(AddrBook(None), random.Random(1))
    msg = wire.Addr((("10.0.0.9", 9000, NOW_MS // 1000),))
    verdict = addr.on_addr("p", msg, ["p", "q", "r", "s"], NOW_MS)
    assert verdict.score == 0
    assert len(verdict.sends) == gossip.ADDR_RELAY_FANOUT
    assert all(key != "p" and m == msg for key, m in verdict.sends)
    # another within 10 s is dropped silently
    assert addr.on_addr("p", msg, ["q"], NOW_MS + 1000).sends == ()


def test_an_unsolicited_addr_of_more_than_10_costs_20_but_the_answer_may_be_large() -> None:
    big = wire.Addr(tuple((f"10.0.1.{i}", 9000, 0) for i in range(11)))
    addr = AddrGossip(AddrBook(None), random.Random(1))
    assert addr.on_addr("p", big, [], NOW_MS).score == scores.SCORE_BIG_ADDR
    addr.on_ready("q", "10.0.0.3", 9000, True, 0, NOW_MS)  # we sent getaddr to q
    assert addr.on_addr("q", big, [], NOW_MS).score == 0


def test_without_discovery_nothing_is_asked_answered_or_learnt() -> None:
    book = AddrBook(None)
    addr = AddrGossip(book, random.Random(1), discovery=False)
    assert addr.on_ready("p", "10.0.0.2", 5555, False, 9001, NOW_MS) == []
    assert addr.on_getaddr("p") == []
    addr.on_addr("p", wire.Addr((("10.0.0.9", 9000, 0),)), [], NOW_MS)
    assert len(book) == 0
