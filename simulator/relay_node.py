"""RelayNode: a relay-only node (opt-in, ``network.full_nodes``), for networks of 10,000 nodes.

A simulated full node (``SimNode``) runs the whole core; its memory and CPU grow with the chain, so
10,000 of them do not fit one machine. A scenario may therefore make only the first
``network.full_nodes`` nodes (the observer and every miner among them) full nodes and let the
others relay without validating. Timing is the same for both kinds: the network model's per-hop
``processing_ms`` is a constant, not the CPU a node spends, so a relay-only node forwards a block
exactly when a full node would, provided the block is valid.

What a relay-only node does:

- a block is decoded (the shared decode cache) and accepted once all its links are accepted here;
  until then it waits (as in the core's orphan pool), and is released when its last missing
  parent is accepted; each accepted block is pushed to the neighbours, as ``SimNode`` does;
- a tx is passed on at once, and the txs of an accepted block are marked known;
- with ``network.relay = "node"`` it relays through the node's own relay (:class:`p2p.relay.Relay`
  in a :class:`simulator.sim_node.RelayPort`): accepted blocks are pushed to ``relay_push`` peers
  and announced to the rest, txs announced in 250 ms ``inv`` batches, ``getdata`` answered from
  what it accepted, and a waiting block's missing link is asked of its supplier; with
  ``"push-all"`` it pushes each item to every neighbour, as before.

A late node (``network.late_nodes``) never syncs from it: its ``hello`` claims genesis, and a
sync request gets the answers of a node that has nothing past genesis.

What it does not do: check any rule (PoW, links, punctuality, signatures, ledger) or keep a
mempool. In an honest run every mined block is valid, so block propagation is the same as with
full nodes; a tx a full node would drop (it spends an output already spent in its best chain,
or conflicts with its mempool) is still relayed, which only adds messages. Use full nodes for
anything that depends on a node judging blocks or txs, and say so with the results
(``metrics.json`` then carries ``relay_only_nodes``).
"""

from collections.abc import Callable
from typing import final

from dagchain.caches import DecodeCache
from dagchain.errors import EncodingError
from dagchain.types import BlockId, TxId
from p2p import wire
from simulator.knowledge import Knowledge, node_ids
from simulator.sim_node import Hub, RelayPort


