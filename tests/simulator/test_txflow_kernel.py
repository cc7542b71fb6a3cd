"""simulator._flow (the compiled tx flow search) against txflow.py's Python search: identical.

Random graphs of several sizes and seeds (latencies drawn as floats or as small integers so that
many entries tie in time, finite and infinite link rates, random and integer tick phases,
refusing nodes, uplinks idle or with a queue already booked), one tx at a time and several txs
interleaved over shared frames and one shared uplink queue (``upload_free``) with pruning and
pauses at a moving horizon: the same arrival times (exact float equality), sources, ticks,
labels, entry counts, message and frame counts, frames remembered, the same knowledge at
relay-only nodes and the same uplink bookings to the bit. Then a short simulation with
``network.tx_relay = "flow"`` gives the same metrics and events either way.
"""

import gc
import json
import math
import os
import random
import subprocess
import sys
import weakref
from collections.abc import Callable
from pathlib import Path

import pytest

from simulator import txflow
from simulator.knowledge import Knowledge
from simulator.simulation import WALL_FIELDS
from simulator.txflow import (
    KEEP,
    PASS,
    STOP,
    Frames,
    LinkModel,
    Sizes,
    Spread,
    accept,
    advance,
    earliest_arrivals,
)

from .test_txflow import _scenario

if txflow.KERNEL_BUILT:
    from simulator._flow import Frames as KFrames
    from simulator._flow import Model as KModel
    from simulator._flow import Spread as KSpread

pytestmark = pytest.mark.skipif(
    not txflow.KERNEL_BUILT, reason="simulator._flow was not built (no C compiler at install time)"
)
ROOT = Path(__file__).resolve().parents[2]


def _graph(n: int, seed: int, ties: bool = False, queued: bool = False) -> LinkModel:
    """A connected random graph: a random tree plus extra links, about 8 links a node.

    ``ties``: latencies and phases on a 5 ms grid, unlimited rates and no processing, so that
    many entries of all kinds fall at equal times (their order is then (kind, seq)).
    ``queued``: about half the uplinks are busy already (``upload_free`` up to 3 s), so sends
    wait behind a queue; else all are free at 0."""
    rnd = random.Random(seed)
    edges: set[tuple[int, int]] = set()
    for v in range(1, n):
        edges.add((rnd.randrange(v), v))
    for _ in range(3 * n):
        a, b = rnd.randrange(n), rnd.randrange(n)
        if a != b:
            edges.add((min(a, b), max(a, b)))
    neighbours: list[list[int]] = [[] for _ in range(n)]
    latency: list[dict[int, float]] = [{} for _ in range(n)]
    for a, b in sorted(edges):
        neighbours[a].append(b)
        neighbours[b].append(a)
        if ties:
            latency[a][b] = latency[b][a] = float(rnd.choice((5, 10, 20, 25, 50, 75, 125)))
        else:  # one-way latencies may differ
            latency[a][b] = rnd.uniform(1.0, 300.0)
            latency[b][a] = rnd.uniform(1.0, 300.0)
    rates = [math.inf] if ties else [math.inf, 8.0, 100.0, 1000.0, 12_500.0]
    upload = [rnd.choice(rates) for _ in range(n)]
    download = [rnd.choice(rates) for _ in range(n)]
    if ties:
        phase_of = [float(rnd.choice((0, 125))) for _ in range(n)]
    else:
        phase_of = [rnd.random() * txflow.TICK_MS for _ in range(n)]
    asked: list[int] = []

    def phase(node: int) -> float:
        asked.append(node)
        return phase_of[node]

    free = [0.0] * n
    if queued:  # its own generator: the graph is the same queued or not
        qrnd = random.Random(seed * 7919 + 1)
        free = [qrnd.uniform(0.0, 3000.0) if qrnd.random() < 0.5 else 0.0 for _ in range(n)]
    model = LinkModel(
        neighbours,
        latency,
        upload,
        download,
        0.0 if ties else rnd.choice((0.0, 2.0, 0.37)),
        phase,
        free,
    )
    model.asked = asked  # type: ignore[attr-defined]
    return model


def _labels(spread: "Spread | KSpread") -> tuple[object, ...]:
    return (
        spread.arrival,
        spread.source,
        spread.tick,
        spread.best_inv,
        spread.seq,
        spread.waiting,
        spread.invs,
        spread.inv_frames,
        spread.fetches,
        spread.getdata_frames,
    )


