"""SimNode: a real ``dagchain.Chain`` and ``Mempool`` on an in-memory store, fed by the network.

Blocks and transactions arrive as their real canonical bytes and go through the real acceptance
procedure (``Chain.on_block``) and mempool admission (``Chain.check_transaction`` then
``Mempool.add``): every rule, signatures included, runs on every node. Expected verdicts
(invalid, orphan, not yet valid) are caught here, at the delivery boundary, and counted.

Relay policy (``network.relay``): with ``"node"`` (the default) each node runs the node's own
relay, :class:`p2p.relay.Relay` (PROTOCOL.md P11/P13: block push to ``relay_push`` peers and
``inv`` to the rest, txs announced by ``inv`` in 250 ms batches, ``getdata`` from one announcer at
a time, orphan parents asked of the supplier), through a :class:`RelayPort`, the simulator's shell
around it: it carries the relay's :mod:`p2p.wire` messages over the simulated network, sized as
their real encoded frames, and runs its 250 ms timer. With ``"push-all"`` (the older model) a
node pushes each block and tx it accepts to every neighbour but the sender, and ``Hub.send_*``
suppresses a push to a neighbour that holds the item or has a copy in flight that lands sooner.
"""

import math
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import NamedTuple, Protocol, final

from dagchain.caches import DecodeCache, LevelSetCache, SharedResults, SignatureCache
from dagchain.chain import BlockOutcome, BlockStatus, Chain
from dagchain.crypto import hash32
from dagchain.errors import InvalidTransaction
from dagchain.mempool import Mempool, MempoolError, SharedSpenders
from dagchain.params import ConsensusParams
from dagchain.types import BlockId, TxId
from p2p import scores, wire
from p2p.dispatch import Dispatcher, Sends
from p2p.exchange import MAINTENANCE_MS
from p2p.intake import take_block, take_tx
from p2p.relay import Inventory, Relay, RelaySettings, Send
from p2p.service import NodeService
from p2p.serving import serve_levelset, serve_milestones, serve_pending
from simulator.engine import Engine
from simulator.knowledge import Knowledge, node_ids
from simulator.network import Network
from simulator.rng import RngStreams
from simulator.store import RowInterner, SimStore


class FrameReceiver(Protocol):
    """A node that takes the relay's messages from a neighbour."""

    def on_frames(self, src: int, msgs: tuple[wire.Message, ...]) -> None:
        """Messages sent together by ``src`` arrive."""

    def claim(self) -> tuple[bytes, int, int]:
        """(best milestone, height, chainwork) its ``hello`` would claim."""
        ...

    def connect(self, peer: int) -> None:
        """Late node ``peer`` joined: the link to it is up (P4 done)."""
        ...

    def disconnect(self, peer: int) -> None:
        """Late node ``peer`` went down: the link to it is closed."""
        ...


class Hub(Protocol):
    """What a node needs from the simulation: the clock, relay, and event sinks."""

    known_blocks: Knowledge
    known_txs: Knowledge
    engine: Engine
    network: Network
    streams: RngStreams

    @property
    def offline(self) -> AbstractSet[int]:
        """Nodes not yet joined (``network.late_nodes``): no link to them is up."""
        ...

    @property
    def nodes(self) -> Sequence[FrameReceiver]: ...

    @property
    def block_holders(self) -> Sequence["Callable[[bytes], bool] | None"]:
        """Per node, its relay inventory's ``has_block`` where an ``inv`` of one block it holds
        is a no-op on arrival (:func:`send_frames` then charges the link and sends no event);
        None for a node whose arrival must always run (late nodes, or the switch is off)."""
        ...

    @property
    def block_receivers(
        self,
    ) -> "list[Callable[[int, wire.Message, bytes, bool], None] | None]":
        """Per node with a ``block_holders`` entry, once it has a relay port: the port's
        ``on_block_frame``, where :func:`send_frames` delivers a block message (it does nothing
        if the message would do nothing); None otherwise."""
        ...

    @property
    def frame_receivers(self) -> "list[Callable[[int, tuple[wire.Message, ...]], None] | None]":
        """Per node, where :func:`send_frames` delivers its messages once the node has a relay
        port: the port's own ``on_frames`` (the node's ``on_frames`` only forwards to it); None
        until then (the node's ``on_frames`` makes the port)."""
        ...

    @property
    def now_ms(self) -> float: ...

    def send_block(self, src: int, block_id: BlockId, raw: bytes, exclude: int) -> None: ...

    def send_tx(self, src: int, txid: TxId, raw: bytes, exclude: int) -> None: ...

    def retry_block(
        self, node: int, block_id: BlockId, raw: bytes, src: int, at_ms: float
    ) -> None: ...

    def on_accepted(self, node: "NodeRef", outcome: BlockOutcome) -> None: ...

    def on_relayed(self, node: int, accepted: tuple[BlockId, ...]) -> None:
        """A relay-only node accepted these blocks (in order; no level set, no reorg)."""


