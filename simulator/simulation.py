"""One run: build the network of SimNodes, miners and load from a Scenario, run, measure.

A run is a pure function of (scenario, seed): all randomness comes from named streams of the
master seed, all time from the engine. Mining and tx arrivals stop at ``duration_s``; the engine
then drains the messages in flight, so every node ends with every block ("stale" then means lost
for good, not merely late).
"""

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, final

from dagchain.caches import DecodeCache, LevelSetCache, SharedResults, SignatureCache
from dagchain.chain import BlockOutcome, BlockStatus
from dagchain.mempool import SharedSpenders
from dagchain.params import genesis_blk_target
from dagchain.types import BlockId, TxId
from p2p.wire import Message
from simulator import adversary
from simulator.engine import Engine
from simulator.knowledge import Knowledge
from simulator.late_node import LateNode
from simulator.load import TxLoad
from simulator.metrics import DIGITS, Recorder, block_rows, compute_metrics, summary
from simulator.mining import Miner
from simulator.multi_root import MultiRootMiner
from simulator.network import Network
from simulator.network_attack import NetworkDoubleSpend, NetworkSelfishMiner
from simulator.relay_node import RelayNode
from simulator.rng import RngStreams
from simulator.scenario import Scenario
from simulator.sim_node import Caches, NodeRef, SimNode
from simulator.store import RowInterner
from simulator.txflow import LinkModel, TxFlow

FRAME_OVERHEAD_BYTES = 9
"""Per-message framing (type byte and length) on top of the canonical block or tx bytes."""
START_OFFSET_MS = 1_000
"""The run starts one second after the genesis timestamp."""
OBSERVER = 0


@dataclass(frozen=True, slots=True)
class RunResult:
    """Metrics (wall fields included), block rows and run facts for the manifest."""

    metrics: dict[str, Any]
    blocks: list[dict[str, Any]]
    events: int
    wall_s: float