@final
class RelayNode:
    """One relay-only node (index ``index``); see the module doc."""

    __slots__ = (
        "_accepted",
        "_at",
        "_bit",
        "_genesis",
        "_port",
        "_waiting",
        "decoder",
        "has_tx",
        "hub",
        "index",
        "known_blocks",
        "known_txs",
        "orphaned",
        "rejected_blocks",
        "rejected_txs",
        "root",
    )

    def __init__(
        self,
        index: int,
        hub: Hub,
        decoder: DecodeCache,
        accepted: Knowledge,
        genesis_id: BlockId,
    ) -> None:
        self.index = node_ids(index + 1)[index]
        self._at, self._bit = index >> 3, 1 << (index & 7)
        """This node's byte and bit in a :class:`Knowledge` bitmap."""
        self.hub = hub
        self.decoder = decoder
        self.known_blocks = hub.known_blocks
        self.known_txs = hub.known_txs
        self.has_tx: Callable[[bytes], bool] = self.known_txs.knows_at(self.index)
        """Relay inventory: whether this node has seen a tx (it keeps no pool); compiled."""
        self._accepted = accepted
        """Shared by the relay-only nodes: which of them accepted which block."""
        self._genesis = genesis_id
        self._waiting: dict[BlockId, list[tuple[BlockId, bytes, int]]] = {}
        """Blocks waiting for a parent, by that parent."""
        self.root: BlockId | None = None
        self.rejected_blocks = 0
        self.rejected_txs = 0
        self.orphaned = 0
        self._port: RelayPort | None = None

    # ------------------------------------------------------------------ relay (network.relay)
    @property
    def port(self) -> RelayPort:
        """This node's relay (made on first use: push-all runs never make one)."""
        port = self._port
        if port is None:
            port = self._port = RelayPort(self, self.hub, self)
            self.hub.frame_receivers[self.index] = port.on_frames
        return port

    def on_frames(self, src: int, msgs: tuple[wire.Message, ...]) -> None:
        """Relay messages from neighbour ``src``."""
        self.port.on_frames(src, msgs)

    def claim(self) -> tuple[bytes, int, int]:
        """What its ``hello`` claims: genesis (it keeps no chain, so it cannot serve a sync)."""
        return self._genesis, 0, 0

    def connect(self, peer: int) -> None:
        """A late node ``peer`` joined: a ready peer now (no pool to announce)."""
        self.port.connect(peer, ())

    def disconnect(self, peer: int) -> None:
        """A late node ``peer`` went down."""
        self.port.disconnect(peer)

    # A sync request (a late node) is answered as by a node holding only genesis, so the round
    # ends at once (P9). No ``getlevelset`` comes: no milestone is listed.
    def answer_getmilestones(self, msg: wire.GetMilestones) -> wire.Message | None:
        """No header after genesis."""
        return wire.Milestones(())

    def answer_getlevelset(self, msg: wire.GetLevelSet) -> wire.Message | None:
        """Never asked (no milestone listed)."""
        return None

    def answer_getpending(self, msg: wire.GetPending) -> wire.Message | None:
        """No pending block."""
        return wire.Pending(())

    def relay_block(self, block_id: BlockId, raw: bytes) -> None:
        """Hub: relay an accepted block the node's way (P11)."""
        self.known_blocks.payload[block_id] = raw
        self.port.on_block_accepted(block_id, raw)

    def relay_tx(self, txid: TxId, raw: bytes, exclude: int) -> None:
        """Hub: announce a tx the node's way (P11)."""
        self.known_txs.payload[txid] = raw
        self.port.on_tx_accepted(txid, exclude)

    def has_block(self, block_id: bytes) -> bool:
        """Relay inventory: a block accepted here."""
        accepted = self._accepted
        found = accepted.holders.get(block_id)  # accepted.knows(self.index, block_id), inlined
        if found is None:
            return block_id in accepted.everywhere
        return bool(found[self._at] & self._bit)

    def get_block_raw(self, block_id: bytes) -> bytes | None:
        """Relay inventory: an accepted block's bytes."""
        if not self._accepted.knows(self.index, block_id):
            return None
        return self.known_blocks.payload.get(block_id)

    def get_tx_raw(self, txid: bytes) -> bytes | None:
        """Relay inventory: a seen tx's bytes."""
        if not self.known_txs.knows(self.index, txid):
            return None
        return self.known_txs.payload.get(txid)

    def _missing(self, raw: bytes) -> BlockId | None:
        """The first link of the block not accepted here (None: all are)."""
        accepted, at, bit, genesis = self._accepted, self._at, self._bit, self._genesis
        holders, everywhere = accepted.holders, accepted.everywhere
        for link in self.decoder.decode(raw).links:
            if link == genesis:
                continue
            found = holders.get(link)  # accepted.knows(index, link), inlined
            if (link not in everywhere) if found is None else not found[at] & bit:
                return link
        return None

    def on_deliver_block(self, block_id: BlockId, raw: bytes, src: int) -> None:
        """A block arrives from neighbour ``src``: accept it (and what waited for it) or wait."""
        known = self.known_blocks
        holders = known.holders.get(block_id)
        if holders is not None and holders[self._at] & self._bit:
            return  # already here (a copy that loses the race is dropped before it lands)
        if not known.learn(self.index, block_id):
            return
        try:
            missing = self._missing(raw)
        except EncodingError:
            self.rejected_blocks += 1
            return
        if missing is not None:
            self.orphaned += 1
            self._waiting.setdefault(missing, []).append((block_id, raw, src))
            if self._port is not None:
                self._port.on_orphan(src, (missing,))  # P13: ask the supplier
            return
        self._accepted.learn(self.index, block_id)
        if block_id not in self._waiting:  # nothing waited for it: the common case
            index, hub = self.index, self.hub
            self.known_txs.learn_each(index, [tx.txid for tx in self.decoder.decode(raw).txs])
            hub.send_block(index, block_id, raw, src)
            hub.on_relayed(index, (block_id,))
            return
        accepted: list[tuple[BlockId, bytes, int]] = [(block_id, raw, src)]
        i = 0
        while i < len(accepted):
            for child in self._waiting.pop(accepted[i][0], ()):
                link = self._missing(child[1])
                if link is None:
                    self._accepted.learn(self.index, child[0])
                    accepted.append(child)
                else:
                    self._waiting.setdefault(link, []).append(child)
            i += 1
        learn_txs, index = self.known_txs.learn_each, self.index
        for bid, block_raw, _ in accepted:
            learn_txs(index, [tx.txid for tx in self.decoder.decode(block_raw).txs])
            self.hub.send_block(index, bid, block_raw, src if bid == block_id else -1)
        ids = tuple(bid for bid, _, _ in accepted)
        self.hub.on_relayed(index, ids)

    def offer_tx(self, txid: TxId, raw: bytes) -> str | None:
        """The load wallet submits a tx here: pushed on unchecked (no ledger to refuse it)."""
        self.on_deliver_tx(txid, raw, self.index)
        return None

    def on_deliver_tx(self, txid: TxId, raw: bytes, src: int) -> None:
        """A tx arrives: push it on unchecked."""
        known = self.known_txs
        holders = known.holders.get(txid)
        if holders is not None and holders[self._at] & self._bit:
            return  # known from a block already (copies that lose the race are dropped)
        if known.learn(self.index, txid):
            self.hub.send_tx(self.index, txid, raw, src)


__all__ = ["RelayNode"]