class NodeRef(Protocol):
    """What the hub reads of a node that accepted blocks (a SimNode or a RelayNode)."""

    @property
    def index(self) -> int: ...


class Caches(NamedTuple):
    """What the full nodes of one run share (``engine.share_results``)."""

    signatures: SignatureCache | None
    """Verified txids (None: each node keeps its own)."""
    decoder: DecodeCache
    """Decoded blocks and txs by their bytes (always shared: decoding is not a verdict)."""
    level_sets: LevelSetCache | None
    """Evaluated level sets (None: each node evaluates its own)."""
    shared: SharedResults | None
    """Tx and block verdicts and a milestone's ledger rows (None: each node computes its own)."""
    spenders: SharedSpenders | None = None
    """The pools' outpoint -> spender index (None: each pool keeps its own dict)."""


def full_node_chain(
    params: ConsensusParams, caches: Caches | None, rows: RowInterner | None
) -> Chain:
    """A simulated full node's own ``Chain`` on an in-memory store.

    Every node runs every block rule that depends on it and applies every level set to its own
    state; the shared caches only skip re-verifying a signature (a txid commits to its
    signatures), re-decoding identical bytes, re-evaluating a level set another node evaluated
    (a pure function of the milestone's past), and re-computing a verdict or a milestone's rows
    another node computed from the same inputs (``SharedResults``). ``rows`` lets the nodes'
    stores share equal rows.
    """
    if caches is None:
        return Chain(params, SimStore(rows))
    return Chain(
        params,
        SimStore(rows),
        signature_cache=caches.signatures,
        decode_cache=caches.decoder,
        level_set_cache=caches.level_sets,
        shared_results=caches.shared,
    )


