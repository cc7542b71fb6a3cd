"""Transaction relay as a computed flow (``network.tx_relay = "flow"``), beside the messages.

With ``network.tx_relay = "messages"`` (the default) every tx travels as the node relay's real
``inv``/``getdata``/``tx`` messages (p2p/relay.py in a :class:`simulator.sim_node.RelayPort`).
With ``"flow"`` a tx's spread is computed instead: the earliest time it reaches every node under
the same policy (PROTOCOL.md P11 as p2p/relay.py runs it), and only full nodes get an event:

- a node that takes a tx in at time ``a`` announces it at the next point of its own 250 ms tick
  grid strictly after ``a`` (its ``RelayPort`` phase): an ``inv`` to every neighbour but the one
  it got the tx from and those whose own ``inv`` reached it before that tick;
- a node fetches from the first neighbour whose ``inv`` reaches it (one announcer, no fallback),
  so the tx lands at ``inv arrival + d(getdata back) + d(tx)``;
- a message leaves its sender's uplink after what is queued there (FIFO, shared with the
  blocks the node relay sends: ``Network.upload_free``), takes ``size * 8 / min(upload,
  download)`` on the wire, then ``latency + processing``, as
  :meth:`simulator.network.Network.transmit` computes it; the flow books its own transfer time
  on that uplink, so blocks queue behind txs and txs behind blocks. The tx itself leaves the
  announcer when the ``getdata`` has landed there (its own search entry).

It is a label-setting search (Dijkstra) over those times, with one gate: at a full node the
search stops, the node gets the tx as a delivery event at its arrival time and admits it through
its real intake (``SimNode.on_deliver_tx``: mempool and core). Only if it admits it does the
search go on from there (``on_accepted``); a refused tx is not passed on. Relay-only nodes pass
every tx they learn on, and cost no event. The search of a tx is therefore paused at most at one
full node at a time, and never runs ahead of a full node's verdict it depends on. It also
never runs more than ``HORIZON_MS`` ahead of the simulation's clock (a resume event): what it
books on an uplink is then at most that far in the future when a block is sent behind it.

Messages and bytes are counted on the network's totals (``messages``, ``bytes_sent``): the txs
one node announces at one tick to one peer share one ``inv`` frame, the items asked of it one
``getdata`` frame, each tx its own ``tx`` message, all sized as their real frames.

What it leaves out (docs/simulator.md): the exact order of the uplink queue (a send is booked
when the search reaches it, up to ``HORIZON_MS`` before its time, and sends of different txs
are booked in the order their searches run), the limit of two outstanding ``getdata`` per peer,
the 30-60 s re-announcement, a batched frame's items landing together (each item lands when
its own bytes are through), and the race order of events at exactly equal times. The check
"its own ``inv`` reached us first" reads the idle link's delay.

Two implementations of the search give identical results (the same arrival times to the bit,
sources, ticks, message and frame counts, the same entries in the same order): this module's
Python (``accept``, ``announce``, ``fetch``, ``advance`` over a :class:`Spread`), the reference
and the fallback, and ``simulator._flow`` (simulator/_flow.c), the same steps compiled, built by
setup.py when a C compiler is present. ``FLOW_KERNEL`` names the one ``TxFlow`` and
``earliest_arrivals`` use by default: ``"c"`` when built, ``"python"`` if not or if the
environment sets ``DAGCHAIN_FLOW_KERNEL=python``.
"""

import heapq
import logging
import math
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, final

from dagchain.types import TxId
from p2p import wire
from p2p.relay import TX
from simulator.engine import Engine
from simulator.knowledge import Knowledge
from simulator.sim_node import frame_size

try:
    from simulator._flow import Frames as KernelFrames
    from simulator._flow import Model as KernelModel
    from simulator._flow import Spread as KernelSpread
except ImportError:  # built without a C compiler: the pure-Python search is used
    KERNEL_BUILT = False
else:
    KERNEL_BUILT = True

