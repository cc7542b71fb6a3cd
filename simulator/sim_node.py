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
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Protocol, final

from dagchain.caches import DecodeCache, LevelSetCache, SignatureCache
from dagchain.chain import BlockOutcome, BlockStatus, Chain
from dagchain.crypto import hash32
from dagchain.errors import EncodingError, InvalidBlock, InvalidTransaction, NotYetValid
from dagchain.mempool import Mempool, MempoolError
from dagchain.params import ConsensusParams
from dagchain.pool_policy import follow_reorg
from dagchain.transactions import decode_transaction
from dagchain.types import BlockId, TxId
from p2p import gossip, wire
from p2p.exchange import MAINTENANCE_MS
from p2p.relay import Inventory, Relay, RelaySettings, Send
from p2p.service import NodeService
from p2p.syncsession import serve
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


Caches = tuple[SignatureCache, DecodeCache, LevelSetCache]


def full_node_chain(
    params: ConsensusParams, caches: Caches | None, rows: RowInterner | None
) -> Chain:
    """A simulated full node's own ``Chain`` on an in-memory store.

    Every node runs every block rule and applies every level set to its own state; the shared
    caches only skip re-verifying a signature (a txid commits to its signatures), re-decoding
    identical bytes and re-evaluating a level set another node evaluated (a pure function of the
    milestone's past). ``rows`` lets the nodes' stores share equal rows.
    """
    sig_cache, decode_cache, ls_cache = caches if caches is not None else (None, None, None)
    return Chain(
        params,
        SimStore(rows),
        signature_cache=sig_cache,
        decode_cache=decode_cache,
        level_set_cache=ls_cache,
    )