@final
class SimNode:
    """One simulated full node (index ``index``)."""

    __slots__ = (
        "_at",
        "_bit",
        "_limiter",
        "_port",
        "_unaccepted",
        "chain",
        "hub",
        "index",
        "known_blocks",
        "known_txs",
        "mempool",
        "orphaned",
        "params",
        "rejected_blocks",
        "rejected_txs",
        "root",
        "service",
    )

    def __init__(
        self,
        index: int,
        params: ConsensusParams,
        hub: Hub,
        caches: Caches | None = None,
        rows: RowInterner | None = None,
    ) -> None:
        """``rows``: the interner that lets the nodes' stores share equal rows (one object per
        distinct key and value: the nodes of one best chain write the same rows)."""
        self.index = node_ids(index + 1)[index]
        self._at, self._bit = index >> 3, 1 << (index & 7)
        """This node's byte and bit in a :class:`Knowledge` bitmap."""
        self.params = params
        self.hub = hub
        self.chain = full_node_chain(params, caches, rows)
        self.mempool = Mempool(params, spenders=caches.spenders if caches is not None else None)
        decoder = caches.decoder if caches is not None else None
        self.service = NodeService(
            params,
            self.chain,
            self.mempool,
            self.now,
            decoder.decode_tx if decoder else None,
            _SeenTxs(hub.known_txs, self.index),
        )
        """The daemon's chain owner: its block intake and its §7.5 admission (p2p/intake.py)."""
        self._limiter = scores.MissingInputLimiter()
        """§11.7's missing-input count (one for all senders: the simulator scores no one)."""
        self.known_blocks = hub.known_blocks
        """Shared with every node: which node knows which block."""
        self.known_txs = hub.known_txs
        self.root: BlockId | None = None
        """This node's own peer chain, once its registration block is accepted."""
        self.rejected_blocks = 0
        self.rejected_txs = 0
        self.orphaned = 0
        self._unaccepted: set[bytes] = set()
        """Blocks delivered here (known in ``known_blocks``) but not accepted: orphans, the
        rejected. ``holds_block`` = known here and not in it, without a store lookup."""
        self._port: RelayPort | None = None

    @property
    def readded_txs(self) -> int:
        """Txs of undone level sets that went back into the pool (§4.4, §7.5 v2)."""
        return self.service.readded_txs

    # ------------------------------------------------------------------ relay (network.relay)
    @property
    def port(self) -> "RelayPort":
        """This node's relay (made on first use: push-all runs never make one)."""
        port = self._port
        if port is None:
            port = self._port = RelayPort(self, self.hub, _FullNodeInventory(self))
            self.hub.frame_receivers[self.index] = port.on_frames
        return port

    def holds_block(self, block_id: bytes) -> bool:
        """True if the block is accepted here (``NodeService.has_block``), answered without the
        store: a block this node never received is not accepted here (every accepted block was
        delivered, and delivery records it in ``known_blocks``), and of those it received, the
        ones not accepted (orphans, rejected) are in ``_unaccepted`` until accepted; an accepted
        block stays accepted. tests/simulator/test_sim_node.py checks every answer of a run
        against ``Chain.has_block``."""
        found = self.known_blocks.holders.get(block_id)  # known_blocks.knows, inlined
        if found is None:
            if block_id not in self.known_blocks.everywhere:
                return False
        elif not found[self._at] & self._bit:
            return False
        return block_id not in self._unaccepted

    def claim(self) -> tuple[bytes, int, int]:
        """What this node's ``hello`` would claim: (best milestone, height, chainwork)."""
        chain = self.chain
        return chain.best_id, chain.best_height, chain.best_snapshot.chainwork

    def connect(self, peer: int) -> None:
        """A late node ``peer`` joined (P4 done): announce our pool to it (P11)."""
        txids = [bytes(t) for t in self.mempool.txids_by_fee_rate()]
        self.port.connect(peer, txids)

    def disconnect(self, peer: int) -> None:
        """Late node ``peer`` went down."""
        self.port.disconnect(peer)

    def answer_getmilestones(self, msg: wire.GetMilestones) -> wire.Message | None:
        """A late node's ``getmilestones`` (P7, P8), answered as the node does."""
        return serve_milestones(self.service, msg)

    def answer_getlevelset(self, msg: wire.GetLevelSet) -> wire.Message | None:
        """A late node's ``getlevelset`` (P9), answered as the node does."""
        return serve_levelset(self.service, msg)

    def answer_getpending(self, msg: wire.GetPending) -> wire.Message | None:
        """A late node's ``getpending`` (P9), answered as the node does."""
        return serve_pending(self.service, msg)

    def on_frames(self, src: int, msgs: tuple[wire.Message, ...]) -> None:
        """Relay messages from neighbour ``src``."""
        self.port.on_frames(src, msgs)

    def relay_block(self, block_id: BlockId, raw: bytes) -> None:
        """Hub: relay an accepted block the node's way (P11)."""
        self.port.on_block_accepted(block_id, raw)

    def relay_tx(self, txid: TxId, raw: bytes, exclude: int) -> None:
        """Hub: announce an admitted tx the node's way (P11; the pool holds its bytes)."""
        self.port.on_tx_accepted(txid, exclude)

    def now(self) -> int:
        """The engine clock as the integer ms the core takes."""
        return int(self.hub.now_ms)

    # ------------------------------------------------------------------ blocks
    def on_deliver_block(self, block_id: BlockId, raw: bytes, src: int) -> None:
        """A block arrives from neighbour ``src`` (or from this node's miner, src = own index):
        the daemon's block intake (p2p/intake.py: P14 for relayed blocks, then the core)."""
        index = self.index
        if not self.known_blocks.learn(index, block_id):
            return
        unaccepted = self._unaccepted
        unaccepted.add(block_id)
        intake = take_block(self.service, peer_key(src), block_id, raw, src != index)
        outcome = intake.outcome
        if outcome is None:
            if intake.not_yet_valid:  # H11: DROP; the simulator offers it again later
                self.known_blocks.forget(index, block_id)
                unaccepted.discard(block_id)
                retry = self.hub.now_ms + self.params.max_future_drift_ms / 2
                self.hub.retry_block(index, block_id, raw, src, retry)
            elif intake.stale:  # P14: DROP, nothing remembered
                self.known_blocks.forget(index, block_id)
                unaccepted.discard(block_id)
            else:
                self.rejected_blocks += 1
            return
        if outcome.status is BlockStatus.ORPHAN:
            self.orphaned += 1
            if self._port is not None and outcome.missing:
                self._port.on_orphan(src, outcome.missing)  # P13: ask the supplier
            return
        if outcome.status is BlockStatus.ACCEPTED:
            self._after_accept(outcome, src)

    def _after_accept(self, outcome: BlockOutcome, src: int) -> None:
        chain = self.chain
        index = self.index
        learn_txs = self.known_txs.learn_each
        unaccepted = self._unaccepted
        for bid in outcome.accepted:
            self.known_blocks.learn(index, bid)
            unaccepted.discard(bid)
            block = chain.get_block(bid)
            if block is None:  # pragma: no cover - accepted blocks are stored
                raise RuntimeError("accepted block missing")
            # §7.5 (v2): carrying a tx does not take it out of the pool
            learn_txs(index, [tx.txid for tx in block.txs])
            self.hub.send_block(self.index, bid, block.raw, src if bid == outcome.block_id else -1)
        self.hub.on_accepted(self, outcome)

    # ------------------------------------------------------------------ transactions
    def offer_tx(self, txid: TxId, raw: bytes) -> str | None:
        """The load wallet submits a tx here, as ``POST /v1/txs`` would (§7.5), and it is
        relayed if taken: None when the node took it (or knew it), else the refusal's code.

        A tx refused for a missing input (V6: this node's best chain does not hold the spent
        output yet) is forgotten again, so the wallet can offer it once more later, as a real
        wallet told 409 ``missing-input`` would.
        """
        known = self.known_txs
        if not known.learn(self.index, txid):
            return None
        try:
            self.service.submit_tx(raw, "api")
        except InvalidTransaction as exc:
            self.rejected_txs += 1
            if exc.rule == "V6" and exc.message == MISSING_INPUT:
                known.forget(self.index, txid)
                return MISSING_INPUT
            return exc.rule
        except MempoolError as exc:
            self.rejected_txs += 1
            return exc.code
        self.hub.send_tx(self.index, txid, raw, self.index)
        return None

    def on_deliver_tx(self, txid: TxId, raw: bytes, src: int) -> None:
        """A relayed tx arrives: the daemon's admission (p2p/intake.py, §7.5), then relay."""
        if not self.known_txs.learn(self.index, txid):
            return
        if take_tx(self.service, peer_key(src), raw, self._limiter, self.now()).admitted:
            self.hub.send_tx(self.index, txid, raw, src)
        else:
            self.rejected_txs += 1