FLOW_KERNEL: Final = (
    "c" if KERNEL_BUILT and os.environ.get("DAGCHAIN_FLOW_KERNEL", "c") != "python" else "python"
)
"""The search ``TxFlow`` and ``earliest_arrivals`` use unless told: ``"c"`` (simulator._flow)
or ``"python"`` (not built, or ``DAGCHAIN_FLOW_KERNEL=python``)."""
_log = logging.getLogger(__name__)

TICK_MS = 250.0
"""The relay's maintenance tick (p2p/exchange.py ``MAINTENANCE_MS``): tx ``inv`` batches."""
FRAMES_PRUNE_AT = 100_000
"""Frames remembered before the old ones are dropped."""
_ANNOUNCE, _INV, _GETDATA, _TX = 0, 1, 2, 3
"""Kinds of search entries, in the order entries at the same time are taken: an announcement,
an ``inv`` landing, a ``getdata`` landing at the announcer (which sends the tx), the tx landing."""
HORIZON_MS = 20.0
"""How far ahead of the simulation's clock a search may run (``TxFlow``): the uplink time it
books is at most this early."""


@final
class LinkModel:
    """The delays the flow reads: who links to whom, latencies, rates, ticks.

    ``neighbours[v]``: v's peers; ``latency[v][w]``: one-way ms; ``upload``/``download``: bits
    per ms (``math.inf``: unlimited); ``phase``: node -> its 250 ms tick phase (ms in [0, 250)),
    asked once per node; ``upload_free[v]``: when v's uplink is free (the simulation passes
    the network's own list, shared with the blocks; default: all free at 0).
    """

    def __init__(
        self,
        neighbours: Sequence[Sequence[int]],
        latency: Sequence[dict[int, float]],
        upload: Sequence[float],
        download: Sequence[float],
        processing_ms: float,
        phase: Callable[[int], float],
        upload_free: list[float] | None = None,
    ) -> None:
        self.neighbours = neighbours
        self.upload_free = [0.0] * len(neighbours) if upload_free is None else upload_free
        self.latency = latency
        self.upload = upload
        self.download = download
        self.processing_ms = processing_ms
        self._phase = phase
        self._phases: dict[int, float] = {}
        self._inv_delays: dict[int, tuple[list[list[float]], list[list[float]]]] = {}
        self._kernel: KernelModel | None = None

    def kernel(self) -> "KernelModel":
        """The links as the C search reads them (made once; the links must not change after).

        Raises:
            RuntimeError: simulator._flow was not built.
        """
        if not KERNEL_BUILT:
            raise RuntimeError("simulator._flow was not built (no C compiler at install time)")
        if self._kernel is None:
            self._kernel = KernelModel(
                self.neighbours,
                self.latency,
                self.upload,
                self.download,
                self.processing_ms,
                self.phase_ms,
                self.upload_free,
            )
        return self._kernel

    def phase_ms(self, node: int) -> float:
        """``node``'s tick phase (asked of ``phase`` once per node)."""
        phase = self._phases.get(node)
        if phase is None:
            phase = self._phases[node] = self._phase(node)
        return phase

    def delay_ms(self, src: int, dst: int, size: int) -> float:
        """A ``size``-byte message from ``src`` to neighbour ``dst``: transfer, latency,
        processing (``Network.transmit`` with an idle uplink)."""
        rate = min(self.upload[src], self.download[dst])
        transfer = 0.0 if rate == math.inf else size * 8 / rate
        return transfer + self.latency[src][dst] + self.processing_ms

    def send(self, src: int, dst: int, size: int, at_ms: float) -> float:
        """``src`` sends ``size`` bytes to neighbour ``dst`` at ``at_ms``: when they are processed
        there. Books the transfer on ``src``'s uplink after what is queued (FIFO), with
        :meth:`simulator.network.Network.transmit`'s arithmetic; an unlimited link books nothing.
        """
        up, down = self.upload[src], self.download[dst]
        rate = up if up < down else down
        if rate == math.inf:
            return at_ms + self.latency[src][dst] + self.processing_ms
        free = self.upload_free
        start = free[src]
        if start < at_ms:
            start = at_ms
        done = start + size * 8 / rate
        free[src] = done
        return done + self.latency[src][dst] + self.processing_ms

    def inv_delays(self, size: int) -> tuple[list[list[float]], list[list[float]]]:
        """For ``size``-byte messages, per node v and its i-th neighbour w: the delay v -> w
        and the delay w -> v (computed once per size)."""
        found = self._inv_delays.get(size)
        if found is None:
            out = [[self.delay_ms(v, w, size) for w in ws] for v, ws in enumerate(self.neighbours)]
            back = [[self.delay_ms(w, v, size) for w in ws] for v, ws in enumerate(self.neighbours)]
            found = self._inv_delays[size] = (out, back)
        return found

    def next_tick_ms(self, node: int, after_ms: float) -> float:
        """The first point of ``node``'s tick grid strictly after ``after_ms`` (as
        ``RelayPort._arm`` computes it)."""
        phase = self._phases.get(node)
        if phase is None:
            phase = self.phase_ms(node)
        at = phase + (math.floor((after_ms - phase) / TICK_MS) + 1) * TICK_MS
        if at <= after_ms:
            at += TICK_MS
        return at