@final
class Simulation:
    """The simulated network for one scenario (also the nodes' ``Hub``)."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        drop_losing_copies: bool = True,
        share_rows: bool = True,
        elide_known_invs: bool = True,
    ) -> None:
        """``drop_losing_copies=False`` runs every copy that loses the race (tests compare);
        ``share_rows=False`` gives every node's store its own key and value objects (the
        memory bench compares); ``elide_known_invs=False`` delivers every block message that would
        do nothing where it lands (an ``inv`` of a block its receiver holds, a ``block`` it holds
        that closes no fetch) through the relay as any other (``sim_node.send_frames``; tests
        compare)."""
        self.scenario = scenario
        self.params = params = scenario.to_params()
        self.streams = RngStreams(scenario.seed)
        self.engine = Engine()
        self._dropped: set[int] = self.engine.dropped if drop_losing_copies else _Discard()
        """Where fan_out drops the copies that lose the race (see ``retry_block``)."""
        self._clock_offset = params.genesis_timestamp_ms + START_OFFSET_MS
        net = scenario.network
        self.network = Network(
            scenario.nodes,
            net.degree,
            net.delay,
            net.bandwidth_mbps,
            net.processing_ms,
            self.streams.stream("topology"),
            net.topology,
        )
        sharing = scenario.engine.share_results
        self.caches = caches = Caches(
            SignatureCache(1_000_000) if sharing else None,
            DecodeCache(params, 16_384),
            LevelSetCache(4_096) if sharing else None,
            SharedResults() if sharing else None,
            SharedSpenders() if sharing else None,
        )
        """``engine.share_results``: what the full nodes compute once per run (sim_node.Caches)."""
        self.known_blocks = Knowledge(scenario.nodes)
        self.known_txs = Knowledge(scenario.nodes)
        self.frame_receivers: list[Callable[[int, tuple[Message, ...]], None] | None] = [
            None
        ] * scenario.nodes
        """Per node, its relay port's ``on_frames`` once it has one (``send_frames``)."""
        full = scenario.full_nodes
        late = scenario.late_nodes
        self.offline: set[int] = set(late) if not scenario.network.late_leave_s else set()
        """Late nodes not joined yet (``network.late_nodes``): no link to them is up."""
        self.rows = RowInterner() if share_rows else None
        """One object per distinct store key and value of the full nodes (simulator/store.py)."""
        self.full_nodes = [SimNode(i, params, self, caches, self.rows) for i in range(late.start)]
        self.late_nodes = [LateNode(i, params, self, caches, self.rows) for i in late]
        """Full nodes that join at ``network.late_join_s`` and catch up (simulator/late_node.py)."""
        self.observer = self.full_nodes[OBSERVER]
        relay_accepted = Knowledge(scenario.nodes - full, full)
        genesis = self.observer.chain.genesis_id
        relay_only = [
            RelayNode(i, self, caches.decoder, relay_accepted, genesis)
            for i in range(full, scenario.nodes)
        ]
        self.nodes: list[SimNode | LateNode | RelayNode] = [
            *self.full_nodes,
            *self.late_nodes,
            *relay_only,
        ]
        self.block_holders: list[Callable[[bytes], bool] | None] = [None] * len(self.nodes)
        """Per node, what ``send_frames`` and the port's ``on_block_frame`` ask of a block
        message before it is an event or handled (None: always delivered)."""
        self.block_receivers: list[Callable[[int, Message, bytes, bool], None] | None] = [
            None
        ] * len(self.nodes)
        """Per node with a ``block_holders`` entry, its port's ``on_block_frame`` once made."""
        if elide_known_invs:
            for node in self.nodes:
                if type(node) is SimNode:
                    self.block_holders[node.index] = node.holds_block
                elif type(node) is RelayNode:
                    self.block_holders[node.index] = node.has_block
        self._node_relay = net.relay == "node"
        """``network.relay``: the nodes run p2p/relay.py (else every item is pushed to all)."""
        self.txflow: TxFlow | None = None
        """``network.tx_relay = "flow"``: txs spread as a computed flow (simulator/txflow.py)."""
        if net.tx_relay == "flow":
            self.txflow = self._tx_flow(full)
        self._mined_ms = scenario.duration_s * 1000.0
        """Simulated ms of mining (less than ``duration_s`` once a network attack is done)."""
        self._inflight_blocks: dict[bytes, dict[int, float]] = {}
        self._inflight_txs: dict[bytes, dict[int, float]] = {}
        self.recorder = Recorder()
        rate_per_ms = scenario.block_rate / 1000.0
        target0 = genesis_blk_target(params)
        self.miners: dict[int, Miner | MultiRootMiner] = {}
        for i, share in enumerate(scenario.honest_shares()):
            self.miners[i] = Miner(
                self.full_nodes[i],
                share,
                rate_per_ms,
                target0,
                self.engine,
                self.streams.stream(f"mining:{i}"),
                self.recorder,
            )
        self.attacker: NetworkDoubleSpend | NetworkSelfishMiner | None = None
        self.multi_root: MultiRootMiner | None = None
        attack = scenario.attack
        if attack.kind == "multi_root":
            node = self.full_nodes[scenario.mining_nodes]
            self.multi_root = MultiRootMiner(
                node,
                attack.share,
                attack.roots,
                rate_per_ms,
                target0,
                self.engine,
                self.streams.stream("adversary"),
                self.recorder,
            )
            self.miners[node.index] = self.multi_root
        elif attack.kind != "none" and attack.model == "network":
            self.attacker = self._network_attacker(rate_per_ms, target0)
        self.load = TxLoad(
            scenario.load.tps,
            scenario.load.tx_bytes,
            [*self.full_nodes, *relay_only],  # a late node is offline at first: no entry
            self.observer,
            params,
            self.engine,
            self.streams.stream("txs"),
            self.recorder,
            fan_out=not scenario.load.prefunded_outputs,
        )

    def _tx_flow(self, full: int) -> TxFlow:
        network = self.network
        model = LinkModel(
            [[link.peer for link in links] for links in network.neighbours],
            network.latency_ms,
            network.upload,
            network.download,
            network.processing_ms,
            self._tick_phase,
            network.upload_free,
        )
        return TxFlow(model, self.engine, self.nodes, full, self.known_txs.learn, network)

    def _tick_phase(self, index: int) -> float:
        """A node's relay tick phase (its RelayPort, made on first use as in the messages)."""
        node = self.nodes[index]
        if isinstance(node, LateNode):  # pragma: no cover - the scenario forbids it
            raise TypeError("network.tx_relay = 'flow' has no late nodes")
        return node.port.phase_ms

    def _network_attacker(
        self, rate_per_ms: float, target0: int
    ) -> NetworkDoubleSpend | NetworkSelfishMiner:
        """The withholding node (simulator/network_attack.py): node ``miners.count``."""
        attack = self.scenario.attack
        node = self.full_nodes[self.scenario.mining_nodes]
        miner = Miner(
            node,
            attack.share,
            rate_per_ms,
            target0,
            self.engine,
            self.streams.stream("adversary"),
            self.recorder,
        )
        self.miners[node.index] = miner
        if attack.kind == "selfish":
            return NetworkSelfishMiner(
                node, self.observer.chain, self._release, attack.share, self.params.punctuality
            )
        return NetworkDoubleSpend(
            node,
            self.observer.chain,
            miner,
            self._release,
            share=attack.share,
            confirmations=attack.confirmations,
            max_trials=attack.trials,
            give_up_deficit=attack.give_up_deficit,
        )

    def _release(self, block_id: BlockId, raw: bytes) -> None:
        """The attacker publishes a withheld block; propagation is timed from now."""
        if self.attacker is None:  # pragma: no cover - only the attacker releases
            return
        record = self.recorder.blocks.get(block_id)
        if record is not None:
            record.sent_ms = self.engine.now_ms
        if self._node_relay:
            self.nodes[self.attacker.index].relay_block(block_id, raw)
            return
        self._send(
            self.attacker.index,
            block_id,
            raw,
            -1,
            self.known_blocks,
            self._inflight_blocks,
            True,
        )

    # ------------------------------------------------------------------ Hub
    @property
    def now_ms(self) -> float:
        """Virtual wall time in ms since the Unix epoch (what the core calls ``now``)."""
        return self.engine.now_ms + self._clock_offset

    def send_block(self, src: int, block_id: BlockId, raw: bytes, exclude: int) -> None:
        # A block a node sends with itself as the sender is one its own miner just solved.
        attacker = self.attacker
        if attacker is not None and src == attacker.index:
            if src == exclude:
                if attacker.withhold(block_id, raw):
                    return
            elif not attacker.relay(block_id):
                return
        if self._node_relay:
            self.nodes[src].relay_block(block_id, raw)
            return
        self._send(src, block_id, raw, exclude, self.known_blocks, self._inflight_blocks, True)

    def send_tx(self, src: int, txid: TxId, raw: bytes, exclude: int) -> None:
        if self.txflow is not None:
            self.txflow.on_accepted(src, txid, raw)
            return
        if self._node_relay:
            self.nodes[src].relay_tx(txid, raw, exclude)
            return
        self._send(src, txid, raw, exclude, self.known_txs, self._inflight_txs, False)

    def _send(
        self,
        src: int,
        key: bytes,
        raw: bytes,
        exclude: int,
        knowledge: Knowledge,
        inflight: dict[bytes, dict[int, float]],
        is_block: bool,
    ) -> None:
        known = knowledge.holders.get(key)
        if known is None and key in knowledge.everywhere:
            return
        pending = inflight.get(key)
        if pending is None:
            pending = inflight[key] = {}
        size = len(raw) + FRAME_OVERHEAD_BYTES
        sends = self.network.fan_out(
            src, size, self.engine.now_ms, exclude, known, pending, key, raw, self._dropped
        )
        if sends:
            self.engine.schedule_each(self._deliver_block if is_block else self._deliver_tx, sends)
        elif not pending:
            del inflight[key]

    def _deliver_block(self, peer: int, key: BlockId, raw: bytes, src: int) -> None:
        pending = self._inflight_blocks.get(key)
        if pending is not None:
            pending.pop(peer, None)
            if not pending:
                del self._inflight_blocks[key]
        self.nodes[peer].on_deliver_block(key, raw, src)

    def _deliver_tx(self, peer: int, key: TxId, raw: bytes, src: int) -> None:
        pending = self._inflight_txs.get(key)
        if pending is not None:
            pending.pop(peer, None)
            if not pending:
                del self._inflight_txs[key]
        self.nodes[peer].on_deliver_tx(key, raw, src)

    def retry_block(self, node: int, block_id: BlockId, raw: bytes, src: int, at_ms: float) -> None:
        # The node has just forgotten the block (not yet valid), the only way a node unlearns an
        # item. A copy of it to this node that was dropped for losing the race was dropped
        # because the node would know the block when it landed; now it may not, so those copies
        # run after all, exactly as they did before dropping existed. (No honest run gets here:
        # a block's timestamp is never ahead of the clock of the node that mined it.)
        deliver = self._deliver_block
        self.engine.revive(
            lambda event: event[2] == deliver and event[3][0] == node and event[3][1] == block_id
        )
        at = max(self.engine.now_ms, at_ms - self._clock_offset)
        self.engine.schedule_at(at, self.nodes[node].on_deliver_block, block_id, raw, src)

    def on_accepted(self, node: NodeRef, outcome: BlockOutcome) -> None:
        now = self.engine.now_ms
        self.recorder.on_accepted(node.index, outcome.accepted, now)
        if outcome.reorgs:
            if node.index == OBSERVER:
                for reorg in outcome.reorgs:
                    for delta in reorg.applied:
                        self.recorder.on_level_set(self.observer.chain, delta, now)
                        self.load.on_level_set(delta)
            miner = self.miners.get(node.index)
            if miner is not None:
                miner.on_head_change()
        if self.attacker is not None:
            self.attacker.on_accepted(node.index, outcome)

    def on_relayed(self, node: int, accepted: tuple[BlockId, ...]) -> None:
        """``on_accepted`` for a relay-only node, without building a ``BlockOutcome``.

        A relay-only node has no chain, so no level set and no reorg: only the propagation
        delays are recorded (and a network attacker, which watches only full nodes, is told).
        """
        self.recorder.on_accepted(node, accepted, self.engine.now_ms)
        if self.attacker is not None:
            outcome = BlockOutcome(BlockStatus.ACCEPTED, accepted[0], accepted=accepted)
            self.attacker.on_accepted(node, outcome)

    # ------------------------------------------------------------------ running
    def start(self) -> None:
        """Register the miners (``miners.warm_start``), start them and the load, and schedule
        the late nodes: what :meth:`run` does before the clock runs (an experiment that
        watches a run without its drain calls this and then ``engine.run``)."""
        if self.scenario.miners.warm_start:
            for index in sorted(self.miners):
                self.miners[index].register()
        for miner in self.miners.values():
            miner.start()
        self.load.start()
        net = self.scenario.network
        if self.late_nodes:
            if net.late_leave_s:  # online from the start, down from late_leave_s
                self.engine.schedule_at(0.0, self._join_late, False)
                self.engine.schedule_at(net.late_leave_s * 1000.0, self._leave_late)
            self.engine.schedule_at(net.late_join_s * 1000.0, self._join_late, True)

    def run(self, progress: Callable[[float], None] | None = None) -> RunResult:
        """Mine and offer txs for ``duration_s``, drain the network, compute the metrics."""
        started = time.perf_counter()
        self.start()
        duration_ms = self.scenario.duration_s * 1000.0
        with _rare_gc():
            if self.attacker is None:
                self.engine.run(until_ms=duration_ms, progress=progress)
            else:
                self._run_attack(duration_ms, progress)
            for miner in self.miners.values():
                miner.stop()
            if self.attacker is not None:
                self.attacker.finish()
            self.load.stopped = True
            self.engine.run(progress=progress)
        metrics = self._metrics()
        attacker = self.attacker
        if isinstance(attacker, NetworkSelfishMiner):
            index = attacker.index
            mined = {
                b for b, r in self.recorder.blocks.items() if r.miner == index and r.is_milestone
            }
            attack = attacker.metrics(mined)
            attack["attacker_revenue_share"] = metrics["revenue_share"].get("attacker", 0.0)
        elif attacker is not None:
            attack = attacker.metrics()
        elif self.multi_root is not None:
            attack = self.multi_root.metrics()
            attack["attacker_revenue_share"] = metrics["revenue_share"].get("attacker", 0.0)
        else:
            attack = adversary.run_attack(self.scenario, self.params, self.streams)
        if attacker is not None:
            attack["simulated_s"] = round(self._mined_ms / 1000.0, DIGITS)
        metrics.update(attack)
        if attack.get("attack_model") == "milestone-race" and "attacker_revenue_share" in attack:
            a = attack["attacker_revenue_share"]
            revenue = {k: round(v * (1 - a), 6) for k, v in metrics["revenue_share"].items()}
            revenue["attacker"] = a
            metrics["revenue_share"] = dict(sorted(revenue.items()))
        wall = time.perf_counter() - started
        events = self.engine.events
        metrics["events"] = events
        metrics["wall_s"] = round(wall, 3)
        metrics["events_per_s"] = round(events / wall, 1) if wall > 0 else 0.0
        rows = block_rows(self.recorder, self.observer.chain, len(self.nodes))
        return RunResult(metrics, rows, events, wall)

    def _join_late(self, measured: bool) -> None:
        """The late nodes come online (``measured``: at ``network.late_join_s``, the join
        ``late_join`` reports) and start their sync."""
        height = self.observer.chain.best_height
        for node in self.late_nodes:
            self.offline.discard(node.index)
            node.target_height = height if measured else None
            if measured:
                node.synced_blocks = node.relayed_blocks = 0
            node.join()

    def _leave_late(self) -> None:
        """``network.late_leave_s``: the late nodes go down."""
        for node in self.late_nodes:
            self.offline.add(node.index)
            node.leave()

    def _late_metrics(self) -> dict[str, Any]:
        """``late_join`` of metrics.json: how the late nodes caught up."""
        best = self.observer.chain.best_id
        join_ms = self.scenario.network.late_join_s * 1000.0
        late = self.late_nodes
        synced = [(n.synced_ms - join_ms) / 1000.0 for n in late if n.synced_ms is not None]
        caught = [(n.caught_up_ms - join_ms) / 1000.0 for n in late if n.caught_up_ms is not None]
        return {
            "nodes": len(late),
            "join_s": self.scenario.network.late_join_s,
            "leave_s": self.scenario.network.late_leave_s,
            "height_at_join": late[0].target_height,
            "caught_up": len(caught),
            "catch_up_s": summary(caught, (0.5, 1.0)),
            "synced": len(synced),
            "sync_s": summary(synced, (0.5, 1.0)),
            "at_observer_best": sum(1 for n in self.late_nodes if n.chain.best_id == best),
            "blocks_from_sync": sum(n.synced_blocks for n in self.late_nodes),
            "blocks_from_relay": sum(n.relayed_blocks for n in self.late_nodes),
            "penalty_points": sum(sum(n.penalties.values()) for n in self.late_nodes),
            "sync_rounds_unbacked": sum(n.exchange.sync.unbacked_rounds for n in self.late_nodes),
        }

    def _run_attack(
        self, duration_ms: float, progress: Callable[[float], None] | None = None
    ) -> None:
        """Mine until ``duration_ms`` or until the network attacker has run all its trials.

        The engine runs in slices of ``ATTACK_SLICE_MS``; running to t and then on is the same
        event sequence as one run, so only the stopping time differs.
        """
        attacker = self.attacker
        until = 0.0
        while until < duration_ms and attacker is not None and not attacker.done:
            until = min(duration_ms, until + ATTACK_SLICE_MS)
            self.engine.run(until_ms=until, progress=progress)
        self._mined_ms = until

    def _simulated_s(self) -> float:
        """Seconds of mining: ``duration_s`` exactly, unless a network attack ended the run."""
        if self.attacker is None:
            return self.scenario.duration_s
        return self._mined_ms / 1000.0

    def _metrics(self) -> dict[str, Any]:
        roots: dict[bytes, str] = {
            n.root: f"miner_{n.index}" for n in self.nodes if n.root is not None
        }
        if self.attacker is not None and self.attacker.node.root is not None:
            roots[self.attacker.node.root] = "attacker"
        if self.multi_root is not None:
            for root in self.multi_root.roots:
                roots[root] = "attacker"
        pooled: set[bytes] = set()
        full: list[SimNode | LateNode] = [*self.full_nodes, *self.late_nodes]
        for node in full:
            pooled.update(node.mempool.txids_by_fee_rate())
            # held for a parent a reorganisation undid (decision 37): the node answers "mempool"
            pooled.update(node.service.waiting.txids())
        known = self.known_txs

        metrics = compute_metrics(
            self.recorder, self.observer.chain, self._simulated_s(), roots, pooled, known.count
        )
        metrics["txs_starved"] = self.load.starved
        metrics["txs_reoffered"] = self.load.reoffered
        metrics["blocks_rejected"] = sum(n.rejected_blocks for n in self.nodes)
        if self.txflow is not None:
            self.txflow.settle()  # a search still running: its messages so far
        metrics["messages"] = self.network.messages
        metrics["bytes_sent"] = self.network.bytes_sent
        relay_only = len(self.nodes) - len(self.full_nodes) - len(self.late_nodes)
        if relay_only:  # absent when every node is full: older outputs keep their bytes
            metrics["relay_only_nodes"] = relay_only
        if self.late_nodes:
            metrics["late_join"] = self._late_metrics()
        return metrics