@final
class _SeenTxs:
    """What a full node's ``has_tx`` asks besides its pool (docs/protocol.md decision 42): the
    txs it has seen, from the run's shared :class:`Knowledge` instead of a ``RecentTxs`` per
    node. A superset of the daemon's recent block txs: it holds them all, unbounded (a run's
    txs are few beside the daemon's 50,000), and the txs this node refused, which a redelivery
    drops unexamined here anyway (``SimNode.on_deliver_tx``)."""

    __slots__ = ("_index", "_known")

    def __init__(self, known: Knowledge, index: int) -> None:
        self._known = known
        self._index = index

    def __contains__(self, txid: object) -> bool:
        return isinstance(txid, bytes) and self._known.knows(self._index, txid)


@final
class _FullNodeInventory:
    """A full node's relay inventory: its ``NodeService``, with ``has_block`` asked of
    :meth:`SimNode.holds_block` (the same answer, without a store lookup for a block the node
    never received)."""

    __slots__ = ("get_block_raw", "get_tx_raw", "has_block", "has_tx")

    def __init__(self, node: SimNode) -> None:
        service = node.service
        self.has_block = node.holds_block
        self.has_tx = service.has_tx
        self.get_block_raw = service.get_block_raw
        self.get_tx_raw = service.get_tx_raw


# ---------------------------------------------------------------------------- the node's relay
MISSING_INPUT = "missing-input"
"""V6's message (dagchain/chain.py) for an input not in the node's best-chain UTXO set."""
SIM_RELAY = RelaySettings(forget_relayed=True)
"""The protocol's numbers; ``forget_relayed`` keeps thousands of links' inventories small."""
TICK_MS = float(MAINTENANCE_MS)
"""The relay's maintenance timer (p2p/exchange.py ``MAINTENANCE_MS``)."""
_KEYS: list[str] = []
_TXIDS: dict[bytes, TxId] = {}
"""A tx's bytes -> its id: every node gets the same bytes object, whose hash Python caches,
so a lookup is cheaper than hashing it again (bounded: cleared when full)."""
_TXIDS_MAX = 1 << 16
_BLOCK_IDS: dict[int, tuple[bytes, bytes | None]] = {}
"""``id`` of a ``block`` message's bytes -> (those bytes, ``wire.block_frame_id`` of them): the
receivers of a block get the same bytes object, so its header is hashed once, not once per node.
Keyed by identity (a 512 KB block's content is never hashed) and holding the bytes, so an id is
not reused while its entry lives; bounded (cleared when full)."""
_BLOCK_IDS_MAX = 64
_INDEX: dict[str, int] = {}
"""Key -> node index (``peer_key`` in reverse, without parsing the string)."""