@dataclass(frozen=True, slots=True)
class Sizes:
    """Frame sizes (bytes on the link) of one tx's messages."""

    inv: int
    getdata: int
    tx: int


def tx_sizes(txid: bytes, raw: bytes) -> Sizes:
    """The real frame sizes of a one-item ``inv``, a one-item ``getdata`` and the ``tx``."""
    item = ((TX, bytes(txid)),)
    return Sizes(
        frame_size(wire.Inv(item)), frame_size(wire.GetData(item)), frame_size(wire.TxMsg(raw))
    )


ITEM_BYTES = 36
"""One more [kind, id] item in an ``inv`` or ``getdata`` frame (sim_node.py ``_ITEM_BYTES``)."""


@dataclass(slots=True)
class Frames:
    """Which frames were charged already, shared by all txs: the txs a node announces at one
    tick to one peer travel in one ``inv`` (P11), and the peer asks for those it lacks in one
    ``getdata``; each tx after the first adds one item to the frame, not a frame."""

    invs: dict[tuple[int, float], set[int]] = field(default_factory=dict)
    """(announcer, tick) -> the peers its ``inv`` frame of that tick went to."""
    getdata: set[tuple[int, int, float]] = field(default_factory=set)
    """(asker, announcer, announcer's tick): a ``getdata`` answering that ``inv`` frame."""

    def inv_peers(self, node: int, tick_ms: float) -> set[int]:
        """The peers ``node``'s ``inv`` frames of ``tick_ms`` went to so far (to add to)."""
        peers = self.invs.get((node, tick_ms))
        if peers is None:
            peers = self.invs[(node, tick_ms)] = set()
        return peers

    def new_getdata(self, node: int, announcer: int, tick_ms: float) -> bool:
        """True if this is the first tx ``node`` asks of ``announcer``'s ``tick_ms`` frame."""
        key = (node, announcer, tick_ms)
        if key in self.getdata:
            return False
        self.getdata.add(key)
        return True

    def prune(self, before_ms: float) -> None:
        """Forget frames of ticks before ``before_ms`` (no tx can join them any more)."""
        self.invs = {k: v for k, v in self.invs.items() if k[1] >= before_ms}
        self.getdata = {k for k in self.getdata if k[2] >= before_ms}

    def count(self) -> int:
        """(announcer, tick) ``inv`` frames remembered."""
        return len(self.invs)


