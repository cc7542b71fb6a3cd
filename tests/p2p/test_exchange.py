"""p2p.exchange.Exchange without sockets: P10's gate on announced txs, sync answers (P7).

The exchange is pure (its links and signature checks come in as objects), so these drive it with
a list for links and the node's real NodeService on a real chain.
"""

import random
from collections.abc import Callable, Sequence

from dagchain.mempool import Mempool
from dagchain.params import DEVNET
from p2p import scores, wire
from p2p.exchange import Exchange, NoVerifier
from p2p.service import NodeEvent, NodeService
from tests.dagchain.chainkit import Node, key, transfer

TX = int(wire.InvKind.TX)
BLOCK = int(wire.InvKind.BLOCK)


class Links:
    """Ready peers that record what the exchange sends and every penalty."""

    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = list(keys)
        self.sent: list[tuple[str, wire.Message]] = []
        self.penalties: list[tuple[str, int, str]] = []
        self.unwritten: list[Callable[[], None]] = []

    def send_to(self, key: str, msg: wire.Message) -> bool:
        if key not in self.keys:
            return False
        self.sent.append((key, msg))
        return True

    def penalise_key(self, key: str, points: int, reason: str) -> None:
        self.penalties.append((key, points, reason))

    def ready_keys(self) -> Sequence[str]:
        return self.keys

    def after_sent(self, key: str, callback: Callable[[], None]) -> None:
        self.unwritten.append(callback)  # the test decides when the socket has written it


def _hello(work: int, height: int, genesis: bytes) -> wire.Hello:
    return wire.Hello(
        proto=wire.PROTOCOL_VERSION,
        network=DEVNET.network_id,
        genesis=genesis,
        node=bytes(32),
        best=genesis,
        height=height,
        work=work.to_bytes(32, "little"),
        port=0,
        agent="test",
        time=0,
    )


def _exchange(seeds_tried: list[bool]) -> tuple[Exchange, Links, Node]:
    kit = Node(DEVNET)  # its clock is long past genesis: P10 (b) does not end the sync
    service = NodeService(DEVNET, kit.chain, Mempool(DEVNET), lambda: kit.now_ms)
    links = Links(["a"])
    exchange = Exchange(service, links, lambda: seeds_tried[0], random.Random(1), NoVerifier())
    return exchange, links, kit


def _synced(exchange: Exchange) -> bool:
    """P10's flag, read through a call (mypy would keep an asserted attribute narrowed)."""
    return exchange.sync.synced


def _getdata_txs(links: Links) -> list[bytes]:
    return [
        item
        for _, msg in links.sent
        if isinstance(msg, wire.GetData)
        for kind, item in msg.items
        if kind == TX
    ]


def test_announced_txs_wait_for_the_end_of_initial_sync_and_score_nobody() -> None:
    """P10: relayed ``inv`` are ignored until initial sync ends. A node that fetched them found
    every tx missing its inputs (its ledger is not there yet) and, past 100 a minute, scored the
    honest announcer a point each (seen with late-joining nodes in the simulator)."""
    seeds_tried = [False]
    exchange, links, kit = _exchange(seeds_tried)
    genesis = kit.chain.genesis_id
    exchange.peer_ready("a", _hello(10**30, 500, genesis), kit.now_ms)
    assert not exchange.sync.synced  # the peer claims far more work
    assert any(isinstance(m, wire.GetMilestones) for _, m in links.sent)  # P5
    txids = [bytes(range(i, i + 32)) for i in range(150)]
    exchange.receive("a", wire.Inv(tuple((TX, t) for t in txids)), kit.now_ms)
    assert _getdata_txs(links) == []
    assert links.penalties == []
    for _ in range(3):  # nothing was queued to be fetched later either
        exchange.tick(kit.now_ms, sweep_orphans=False)
    assert _getdata_txs(links) == []
    # the peer's claim turns out unbacked (no headers), sync ends (P9 v2, P10 a)
    seeds_tried[0] = True
    exchange.receive("a", wire.Milestones(()), kit.now_ms)
    assert _synced(exchange)
    # a real tx announced now is fetched and admitted
    tx = transfer([(genesis, 0)], [(10**9, key(5)[1])], DEVNET)
    exchange.receive("a", wire.Inv(((TX, tx.txid),)), kit.now_ms)
    assert _getdata_txs(links) == [tx.txid]
    exchange.receive("a", wire.TxMsg(tx.raw), kit.now_ms)
    assert tx.txid in exchange.service.mempool
    assert links.penalties == []