@final
class SimNode:
    """One simulated full node (index ``index``)."""

    __slots__ = (
        "_port",
        "_service",
        "chain",
        "decoder",
        "hub",
        "index",
        "known_blocks",
        "known_txs",
        "mempool",
        "orphaned",
        "params",
        "readded_txs",
        "rejected_blocks",
        "rejected_txs",
        "root",
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
        self.params = params
        self.hub = hub
        self.decoder = caches[1] if caches is not None else None
        self.chain = full_node_chain(params, caches, rows)
        self.mempool = Mempool(params)
        self.known_blocks = hub.known_blocks
        """Shared with every node: which node knows which block."""
        self.known_txs = hub.known_txs
        self.root: BlockId | None = None
        """This node's own peer chain, once its registration block is accepted."""
        self.rejected_blocks = 0
        self.rejected_txs = 0
        self.orphaned = 0
        self.readded_txs = 0
        """Txs of undone level sets that went back into the pool (§7.5, v2)."""
        self._port: RelayPort | None = None
        self._service: NodeService | None = None

    # ------------------------------------------------------------------ relay (network.relay)
    @property
    def port(self) -> "RelayPort":
        """This node's relay (made on first use: push-all runs never make one)."""
        port = self._port
        if port is None:
            port = self._port = RelayPort(self, self.hub)
        return port

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

    def serve_sync(self, msg: wire.Message) -> wire.Message | None:
        """Answer a late node's ``getmilestones``/``getlevelset``/``getpending`` (P7-P9) as the
        node does (:func:`p2p.syncsession.serve` over a :class:`NodeService` of our chain)."""
        service = self._service
        if service is None:
            service = self._service = NodeService(self.params, self.chain, self.mempool, self.now)
        return serve(service, msg)

    def on_frames(self, src: int, msgs: tuple[wire.Message, ...]) -> None:
        """Relay messages from neighbour ``src``."""
        self.port.on_frames(src, msgs)

    def relay_block(self, block_id: BlockId, raw: bytes) -> None:
        """Hub: relay an accepted block the node's way (P11)."""
        self.port.on_block_accepted(block_id, raw)

    def relay_tx(self, txid: TxId, raw: bytes, exclude: int) -> None:
        """Hub: announce an admitted tx the node's way (P11; the pool holds its bytes)."""
        self.port.on_tx_accepted(txid, exclude)

    def has_block(self, block_id: bytes) -> bool:
        """Relay inventory: an accepted block."""
        return self.chain.has_block(block_id)

    def has_tx(self, txid: bytes) -> bool:
        """Relay inventory: a pool tx (only pool txs are relayed, §11.3)."""
        return txid in self.mempool

    def get_block_raw(self, block_id: bytes) -> bytes | None:
        """Relay inventory: an accepted block's bytes."""
        block = self.chain.get_block(block_id)
        return None if block is None else block.raw

    def get_tx_raw(self, txid: bytes) -> bytes | None:
        """Relay inventory: a pool tx's bytes."""
        entry = self.mempool.get(txid)
        return None if entry is None else entry.tx.raw

    def now(self) -> int:
        """The engine clock as the integer ms the core takes."""
        return int(self.hub.now_ms)

    # ------------------------------------------------------------------ blocks
    def on_deliver_block(self, block_id: BlockId, raw: bytes, src: int) -> None:
        """A block arrives from neighbour ``src`` (or from this node's miner, src = own index)."""
        if not self.known_blocks.learn(self.index, block_id):
            return
        try:
            outcome = self.chain.on_block(raw, self.now(), str(src))
        except NotYetValid:
            self.known_blocks.forget(self.index, block_id)
            retry = self.hub.now_ms + self.params.max_future_drift_ms / 2
            self.hub.retry_block(self.index, block_id, raw, src, retry)
            return
        except InvalidBlock:
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
        learn_tx = self.known_txs.learn
        for bid in outcome.accepted:
            self.known_blocks.learn(index, bid)
            block = chain.get_block(bid)
            if block is None:  # pragma: no cover - accepted blocks are stored
                raise RuntimeError("accepted block missing")
            for tx in block.txs:  # §7.5 (v2): carrying a tx does not take it out of the pool
                learn_tx(index, tx.txid)
            self.hub.send_block(self.index, bid, block.raw, src if bid == outcome.block_id else -1)
        for reorg in outcome.reorgs:  # the node's own pool policy (dagchain.pool_policy)
            self.readded_txs += follow_reorg(chain, self.mempool, reorg, self.now())
        self.hub.on_accepted(self, outcome)

    # ------------------------------------------------------------------ transactions
    def on_deliver_tx(self, txid: TxId, raw: bytes, src: int) -> None:
        """A relayed tx arrives: decode, check against the best chain, admit, relay."""
        if not self.known_txs.learn(self.index, txid):
            return
        try:
            tx = (
                self.decoder.decode_tx(raw)
                if self.decoder
                else decode_transaction(raw, self.params)
            )
            fee = self.chain.check_transaction(tx)
            self.mempool.add(tx, fee, self.now())
        except (EncodingError, InvalidTransaction, MempoolError):
            self.rejected_txs += 1
            return
        self.hub.send_tx(self.index, txid, raw, src)


# ---------------------------------------------------------------------------- the node's relay
SIM_RELAY = RelaySettings(forget_relayed=True)
"""The protocol's numbers; ``forget_relayed`` keeps thousands of links' inventories small."""
TICK_MS = float(MAINTENANCE_MS)
"""The relay's maintenance timer (p2p/exchange.py ``MAINTENANCE_MS``)."""
_KEYS: list[str] = []
_TXIDS: dict[bytes, TxId] = {}
"""A tx's bytes -> its id: every node gets the same bytes object, whose hash Python caches,
so a lookup is cheaper than hashing it again (bounded: cleared when full)."""
_TXIDS_MAX = 1 << 16
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


def send_frames(hub: Hub, src: int, sends: Sequence[Send]) -> None:
    """Carry node ``src``'s messages over the simulated network, grouped by neighbour in
    first-send order: one event per neighbour, the sum of their frame sizes on the uplink."""
    if not sends:
        return
    nodes, network, engine = hub.nodes, hub.network, hub.engine
    now, index = engine.now_ms, _INDEX
    tally = network.sent_by_type
    if tally is not None:
        for _, msg in sends:
            tally[(src, msg.TYPE)] += 1
    if len(sends) == 1:
        key, msg = sends[0]
        dst = index[key]
        at = network.transmit(src, dst, frame_size(msg), 1, now)
        engine.schedule_at(at, nodes[dst].on_frames, src, (msg,))
        return
    if len({key for key, _ in sends}) == len(sends):  # one message per neighbour (tx invs)
        transmit, schedule = network.transmit, engine.schedule_at
        for key, msg in sends:
            dst = index[key]
            at = transmit(src, dst, frame_size(msg), 1, now)
            schedule(at, nodes[dst].on_frames, src, (msg,))
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
        engine.schedule_at(at, nodes[dst].on_frames, src, tuple(msgs))


class RelayOwner(Inventory, Protocol):
    """The node a port serves: its inventory, and where received blocks and txs go."""

    @property
    def index(self) -> int: ...

    def on_deliver_block(self, block_id: BlockId, raw: bytes, src: int) -> None: ...

    def on_deliver_tx(self, txid: TxId, raw: bytes, src: int) -> None: ...

    def serve_sync(self, msg: wire.Message) -> wire.Message | None: ...


SYNC_REQUESTS = (wire.GetMilestones, wire.GetLevelSet, wire.GetPending)
"""The requests a catching-up node sends (P7-P9), answered by ``syncsession.serve``."""


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

    __slots__ = ("_armed", "_index", "_phase", "engine", "hub", "network", "owner", "relay")

    def __init__(self, owner: RelayOwner, hub: Hub) -> None:
        self.owner = owner
        self.hub = hub
        self.engine = hub.engine
        self.network = hub.network
        self._index = index = owner.index
        rng = hub.streams.stream(f"relay:{index}")
        self.relay = Relay(owner, rng, SIM_RELAY)
        offline = hub.offline
        for link in hub.network.neighbours[index]:
            if link.peer not in offline:
                self.relay.add_peer(peer_key(link.peer))
        self._phase = rng.random() * TICK_MS
        self._armed = False

    def now(self) -> int:
        """The relay's clock: the core's integer ms."""
        return int(self.hub.now_ms)

    def on_frames(self, src: int, msgs: tuple[wire.Message, ...]) -> None:
        """Messages from neighbour ``src`` arrive (node/net/manager.py ``_on_<type>``)."""
        relay, owner, key, now = self.relay, self.owner, _KEYS[src], int(self.hub.now_ms)
        out: list[Send] = []
        for msg in msgs:
            kind = type(msg)
            if kind is wire.Inv:
                out += relay.on_inv(key, msg, now)  # type: ignore[arg-type]
            elif kind is wire.TxMsg:
                raw = msg.data  # type: ignore[attr-defined]
                txid = _TXIDS.get(raw)
                if txid is None:
                    if len(_TXIDS) >= _TXIDS_MAX:
                        _TXIDS.clear()
                    txid = _TXIDS[raw] = TxId(hash32(raw))
                out += relay.on_tx(key, txid, now).sends
                owner.on_deliver_tx(txid, raw, src)
            elif kind is wire.GetData:
                out += relay.on_getdata(key, msg)  # type: ignore[arg-type]
            elif kind is wire.BlockMsg:
                raw = msg.data  # type: ignore[attr-defined]
                block_id = gossip.block_frame_id(raw)
                if block_id is None:
                    continue
                out += relay.on_block(key, block_id, now).sends
                owner.on_deliver_block(BlockId(block_id), raw, src)
            elif kind is wire.NotFound:
                out += relay.on_notfound(key, msg, now).sends  # type: ignore[arg-type]
            elif kind in SYNC_REQUESTS:  # from a late node catching up (P7-P9)
                answer = owner.serve_sync(msg)
                if answer is not None:
                    out.append((key, answer))
        if out:
            self.send(out)
        if not self._armed:
            self._arm()

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
    "SYNC_REQUESTS",
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