@dataclass(slots=True)
class Spread:
    """One tx's search: pending entries and what each node did so far."""

    sizes: Sizes
    heap: list[tuple[float, int, int, int, int]] = field(default_factory=list)
    """(time, kind, seq, node, peer): an announcement by ``node`` (peer unused), an ``inv``
    from ``peer`` landing at ``node``, or the tx from ``peer`` landing at ``node``."""
    seq: int = 0
    source: dict[int, int] = field(default_factory=dict)
    """Node -> the neighbour it fetches the tx from (the first announcer it heard; -1 where
    the tx entered the network): every node that has or fetches the tx."""
    best_inv: dict[int, float] = field(default_factory=dict)
    """Node -> the earliest ``inv`` arrival pushed so far (the search's tentative label)."""
    tick: dict[int, float] = field(default_factory=dict)
    """Node -> when it announced the tx."""
    arrival: dict[int, float] = field(default_factory=dict)
    """Node -> when the tx landed there (the origin: when it was accepted)."""
    waiting: int = -1
    """The full node whose verdict the search waits for, or -1."""
    frames: Frames | None = None
    """Frames shared with other txs (None: every message is a frame of its own)."""
    invs: int = 0
    """``inv`` items sent (one per tx and link)."""
    inv_frames: int = 0
    """... of which the first item of a frame."""
    fetches: int = 0
    """``getdata`` items (and so ``tx`` messages) sent."""
    getdata_frames: int = 0
    """... of which the first item of a frame."""

    def push(self, at: float, kind: int, node: int, peer: int) -> None:
        """Add a search entry."""
        self.seq += 1
        heapq.heappush(self.heap, (at, kind, self.seq, node, peer))


def accept(model: LinkModel, spread: Spread, node: int, at_ms: float) -> None:
    """``node`` took the tx in at ``at_ms`` (or was offered it there): it announces it at its
    next tick."""
    spread.arrival.setdefault(node, at_ms)
    spread.source.setdefault(node, -1)
    spread.push(model.next_tick_ms(node, at_ms), _ANNOUNCE, node, -1)


def announce(model: LinkModel, spread: Spread, node: int, tick_ms: float) -> None:
    """``node``'s tick: an ``inv`` to each neighbour not known to have the tx (P11)."""
    ticks, best, fetching = spread.tick, spread.best_inv, spread.source
    ticks[node] = tick_ms
    source = fetching.get(node, -1)
    inv_size = spread.sizes.inv
    backs = model.inv_delays(inv_size)[1]
    frames = spread.frames
    framed = None if frames is None else frames.inv_peers(node, tick_ms)
    send = model.send
    invs = new_frames = 0
    for peer, back in zip(model.neighbours[node], backs[node], strict=True):
        if peer == source:
            continue
        told = ticks.get(peer)
        if told is not None and told + back < tick_ms:
            continue  # its own inv reached us first: known to have it
        invs += 1
        if framed is None:
            new_frames += 1
            at = send(node, peer, inv_size, tick_ms)
        elif peer not in framed:
            framed.add(peer)
            new_frames += 1
            at = send(node, peer, inv_size, tick_ms)
        else:
            at = send(node, peer, ITEM_BYTES, tick_ms)  # one more item of that tick's frame
        if peer in fetching:
            continue  # it has the tx, or fetches it from its first announcer
        if at < best.get(peer, math.inf):
            best[peer] = at
            spread.push(at, _INV, peer, node)
    spread.invs += invs
    spread.inv_frames += new_frames


def fetch(model: LinkModel, spread: Spread, node: int, announcer: int, inv_ms: float) -> None:
    """``node`` heard of the tx first from ``announcer``: ``getdata`` there (one more item if
    it asks that ``inv`` frame for another tx already); the tx comes back when it has landed."""
    spread.source[node] = announcer
    spread.fetches += 1
    frames = spread.frames
    if frames is None or frames.new_getdata(node, announcer, spread.tick[announcer]):
        spread.getdata_frames += 1
        size = spread.sizes.getdata
    else:
        size = ITEM_BYTES
    spread.push(model.send(node, announcer, size, inv_ms), _GETDATA, announcer, node)