def peer_key(index: int) -> str:
    """A node's key in its neighbours' relays: its index as a string (one shared object)."""
    while len(_KEYS) <= index:
        key = str(len(_KEYS))
        _INDEX[key] = len(_KEYS)
        _KEYS.append(key)
    return _KEYS[index]


def _base_length(cls: type[wire.Message], empty: wire.Message, header: int) -> int:
    """Encoded length of ``cls``'s message minus its one counted field (``header`` bytes
    of an empty array or bin), so that a message's length is this plus that field's."""
    if type(empty) is not cls:  # pragma: no cover - a table typo
        raise TypeError(cls)
    return len(wire.encode_message(empty)) - header


_ITEMS_BASE: dict[type[wire.Message], int] = {
    cls: _base_length(cls, cls(()), 1) for cls in (wire.Inv, wire.GetData, wire.NotFound)
}
"""Inventory messages: [type, {"items": [[kind, id], ...]}] (msgpack)."""
_DATA_BASE: dict[type[wire.Message], int] = {
    cls: _base_length(cls, cls(b""), 2) for cls in (wire.BlockMsg, wire.TxMsg)
}
"""Payload messages: [type, {"data": bin}] (msgpack)."""
_ITEM_BYTES = 36
"""One [kind, 32-byte id] pair: fixarray, fixint kind, bin8 header (2), the id."""


def frame_size(msg: wire.Message) -> int:
    """Bytes on the link: the message's real frame (``wire.encode_message``) plus its
    WebSocket header (2, 4 or 10 bytes).

    For inventory and payload messages, in closed form without encoding: msgpack puts an
    array header of 1, 3 or 5 bytes before ``n`` items of 36 bytes (ids are 32 bytes, kinds
    one byte), and a bin header of 2, 3 or 5 bytes before a payload.
    """
    cls = type(msg)
    base = _ITEMS_BASE.get(cls)
    if base is not None:
        n = len(msg.items)  # type: ignore[attr-defined]
        length = base + (1 if n < 16 else 3 if n < 65_536 else 5) + _ITEM_BYTES * n
    else:
        base = _DATA_BASE.get(cls)
        if base is None:
            return _framed(len(wire.encode_message(msg)))
        n = len(msg.data)  # type: ignore[attr-defined]
        length = base + (2 if n < 256 else 3 if n < 65_536 else 5) + n
    return length + (2 if length < 126 else 4 if length < 65_536 else 10)


def _framed(length: int) -> int:
    return length + (2 if length < 126 else 4 if length < 65_536 else 10)


_BLOCK_KIND = int(wire.InvKind.BLOCK)


def _block_of(msg: wire.Message) -> tuple[bytes | None, bool]:
    """(the block a one-item block ``inv`` or a ``block`` message is of, True for a ``block``);
    (None, False) for any other message."""
    cls = type(msg)
    if cls is wire.Inv:
        items = msg.items  # type: ignore[attr-defined]
        if len(items) == 1 and items[0][0] == _BLOCK_KIND:
            return items[0][1], False
    elif cls is wire.BlockMsg:
        return block_id_of(msg.data), True  # type: ignore[attr-defined]
    return None, False


def _schedule_block_msg(hub: Hub, src: int, dst: int, msg: wire.Message, at: float) -> bool:
    """For node ``dst`` (with a ``block_holders`` entry): if ``msg`` is of one block, make its
    event at the port's ``on_block_frame``, or none for an ``inv`` of a block ``dst`` holds;
    True if so, False if ``msg`` is to be delivered as any other."""
    block, push = _block_of(msg)
    if block is None:
        return False
    if not push and hub.block_holders[dst](block):  # type: ignore[misc]
        return True
    block_receiver = hub.block_receivers[dst]
    if block_receiver is None:
        return False
    hub.engine.schedule_at(at, block_receiver, src, msg, block, push)
    return True