def _exact(a: dict[int, float], b: dict[int, float]) -> None:
    """Equal keys and bit-equal values (``==`` would take -0.0 for 0.0)."""
    assert a.keys() == b.keys()
    assert all(math.copysign(1.0, a[k]) == math.copysign(1.0, b[k]) for k in a)
    assert {k: v.hex() for k, v in a.items()} == {k: float(v).hex() for k, v in b.items()}


def _same_uplinks(c: LinkModel, py: LinkModel) -> None:
    """The uplink queues both searches booked: floats, bit-equal, in the LinkModel's own list
    (the one the kernel wrote in place)."""
    assert c.kernel().upload_free is c.upload_free
    assert all(type(x) is float for x in c.upload_free)
    assert [x.hex() for x in c.upload_free] == [x.hex() for x in py.upload_free]


GRAPHS = [(2, 1), (10, 2), (10, 3), (60, 4), (60, 5), (300, 6), (1000, 7)]


@pytest.mark.parametrize("queued", [False, True])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize(("n", "seed"), GRAPHS)
def test_one_tx_search_is_identical(n: int, seed: int, ties: bool, queued: bool) -> None:
    rnd = random.Random(seed * 31 + ties)
    booked = 0
    for trial in range(4):
        model = _graph(n, seed, ties, queued)
        refuses = frozenset(rnd.sample(range(n), k=rnd.randrange(n // 3 + 1)))
        origin = rnd.randrange(n)
        start = rnd.choice((0.0, 17.5, rnd.uniform(0, 5000), 250.0))
        sizes = Sizes(rnd.randrange(40, 400), rnd.randrange(40, 400), rnd.randrange(100, 5000))
        if trial == 0:
            sizes, refuses = Sizes(0, 0, 0), frozenset()
        before = list(model.upload_free)
        py = earliest_arrivals(model, origin, start, sizes, refuses, kernel=False)
        booked += model.upload_free != before
        asked_py = list(model.asked)  # type: ignore[attr-defined]
        fresh = _graph(n, seed, ties, queued)
        assert fresh.upload_free == before
        c = earliest_arrivals(fresh, origin, start, sizes, refuses, kernel=True)
        assert isinstance(py, Spread)
        assert isinstance(c, KSpread)
        assert _labels(c) == _labels(py)
        _exact(c.arrival, py.arrival)
        _exact(c.tick, py.tick)
        _exact(c.best_inv, py.best_inv)
        # the phases asked, in the same order (a node's phase makes its relay port in the sim)
        assert fresh.asked == asked_py  # type: ignore[attr-defined]
        assert c.pending == 0
        _same_uplinks(fresh, model)
    assert booked == 0 if ties else n < 10 or booked >= 3  # finite rates book (not trial 0)


def _drive(
    model: LinkModel,
    kernel: bool,
    plan: list[tuple[bytes, int, float, Sizes]],
    full: int,
    how: str,
    refused: Callable[[bytes, int], bool],
    preknown: dict[bytes, set[int]],
    prune_every: int,
    horizon: float = math.inf,
) -> tuple[list[tuple[object, ...]], object, tuple[object, object], list[str], bool | None, bool]:
    """Several txs spread interleaved, as TxFlow runs them: each stops at full nodes, whose
    verdict (``refused``) is given at the next round, or pauses before an entry after round
    times ``horizon`` ms (it goes on at the next round); relay-only nodes learn through a
    Knowledge (its own learn, or a learn function, or a gate function). All book the model's
    one ``upload_free`` list (returned as hex)."""
    n = len(model.neighbours)
    knowledge = Knowledge(n)
    for txid, nodes in preknown.items():
        for node in nodes:
            knowledge.learn(node, txid)
    frames: Frames | KFrames = KFrames() if kernel else Frames()
    spreads: list[Spread | KSpread] = []
    stops: list[tuple[int, int, float] | None] = []
    for _txid, origin, start, sizes in plan:
        if kernel:
            ks = KSpread(model.kernel(), sizes, frames)  # type: ignore[arg-type]
            ks.accept(origin, start)
            spreads.append(ks)
        else:
            assert isinstance(frames, Frames)
            ps = Spread(sizes, frames=frames)
            accept(model, ps, origin, start)
            spreads.append(ps)
        stops.append(None)
    live = list(range(len(plan)))
    rounds = 0
    trace: list[tuple[object, ...]] = []
    got_exact = [False]  # the kernel's getdata frames answered from their set at some point
    while live:
        rounds += 1
        for i in list(live):
            txid = plan[i][0]
            spread = spreads[i]
            stop = stops[i]
            if stop is not None and stop[0] >= 0:  # the verdict of the full node it waits for
                node, _, at = stop
                spread.waiting = -1
                if not refused(txid, node):
                    if isinstance(spread, Spread):
                        accept(model, spread, node, at)
                    else:
                        spread.accept(node, at)

            def gate(node: int, txid: bytes = txid) -> int:
                if node < full:
                    return STOP
                return PASS if knowledge.learn(node, txid) else KEEP

            until = rounds * horizon
            if isinstance(spread, Spread):
                stop = advance(model, spread, gate, until)
            elif how == "knowledge":
                stop = spread.advance(full, 3, knowledge, txid, until)
            elif how == "learn":
                stop = spread.advance(full, 2, knowledge.learn, txid, until)
            elif until == math.inf:  # the default
                stop = spread.advance(0, 0, gate)
            else:
                stop = spread.advance(0, 0, gate, None, until)
            if stop is not None and stop[0] < 0:  # paused: the next entry is after until
                assert stop[:2] == (-1, -1)
                assert stop[2] > until
            stops[i] = stop
            if isinstance(frames, KFrames) and frames.getdata_exact:
                got_exact[0] = True
            trace.append((i, stop, spread.invs, spread.inv_frames, spread.getdata_frames))
            if stop is None:
                live.remove(i)
        if rounds % prune_every == 0:  # forget frames some searches may still add to
            waits = sorted(s[2] for s in stops if s is not None)
            before = frames.count()
            horizon = waits[len(waits) // 2] if waits else math.inf
            if horizon < math.inf:  # on the ticks' grid when ticks fall on it (``ties``)
                horizon = math.floor(horizon / 125.0) * 125.0
            frames.prune(horizon)
            trace.append(("pruned", before, frames.count()))
    snapshot = (
        frames.snapshot()
        if isinstance(frames, KFrames)
        else (
            frames.invs,
            frames.getdata,
        )
    )
    return (
        trace + [_labels(s) for s in spreads],
        (knowledge.holders, knowledge.counts, knowledge.everywhere),
        snapshot,
        [x.hex() for x in model.upload_free],
        frames.exact if isinstance(frames, KFrames) else None,
        got_exact[0],
    )


@pytest.mark.parametrize("start", [-1234.5, -250.0, -0.0, 1e-300, 3.0e9])
def test_times_below_zero_and_far_out_are_identical(start: float) -> None:
    """The kernel's entries keep a time as its order key and read it back from there: negative,
    zero, tiny and large times come back bit-equal."""
    model, fresh = _graph(60, 8), _graph(60, 8)
    py = earliest_arrivals(model, 3, start, Sizes(61, 61, 250), kernel=False)
    c = earliest_arrivals(fresh, 3, start, Sizes(61, 61, 250), kernel=True)
    assert _labels(c) == _labels(py)
    _exact(c.arrival, py.arrival)
    _exact(c.tick, py.tick)
    _exact(c.best_inv, py.best_inv)
    _same_uplinks(fresh, model)


def test_a_peer_listed_twice_shares_its_inv_frames_identically() -> None:
    """Frames remember an inv frame per (announcer, peer, tick): a node that lists a peer twice
    sends the second inv of a tick as one more item, in both searches."""
    runs = []
    for kernel in (False, True):
        model = _graph(60, 9)
        for v in range(0, 60, 3):  # a third of the nodes list their first peer again
            model.neighbours[v].append(model.neighbours[v][0])  # type: ignore[attr-defined]
        plan = [(bytes([i]) * 32, (7 * i) % 60, 40.0 * i, Sizes(61, 61, 300 + i)) for i in range(6)]
        runs.append(_drive(model, kernel, plan, 0, "knowledge", lambda t, n: False, {}, 2)[:4])
    assert runs[1] == runs[0]


@pytest.mark.parametrize("horizon", [math.inf, 150.0])
@pytest.mark.parametrize("how", ["knowledge", "learn", "gate"])
@pytest.mark.parametrize(("n", "seed"), [(10, 11), (60, 12), (300, 13), (300, 14), (300, 15)])
def test_interleaved_txs_share_frames_identically(
    n: int, seed: int, how: str, horizon: float
) -> None:
    """Seeds 11, 13, 15: finite rates, so every send books the one shared ``upload_free``
    (15: a queue booked before); 12, 14: ties."""
    rnd = random.Random(seed)
    ties = seed % 2 == 0
    txs = 12
    plan = [
        (
            rnd.randbytes(32),
            rnd.randrange(n),
            rnd.choice((0.0, 10.0 * i, rnd.uniform(0, 600))),
            Sizes(61, 61, rnd.randrange(150, 900)),
        )
        for i in range(txs)
    ]
    full = rnd.randrange(1, n // 2 + 2)
    preknown = {txid: set(rnd.sample(range(n), k=rnd.randrange(n))) for txid, *_ in plan[:4]}
    preknown[plan[4][0]] = set(range(n))  # known everywhere already (from a block)
    salt = rnd.randbytes(4)

    def refused(txid: bytes, node: int) -> bool:
        return (txid[0] ^ salt[0] ^ node) % 5 == 0

    queued = seed == 15
    idle = [x.hex() for x in _graph(n, seed, ties, queued).upload_free]
    py, c = (
        _drive(
            _graph(n, seed, ties, queued),
            kernel,
            plan,
            full,
            how,
            refused,
            preknown,
            prune_every=3,
            horizon=horizon,
        )
        for kernel in (False, True)
    )
    assert any(t[0] == "pruned" and t[2] < t[1] for t in py[0])  # type: ignore[operator]
    paused = [t for t in py[0] if isinstance(t[1], tuple) and t[1][0] == -1]
    assert bool(paused) == (horizon < math.inf)
    assert c[0] == py[0]
    assert c[1] == py[1]
    assert c[2] == py[2]
    assert c[3] == py[3]
    assert (py[3] != idle) == (not ties)  # the finite rates booked the queue
    assert c[4] is True  # searches out of step: ticks went back, the exact sets answered
    assert c[5] is True  # and getdata ticks went back: the getdata set answered


@pytest.mark.parametrize(("n", "seed", "ties"), [(60, 4, False), (60, 5, True), (300, 6, False)])
def test_a_search_pauses_at_until_identically(n: int, seed: int, ties: bool) -> None:
    """``advance(..., until_ms)`` stops before the first entry after ``until_ms`` without
    taking it, ``(-1, -1, its time)``, in both searches at the same points; called again with
    the same ``until_ms`` it returns the same; the search then goes on from there, through the
    full nodes' stops, to the same end and the same uplink bookings."""
    runs: list[
        tuple[list[tuple[float, tuple[int, int, float] | None, int]], object, list[str]]
    ] = []
    for kernel in (False, True):
        model = _graph(n, seed, ties, queued=not ties)
        full = n // 6
        sizes = Sizes(61, 61, 400)
        py = Spread(sizes, frames=Frames())
        ks = KSpread(model.kernel(), sizes, KFrames()) if kernel else None
        if ks is None:
            accept(model, py, 1, 40.0)
        else:
            ks.accept(1, 40.0)

        def gate(node: int, full: int = full) -> int:
            return STOP if node < full else PASS

        trace: list[tuple[float, tuple[int, int, float] | None, int]] = []
        until = 40.0
        while True:
            if ks is None:
                stop = advance(model, py, gate, until)
                pending = len(py.heap)
            else:
                stop = ks.advance(full, 1, None, None, until)
                pending = ks.pending
            trace.append((until, stop, pending))
            if stop is None:
                break
            node, source, at = stop
            if node < 0:
                assert (source, at > until) == (-1, True)
                again = (
                    advance(model, py, gate, until)
                    if ks is None
                    else ks.advance(full, 1, None, None, until)
                )
                assert again == stop  # nothing was taken
                assert (len(py.heap) if ks is None else ks.pending) == pending
                until = at + 17.0 if len(trace) % 3 else at  # exactly at it: it is taken
            else:
                if ks is None:
                    py.waiting = -1
                    accept(model, py, node, at)
                else:
                    ks.waiting = -1
                    ks.accept(node, at)
        spread: Spread | KSpread = py if ks is None else ks
        runs.append((trace, _labels(spread), [x.hex() for x in model.upload_free]))
    assert runs[1] == runs[0]
    stops = [stop for _, stop, _ in runs[0][0] if stop is not None]
    assert sum(1 for stop in stops if stop[0] == -1) >= 5  # pauses
    assert sum(1 for stop in stops if stop[0] >= 0) >= 2  # full nodes' stops


def test_the_kernel_model_books_its_own_list_by_default() -> None:
    """Without ``upload_free`` the kernel's Model books a list of its own, all free at 0, as
    LinkModel's default; anything but a list is refused."""
    model = _graph(10, 2)
    kmodel = KModel(model.neighbours, model.latency, model.upload, model.download, 0.0, float)
    assert kmodel.upload_free == [0.0] * 10
    assert all(type(x) is float for x in kmodel.upload_free)
    spread = KSpread(kmodel, Sizes(61, 61, 250))
    spread.accept(0, 0.0)
    assert spread.advance(0, 1, None) is None
    assert kmodel.upload_free != [0.0] * 10  # graph 2 has finite rates
    assert kmodel.upload_free is kmodel.upload_free
    with pytest.raises(TypeError):
        KModel(model.neighbours, model.latency, model.upload, model.download, 0.0, float, (0.0,))  # type: ignore[arg-type]


def test_a_finished_spread_keeps_about_28_bytes_a_node() -> None:
    """At 10,000 nodes: four dense labels per node, the entry heap freed when it finished."""
    model = _graph(10_000, 21)
    spread = earliest_arrivals(model, 0, 0.0, Sizes(61, 61, 250), kernel=True)
    assert isinstance(spread, KSpread)
    assert len(spread.arrival) == 10_000
    assert spread.labels_bytes == 10_001 * 28


def test_the_environment_forces_the_python_search() -> None:
    code = "import simulator.txflow as t; print(t.FLOW_KERNEL)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = {
        value: subprocess.run(
            [sys.executable, "-c", code],
            env={**env, "DAGCHAIN_FLOW_KERNEL": value},
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout.strip()
        for value in ("python", "c")
    }
    assert out == {"python": "python", "c": "c"}


def test_a_flow_simulation_is_identical_with_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenario of test_txflow.py (30 nodes, 8 full): same metrics, events, messages."""
    runs = []
    for kernel in ("python", "c", "python", "c"):
        monkeypatch.setattr(txflow, "FLOW_KERNEL", kernel)
        sim = _scenario("flow", seed=3)
        result = sim.run()
        assert sim.txflow is not None
        assert sim.txflow.kernel == kernel
        if kernel == "c":  # the searches ran in step: each node's ticks went forward only
            assert isinstance(sim.txflow.frames, KFrames)
            assert not sim.txflow.frames.exact
        runs.append(
            (
                json.dumps({k: v for k, v in result.metrics.items() if k not in WALL_FIELDS}),
                result.events,
                sim.network.messages,
                sim.network.bytes_sent,
                dict(sim.txflow.by_type),
                sim.known_txs.holders,
                sim.known_txs.counts,
                sim.known_txs.everywhere,
            )
        )
    assert runs[0] == runs[1] == runs[2] == runs[3]
    assert runs[0][1] > 0


def test_the_kernel_objects_are_collected(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's model refers to its LinkModel's ``phase_ms`` and the LinkModel to it, an
    unfinished spread to the model: cycles the garbage collector must free (a whole simulation
    hangs off the phase function)."""
    monkeypatch.setattr(txflow, "FLOW_KERNEL", "c")
    sim = _scenario("flow", seed=3)
    sim.run()
    assert sim.txflow is not None
    ref = weakref.ref(sim.txflow.model)
    del sim
    gc.collect()
    assert ref() is None

    model = _graph(60, 5)
    spread = KSpread(model.kernel(), Sizes(61, 61, 250))
    spread.accept(0, 0.0)
    assert spread.advance(60, 1, None) is not None  # waits at the first node it reaches
    model.keep = spread  # type: ignore[attr-defined]
    ref = weakref.ref(model)
    del model, spread
    gc.collect()
    assert ref() is None