def answer(model: LinkModel, spread: Spread, announcer: int, node: int, at_ms: float) -> None:
    """``node``'s ``getdata`` landed at ``announcer``: the tx goes back over its uplink."""
    spread.push(model.send(announcer, node, spread.sizes.tx, at_ms), _TX, node, announcer)


STOP, PASS, KEEP = 0, 1, 2
"""What a node does with a tx that lands (``advance``'s gate): wait for its verdict (a full
node), pass it on (a relay-only node), or keep it without passing it on (it knew it)."""
_HOW_GATE, _HOW_REFUSES, _HOW_LEARN, _HOW_KNOWLEDGE = 0, 1, 2, 3
"""The C search's gate at nodes >= ``full`` (``KernelSpread.advance``): a gate function, a set
of nodes that keep (the rest pass), a ``learn(node, txid)`` function, or a Knowledge whose
``learn`` it runs itself (the same steps as ``Knowledge.learn``)."""


def advance(
    model: LinkModel, spread: Spread, gate: Callable[[int], int], until_ms: float = math.inf
) -> tuple[int, int, float] | None:
    """Run the search until a tx lands where ``gate(node)`` is ``STOP`` (a full node: returns
    (node, source, at), the search waits for its verdict), the next entry lies after
    ``until_ms`` (returns (-1, -1, its time)) or nothing is left (None).

    Where the gate says ``PASS`` the node takes the tx in and announces it; ``KEEP``: it only
    takes it in.
    """
    heap = spread.heap
    while heap:
        if heap[0][0] > until_ms:
            return -1, -1, heap[0][0]
        at, kind, _, node, peer = heapq.heappop(heap)
        if kind == _ANNOUNCE:
            announce(model, spread, node, at)
        elif kind == _INV:
            if node not in spread.source:
                fetch(model, spread, node, peer, at)
        elif kind == _GETDATA:
            answer(model, spread, node, peer, at)
        elif node not in spread.arrival:
            verdict = gate(node)
            spread.arrival[node] = at
            if verdict == STOP:
                spread.waiting = node
                return node, peer, at
            if verdict == PASS:
                accept(model, spread, node, at)
    return None


def earliest_arrivals(
    model: LinkModel,
    origin: int,
    start_ms: float,
    sizes: Sizes = Sizes(0, 0, 0),
    refuses: frozenset[int] = frozenset(),
    kernel: bool | None = None,
) -> "Spread | KernelSpread":
    """The finished search of a tx accepted at ``origin`` at ``start_ms`` when every node takes
    it in except ``refuses`` (they get it but do not pass it on): ``arrival`` holds each node's
    arrival time. The search the simulator runs, without events (tests and benchmarks).

    ``kernel``: run it in simulator._flow (True) or in Python (False); None: ``FLOW_KERNEL``.
    """
    if (FLOW_KERNEL == "c") if kernel is None else kernel:
        kmodel = model.kernel()  # raises if not built
        found = KernelSpread(kmodel, sizes)
        found.accept(origin, start_ms)
        # the gate passes every landing but at ``refuses`` (kept): what the loop below does
        found.advance(0, _HOW_REFUSES, refuses)
        return found
    spread = Spread(sizes)
    accept(model, spread, origin, start_ms)
    while (stop := advance(model, spread, _stop_everywhere)) is not None:
        node, _, at = stop
        spread.waiting = -1
        if node not in refuses:
            accept(model, spread, node, at)
    return spread


def _stop_everywhere(node: int) -> int:
    return STOP


class FlowNode(Protocol):
    """What the flow needs of a node: its index and, for full nodes, the tx intake."""

    def on_deliver_tx(self, txid: TxId, raw: bytes, src: int) -> None:
        """The tx lands from neighbour ``src``: admit it (and, if admitted, ``on_accepted``)."""


class Counters(Protocol):
    """Where the flow's messages are charged (``simulator.network.Network``)."""

    def charge(self, messages: int, bytes_sent: int) -> None:
        """Count ``messages`` more messages, ``bytes_sent`` more bytes."""


_NOTHING = (0, 0, 0, 0)
"""A search's counters when it starts."""