def send_frames(hub: Hub, src: int, sends: Sequence[Send]) -> None:
    """Carry node ``src``'s messages over the simulated network, grouped by neighbour in
    first-send order: one event per neighbour, the sum of their frame sizes on the uplink.

    A message of one block (a one-item block ``inv``, a ``block``) to a node with a
    ``block_holders`` entry: an ``inv`` of a block the receiver holds now makes no event (it
    would do nothing there, :meth:`RelayPort.on_block_frame`; a node never loses an accepted
    block, so held now means held on arrival; the link still carries its bytes); the others
    land at the port's ``on_block_frame``, which asks first whether they would do anything.
    """
    if not sends:
        return
    nodes, network, engine = hub.nodes, hub.network, hub.engine
    now, index, holders, receivers = engine.now_ms, _INDEX, hub.block_holders, hub.frame_receivers
    tally = network.sent_by_type
    if tally is not None:
        for _, msg in sends:
            tally[(src, msg.TYPE)] += 1
    if len(sends) == 1:
        key, msg = sends[0]
        dst = index[key]
        at = network.transmit(src, dst, frame_size(msg), 1, now)
        if holders[dst] is None or not _schedule_block_msg(hub, src, dst, msg, at):
            engine.schedule_at(at, receivers[dst] or nodes[dst].on_frames, src, (msg,))
        return
    if len({key for key, _ in sends}) == len(sends):  # one message per neighbour (a relay)
        transmit, schedule = network.transmit, engine.schedule_at
        block_receivers = hub.block_receivers
        last: wire.Message | None = None
        size, block, push = 0, None, False
        for key, msg in sends:
            dst = index[key]
            if msg is not last:  # a block's pushes share one message, its invs another
                last, size = msg, frame_size(msg)
                block, push = _block_of(msg)
            at = transmit(src, dst, size, 1, now)
            if block is not None:  # _schedule_block_msg, inlined: the relay's hottest loop
                holds = holders[dst]
                if holds is not None:
                    if not push and holds(block):
                        continue
                    block_receiver = block_receivers[dst]
                    if block_receiver is not None:
                        schedule(at, block_receiver, src, msg, block, push)
                        continue
            schedule(at, receivers[dst] or nodes[dst].on_frames, src, (msg,))
        return
    by_peer: dict[str, list[wire.Message]] = {}
    for key, msg in sends:
        found = by_peer.get(key)
        if found is None:
            by_peer[key] = [msg]
        else:
            found.append(msg)
    for key, msgs in by_peer.items():
        dst = index[key]
        if len(msgs) == 1:
            size = frame_size(msgs[0])
        else:
            size = 0
            for msg in msgs:
                size += frame_size(msg)
        at = network.transmit(src, dst, size, len(msgs), now)
        if (
            len(msgs) > 1
            or holders[dst] is None
            or not _schedule_block_msg(hub, src, dst, msgs[0], at)
        ):
            engine.schedule_at(at, nodes[dst].on_frames, src, tuple(msgs))


def block_id_of(raw: bytes) -> bytes | None:
    """``wire.block_frame_id`` of a ``block`` message's bytes, hashed once per bytes object
    (``_BLOCK_IDS``)."""
    found = _BLOCK_IDS.get(id(raw))
    if found is not None and found[0] is raw:
        return found[1]
    if len(_BLOCK_IDS) >= _BLOCK_IDS_MAX:
        _BLOCK_IDS.clear()
    block_id = wire.block_frame_id(raw)
    _BLOCK_IDS[id(raw)] = (raw, block_id)
    return block_id


class RelayOwner(Protocol):
    """The node a port serves: where received blocks and txs go, and its sync answers."""

    @property
    def index(self) -> int: ...

    def on_deliver_block(self, block_id: BlockId, raw: bytes, src: int) -> None: ...

    def on_deliver_tx(self, txid: TxId, raw: bytes, src: int) -> None: ...

    def answer_getmilestones(self, msg: wire.GetMilestones) -> wire.Message | None: ...

    def answer_getlevelset(self, msg: wire.GetLevelSet) -> wire.Message | None: ...

    def answer_getpending(self, msg: wire.GetPending) -> wire.Message | None: ...