def test_sync_requests_are_answered_from_the_chain() -> None:
    exchange, links, kit = _exchange([True])
    chain = kit.chain
    first = kit.register(key(1)[1], ms=True)
    blocks = [first, *kit.milestones(first, 2)]  # mined and accepted: heights 1-3
    exchange.peer_ready("a", _hello(0, 0, chain.genesis_id), kit.now_ms)
    links.sent.clear()
    exchange.receive("a", wire.GetMilestones((chain.genesis_id,)), kit.now_ms)
    exchange.receive("a", wire.GetLevelSet(blocks[-1].id, 0), kit.now_ms)
    exchange.receive("a", wire.GetLevelSet(bytes(32), 0), kit.now_ms)
    milestones, level_set, not_found = (m for _, m in links.sent)
    assert isinstance(milestones, wire.Milestones)
    assert list(milestones.headers) == [b.header_bytes for b in blocks]
    assert isinstance(level_set, wire.LevelSet)
    assert level_set.ids[-1] == blocks[-1].id
    assert not_found == wire.NotFound(((int(wire.InvKind.LEVEL_SET), bytes(32)),))


def test_a_third_getdata_while_two_answers_are_unwritten_costs_a_point() -> None:
    """§11.7: at most two getdata served at a time per peer; the cap lives in the exchange, so
    the daemon and the simulator's nodes apply the same one (p2p/dispatch.py)."""
    exchange, links, kit = _exchange([True])
    exchange.peer_ready("a", _hello(0, 0, kit.chain.genesis_id), kit.now_ms)
    ask = wire.GetData(((BLOCK, kit.chain.genesis_id),))
    for _ in range(2):
        exchange.receive("a", ask, kit.now_ms)
    assert links.penalties == []
    exchange.receive("a", ask, kit.now_ms)
    assert links.penalties == [("a", scores.SCORE_RATE, "getdata beyond 2 outstanding")]
    served = sum(1 for _, m in links.sent if isinstance(m, wire.BlockMsg))
    assert served == 2
    links.unwritten.pop(0)()  # one answer reached the socket: the next getdata is served
    exchange.receive("a", ask, kit.now_ms)
    assert sum(1 for _, m in links.sent if isinstance(m, wire.BlockMsg)) == served + 1
    assert len(links.penalties) == 1


def test_a_message_without_a_handler_here_costs_a_point() -> None:
    """Connection messages have no handler in an exchange without a connection shell (the
    simulator's nodes); they are unexpected, never silently run."""
    exchange, links, kit = _exchange([True])
    exchange.peer_ready("a", _hello(0, 0, kit.chain.genesis_id), kit.now_ms)
    exchange.receive("a", wire.Ping(7), kit.now_ms)
    assert links.penalties == [("a", scores.SCORE_UNSOLICITED, "unexpected ping")]


def test_blocks_of_a_downloaded_level_set_are_not_relayed_and_relayed_blocks_are() -> None:
    """P9: level sets applied by sync are not relayed; their events say so (``from_sync``), so
    no flag has to mute the exchange while it hands them to the core. A block taken any other
    way is relayed (P11)."""
    source = Node(DEVNET)
    first = source.register(key(1)[1], ms=True)
    synced = [first, *source.milestones(first, 1)]
    relayed = source.milestones(synced[-1], 1)[0]
    exchange, links, kit = _exchange([True])
    exchange.peer_ready("a", _hello(0, 0, kit.chain.genesis_id), kit.now_ms)
    events: list[NodeEvent] = []
    exchange.service.subscribe(events.append)
    exchange.service.subscribe(exchange.on_event)
    links.sent.clear()
    with exchange.service.sync_batch():
        for block in synced:
            exchange.service.submit_level_set([block.raw], "a")
    blocks = [e for e in events if e.kind == "block"]
    assert [e.block_id for e in blocks] == [b.id for b in synced]
    assert all(e.from_sync for e in blocks)
    assert links.sent == []
    exchange.service.submit_block(relayed.raw, "local")
    assert not events[-1].from_sync
    sent = [m for _, m in links.sent]
    assert sent
    assert all(isinstance(m, wire.BlockMsg | wire.Inv) for m in sent)