def _counts(spread: "Spread | KernelSpread") -> tuple[int, int, int, int]:
    return (spread.invs, spread.inv_frames, spread.fetches, spread.getdata_frames)


@final
class TxFlow:
    """The simulator's ``network.tx_relay = "flow"``: one search per tx, events at full nodes.

    Nodes below ``full_nodes`` run the core (get events); ``learn(node, txid)``: a relay-only
    node learns the tx, False if it knew it (then it does not pass it on, as in the messages
    model). ``kernel``: search in simulator._flow (True) or in Python (False); None:
    ``FLOW_KERNEL``. Both give the same run.
    """

    def __init__(
        self,
        model: LinkModel,
        engine: Engine,
        nodes: Sequence[FlowNode],
        full_nodes: int,
        learn: Callable[[int, bytes], bool],
        counters: Counters,
        kernel: bool | None = None,
    ) -> None:
        self.model = model
        self.engine = engine
        self.nodes = nodes
        self.full_nodes = full_nodes
        self.learn = learn
        self.counters = counters
        self._spreads: dict[bytes, tuple[Spread | KernelSpread, bytes]] = {}
        """Txs still spreading: their search and bytes."""
        self._resumes: dict[bytes, int] = {}
        """Txs whose search paused at its horizon: the handle of the resume event."""
        self._delivering: bytes | None = None
        self.kernel: Final = FLOW_KERNEL if kernel is None else ("c" if kernel else "python")
        """The search in use: ``"c"`` or ``"python"``."""
        self.frames: Frames | KernelFrames
        if self.kernel == "c":
            self._kmodel = model.kernel()  # raises if not built
            self.frames = KernelFrames()
            owner = getattr(learn, "__self__", None)
            if isinstance(owner, Knowledge) and getattr(learn, "__func__", None) is Knowledge.learn:
                self._gate: tuple[int, object] = (_HOW_KNOWLEDGE, owner)
            else:
                self._gate = (_HOW_LEARN, learn)
        else:
            self.frames = Frames()
        _log.debug("tx flow search: %s", self.kernel)
        self._prune_at = FRAMES_PRUNE_AT
        self._by_type = [0, 0, 0]
        """``inv``, ``getdata`` and ``tx`` messages counted so far (:attr:`by_type`)."""
        self._settled: dict[bytes, tuple[int, int, int, int]] = {}
        """Searches still running that :meth:`settle` charged: their counters then."""

    @property
    def by_type(self) -> Counter[str]:
        """Messages the flow counted, by wire type (``inv``, ``getdata``, ``tx``)."""
        inv, getdata, tx = self._by_type
        return Counter({"inv": inv, "getdata": getdata, "tx": tx})

    def on_accepted(self, node: int, txid: bytes, raw: bytes) -> None:
        """``node`` admitted the tx (offered by the wallet, or delivered by the flow)."""
        now = self.engine.now_ms
        found = self._spreads.get(txid)
        spread: Spread | KernelSpread
        if found is None:
            sizes = tx_sizes(txid, raw)
            frames = self.frames
            if isinstance(frames, Frames):
                spread = Spread(sizes, frames=frames)
            else:
                spread = KernelSpread(self._kmodel, sizes, frames)
            self._spreads[txid] = (spread, raw)
            self._accept(spread, node, now)
            self._advance(txid, spread, raw)
            return
        # Admitted at a second node while it spreads (offered twice, or put back by a
        # reorganisation): the node joins the running search. A search paused at its horizon
        # resumes now, so the node's own sends keep their time; one waiting for a full node's
        # verdict goes on after that verdict (the new node's sends wait at most until then).
        spread = found[0]
        self._accept(spread, node, now)
        if self._delivering != txid:
            handle = self._resumes.pop(txid, None)
            if handle is not None:
                self.engine.cancel(handle)
                self._advance(txid, spread, raw)

    def _accept(self, spread: "Spread | KernelSpread", node: int, now: float) -> None:
        if isinstance(spread, Spread):
            accept(self.model, spread, node, now)
        else:
            spread.accept(node, now)

    def _advance(self, txid: bytes, spread: "Spread | KernelSpread", raw: bytes) -> None:
        """Run the search up to ``HORIZON_MS`` past now: then wait for the clock (a resume event
        when its next entry is due), for a full node's verdict (a delivery event), or end."""
        full, learn = self.full_nodes, self.learn
        until = self.engine.now_ms + HORIZON_MS
        if isinstance(spread, Spread):

            def gate(node: int) -> int:
                if node < full:
                    return STOP
                return PASS if learn(node, txid) else KEEP  # KEEP: it knew it (from a block)

            stop = advance(self.model, spread, gate, until)
        else:
            stop = spread.advance(full, *self._gate, txid, until)
        if self.frames.count() > self._prune_at:
            self.frames.prune(self.engine.now_ms)
            self._prune_at = max(FRAMES_PRUNE_AT, 2 * self.frames.count())
        if stop is None:  # its messages are charged once, when it ends (or at settle)
            del self._spreads[txid]
            self._charge(spread, self._settled.pop(txid, _NOTHING))
            return
        node, source, at = stop
        if node < 0:  # the next entry is more than HORIZON_MS ahead: resume when it is due
            self._resumes[txid] = self.engine.schedule_at(at, self._resume, txid)
        else:
            self.engine.schedule_at(at, self._deliver, txid, node, source)

    def _resume(self, txid: bytes) -> None:
        del self._resumes[txid]
        spread, raw = self._spreads[txid]
        self._advance(txid, spread, raw)

    def settle(self) -> None:
        """Charge the messages of the searches still running, up to now (the network's totals
        then include every message the flow sent; a finished search is charged as it ends)."""
        for txid, (spread, _) in self._spreads.items():
            self._charge(spread, self._settled.get(txid, _NOTHING))
            self._settled[txid] = _counts(spread)

    def _charge(self, spread: "Spread | KernelSpread", before: tuple[int, int, int, int]) -> None:
        """Count the messages and bytes the search sent since ``before`` (its counters then)."""
        invs = spread.invs - before[0]
        inv_frames = spread.inv_frames - before[1]
        fetches = spread.fetches - before[2]
        getdata_frames = spread.getdata_frames - before[3]
        sizes = spread.sizes
        self.counters.charge(
            inv_frames + getdata_frames + fetches,
            inv_frames * sizes.inv
            + getdata_frames * sizes.getdata
            + (invs - inv_frames + fetches - getdata_frames) * ITEM_BYTES
            + fetches * sizes.tx,
        )
        by_type = self._by_type
        by_type[0] += inv_frames
        by_type[1] += getdata_frames
        by_type[2] += fetches

    def _deliver(self, txid: bytes, node: int, source: int) -> None:
        spread, raw = self._spreads[txid]
        spread.waiting = -1
        self._delivering = txid
        try:
            self.nodes[node].on_deliver_tx(TxId(txid), raw, source)
        finally:
            self._delivering = None
        self._advance(txid, spread, raw)

    @property
    def spreading(self) -> int:
        """Txs whose search is not finished."""
        return len(self._spreads)

    def in_flight(self) -> list[tuple[bytes, "Spread | KernelSpread"]]:
        """(txid, search) of the txs still spreading, oldest first (experiments read their
        arrival labels: experiments/relay_backlog.py)."""
        return [(txid, spread) for txid, (spread, _) in self._spreads.items()]


__all__ = [
    "FLOW_KERNEL",
    "HORIZON_MS",
    "ITEM_BYTES",
    "KEEP",
    "KERNEL_BUILT",
    "PASS",
    "STOP",
    "TICK_MS",
    "Frames",
    "LinkModel",
    "Sizes",
    "Spread",
    "TxFlow",
    "accept",
    "advance",
    "announce",
    "answer",
    "earliest_arrivals",
    "fetch",
    "tx_sizes",
]