@final
class RelayPort:
    """The simulator's shell around one node's :class:`p2p.relay.Relay`.

    What ``node/net/manager.py`` does around the relay, minus sockets: dispatch each message to the
    relay, hand blocks and txs to the node, send what the relay returns (the messages for one
    neighbour from one step travel together: one event, the sum of their frame sizes on the
    uplink), and run the 250 ms maintenance timer (at a per-node phase) while the relay has work.
    Every neighbour is a ready peer from the start, but for a late node (``hub.offline``),
    which becomes one when it joins (:meth:`connect`).
    """

    __slots__ = (
        "_armed",
        "_dispatcher",
        "_holds",
        "_index",
        "_phase",
        "engine",
        "hub",
        "network",
        "on_inv",
        "owner",
        "relay",
    )

    def __init__(self, owner: RelayOwner, hub: Hub, inventory: Inventory) -> None:
        """``inventory``: what the relay offers (a full node's NodeService, a relay-only node
        itself)."""
        self.owner = owner
        self.hub = hub
        self.engine = hub.engine
        self.network = hub.network
        self._index = index = owner.index
        rng = hub.streams.stream(f"relay:{index}")
        self.relay = Relay(inventory, rng, SIM_RELAY)
        offline = hub.offline
        for link in hub.network.neighbours[index]:
            if link.peer not in offline:
                self.relay.add_peer(peer_key(link.peer))
        self._phase = rng.random() * TICK_MS
        self._armed = False
        self.on_inv = self.relay.on_inv
        """The relay's own handler of ``inv`` (P11): nothing in between on the hottest path."""
        self._dispatcher = Dispatcher(self)
        self._holds = hub.block_holders[index]
        """The node's ``has_block`` for :meth:`on_block_frame` (None: no ``block_holders``
        entry, every message goes to :meth:`on_frames`)."""
        if self._holds is not None:
            hub.block_receivers[index] = self.on_block_frame

    def now(self) -> int:
        """The relay's clock: the core's integer ms."""
        return int(self.hub.now_ms)

    @property
    def phase_ms(self) -> float:
        """Where this node's 250 ms tick grid starts (engine ms in [0, 250))."""
        return self._phase

    def on_frames(self, src: int, msgs: tuple[wire.Message, ...]) -> None:
        """Messages from neighbour ``src`` arrive: each through the one dispatch table
        (:mod:`p2p.dispatch`); what the handlers return to send travels together."""
        key, now = _KEYS[src], int(self.hub.now_ms)
        dispatcher = self._dispatcher
        handlers = dispatcher.handlers
        out: list[Send] = []
        for msg in msgs:  # Dispatcher.dispatch, inlined: this is the simulator's hottest loop
            handler = handlers.get(type(msg))
            sends = (
                dispatcher.unexpected(key, msg, now) if handler is None else handler(key, msg, now)
            )
            if sends:
                out += sends
        if out:
            self.send(out)
        if not self._armed:
            self._arm()

    def on_block_frame(self, src: int, msg: wire.Message, block: bytes, push: bool) -> None:
        """A one-item block ``inv`` (``push`` False) or a ``block`` message (True) of ``block``
        from neighbour ``src`` (:func:`send_frames`): :meth:`on_frames`, unless it would do
        nothing here, which one lookup or three tell (issue 23: 55 % of the frames of the
        1,000-full-node shape). It would do nothing if the block is accepted here (a node never
        loses one) and it is an ``inv`` (``Relay.on_inv`` finds the block held and, with
        ``forget_relayed``, records nothing), or a ``block`` that closes no fetch of ours
        (``Relay.awaits_block``; the node finds it known).
        No reply, no timer either way: the port's timer is armed whenever its relay is busy.
        """
        if self._holds(block) and (  # type: ignore[misc]
            not push or not self.relay.awaits_block(_KEYS[src], block)
        ):
            return
        self.on_frames(src, (msg,))

    # ------------------------------------------------------------------ handlers (p2p.dispatch)
    # ``on_inv`` is the relay's own method (bound in __init__): P11, it returns the getdata.
    def on_tx(self, key: str, msg: wire.TxMsg, now: int) -> Sends:
        """A ``tx``: its fetch is done; to the node (admission, then relay)."""
        raw = msg.data
        txid = _TXIDS.get(raw)
        if txid is None:
            if len(_TXIDS) >= _TXIDS_MAX:
                _TXIDS.clear()
            txid = _TXIDS[raw] = TxId(hash32(raw))
        sends = self.relay.on_tx(key, txid, now).sends
        self.owner.on_deliver_tx(txid, raw, _INDEX[key])
        return sends

    def on_getdata(self, key: str, msg: wire.GetData, now: int) -> list[Send]:
        """P11: the items asked for (a reply is on the link at once, so §11.7's cap of two
        outstanding never binds here)."""
        return self.relay.on_getdata(key, msg)

    def on_block(self, key: str, msg: wire.BlockMsg, now: int) -> Sends | None:
        """A ``block``: its fetch is done; to the node."""
        raw = msg.data
        block_id = block_id_of(raw)
        if block_id is None:
            return None
        sends = self.relay.on_block(key, block_id, now).sends
        self.owner.on_deliver_block(BlockId(block_id), raw, _INDEX[key])
        return sends

    def on_notfound(self, key: str, msg: wire.NotFound, now: int) -> Sends:
        """P11: ask the next announcer."""
        return self.relay.on_notfound(key, msg, now).sends

    def on_getmilestones(self, key: str, msg: wire.GetMilestones, now: int) -> list[Send]:
        """A late node catching up asks (P7, P8)."""
        return self._answer(key, self.owner.answer_getmilestones(msg))

    def on_getlevelset(self, key: str, msg: wire.GetLevelSet, now: int) -> list[Send]:
        """A late node catching up asks (P9)."""
        return self._answer(key, self.owner.answer_getlevelset(msg))

    def on_getpending(self, key: str, msg: wire.GetPending, now: int) -> list[Send]:
        """A late node catching up asks (P9)."""
        return self._answer(key, self.owner.answer_getpending(msg))

    @staticmethod
    def _answer(key: str, answer: wire.Message | None) -> list[Send]:
        return [] if answer is None else [(key, answer)]

    def on_unexpected(self, key: str, msg: wire.Message, now: int) -> None:
        """Sync replies and connection messages: an always-on node never asks for them."""

    def connect(self, peer: int, txids: Sequence[bytes]) -> None:
        """Late node ``peer`` joined: a ready peer now; announce ``txids`` (our pool) to it."""
        key = peer_key(peer)
        relay = self.relay
        relay.add_peer(key)
        self.send(relay.announce_pool(key, txids, self.now()))
        if not self._armed:
            self._arm()

    def disconnect(self, peer: int) -> None:
        """Late node ``peer`` went down: what we were fetching from it goes to the next
        announcer (``Relay.remove_peer``)."""
        self.send(self.relay.remove_peer(peer_key(peer), self.now()))
        self._arm()  # a getdata moved to the next announcer has a deadline (P6)

    def on_block_accepted(self, block_id: bytes, raw: bytes) -> None:
        """The node accepted a block: P11 push and inv."""
        self.send(self.relay.on_block_accepted(block_id, raw))

    def on_tx_accepted(self, txid: bytes, exclude: int) -> None:
        """The node admitted a tx: announce it with the next batch (not to ``exclude``)."""
        self.relay.on_tx_accepted(txid, None if exclude < 0 else peer_key(exclude))
        if not self._armed:
            self._arm()

    def on_orphan(self, src: int, missing: Sequence[bytes]) -> None:
        """A block from ``src`` waits for ``missing``: ask ``src`` (P13)."""
        if src != self._index:
            self.send(self.relay.on_orphan(peer_key(src), missing, self.now()))
            self._arm()

    def send(self, sends: Sequence[Send]) -> None:
        """Carry the relay's messages, grouped by neighbour in first-send order."""
        send_frames(self.hub, self._index, sends)

    def _arm(self) -> None:
        if self._armed or not self.relay.busy:
            return
        self._armed = True
        phase = self._phase
        # the next point of this node's 250 ms grid strictly after now
        now = self.engine.now_ms
        at = phase + (math.floor((now - phase) / TICK_MS) + 1) * TICK_MS
        if at <= now:  # rounding: now was itself a grid point
            at += TICK_MS
        self.engine.schedule_at(at, self._tick)

    def _tick(self) -> None:
        self._armed = False
        done = self.relay.tick(self.now())
        if done.sends:
            self.send(done.sends)
        self._arm()


__all__ = [
    "SIM_RELAY",
    "FrameReceiver",
    "Hub",
    "NodeRef",
    "RelayOwner",
    "RelayPort",
    "SimNode",
    "frame_size",
    "full_node_chain",
    "peer_key",
    "send_frames",
]