class _Discard(set[int]):
    """A drop sink that keeps nothing: losing copies stay queued and run (as no-ops)."""

    def add(self, element: int) -> None:
        """Keep nothing."""


ATTACK_SLICE_MS = 10_000.0
"""With a network attacker the run checks every 10 simulated s whether its trials are done."""
GC_THRESHOLDS = (50_000, 20, 1_000)
"""Cyclic-GC thresholds while the engine runs (CPython's default is 700, 10, 10)."""


@contextmanager
def _rare_gc() -> Iterator[None]:
    """Run the engine with the network frozen out of the cyclic GC and rarer collections.

    A run allocates millions of short-lived objects over a heap of thousands of Chains; with the
    default thresholds the collector scanned that heap about 2,400 times in a 1,000-node, 30-second
    run (17 % of its CPU). Freezing the objects built so far and collecting young objects every
    50,000 allocations instead of 700 cut that to 3 %, with the same peak RSS (the run makes
    little cyclic garbage). Results cannot change: no simulator or core object has a finalizer
    or weak-reference callback. The thresholds are restored afterwards.
    """
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


WALL_FIELDS = ("wall_s", "events_per_s")
"""metrics.json fields that depend on the machine, not on (scenario, seed)."""


__all__ = ["OBSERVER", "WALL_FIELDS", "RunResult", "Simulation"]
