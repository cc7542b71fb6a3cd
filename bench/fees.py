"""Fee estimates against what happened: the share of txs paying the estimate for N milestones that
were VALID within N, in the simulator (real Chain, Mempool, NodeService and estimator per node).

Results and their reading: docs/benchmarks.md, section "Fee estimates".

Run: ``python bench/fees.py [--tps 40] [--duration 300] [--seed 1]``. The simulator's load pays a
uniform fee of 1,000-9,999 units per tx (simulator/load.py), so fee rates spread over a factor of
10. Each tx is offered at a random full node; the benchmark records that node's estimate
(``NodeService.fee_estimate``, refreshed every ``REFRESH_MS`` of simulated time per node, as a
wallet asking now and then would see it), its best height and the tx's fee rate. At the end, each
tx's wait is the height of the observer's level set in which it is VALID minus that best height
(the estimator's own definition). For N in 1, 3, 10 it prints, among txs offered after the
warm-up and at least N + 2 milestones before the end:

- ``paying``: txs whose rate was at least the estimate for N, and ``hit``: the share of them VALID
  within N milestones (the target is 0.9);
- ``below``: txs paying less, and their share VALID within N (for contrast);
- ``none``: txs offered while the node had no estimate for N (null).
"""

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dagchain.errors import Reason  # noqa: E402
from dagchain.fees import FEE_TARGETS, FeeEstimate, rate_of  # noqa: E402
from dagchain.types import TxId  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402
from simulator.sim_node import SimNode  # noqa: E402
from simulator.simulation import Simulation  # noqa: E402

REFRESH_MS = 1_000.0
"""How often (simulated ms) a node's estimate is recomputed for the txs offered there."""
WARMUP_MILESTONES = 20
"""Txs offered before this best height are not scored (the estimators are still empty)."""


@dataclass
class Offered:
    rate: int
    """Milli-units per byte."""
    seen_height: int
    estimate: FeeEstimate


class _Entry:
    """A TxLoad entry point that records the node's view when a tx is taken."""

    def __init__(self, node: SimNode, sim: Simulation, log: dict[bytes, Offered]) -> None:
        self.node = node
        self.sim = sim
        self.log = log
        self._cached: tuple[float, FeeEstimate] | None = None

    @property
    def index(self) -> int:
        return self.node.index

    def _estimate(self) -> FeeEstimate:
        now = self.sim.engine.now_ms
        if self._cached is None or now - self._cached[0] >= REFRESH_MS:
            self._cached = (now, self.node.service.fee_estimate())
        return self._cached[1]

    def offer_tx(self, txid: TxId, raw: bytes) -> str | None:
        estimate = self._estimate()
        height = self.node.chain.best_height
        refused = self.node.offer_tx(txid, raw)
        entry = self.node.mempool.get(txid)
        if refused is None and entry is not None and txid not in self.log:
            self.log[bytes(txid)] = Offered(rate_of(entry.fee, entry.size), height, estimate)
        return refused


def valid_heights(sim: Simulation) -> dict[bytes, int]:
    """txid -> height of the observer's level set in which it is VALID."""
    chain = sim.observer.chain
    out: dict[bytes, int] = {}
    for height in range(1, chain.best_height + 1):
        delta = chain.level_set(chain.state.best[height])
        if delta is None:
            continue
        for tx, reason in chain.level_set_txs(delta):
            if reason == Reason.VALID:
                out.setdefault(bytes(tx.txid), height)
    return out


def score(log: dict[bytes, Offered], valid: dict[bytes, int], best: int) -> dict[str, object]:
    """Hit rates per target (module docstring)."""
    out: dict[str, object] = {}
    for target in FEE_TARGETS:
        paying = hits = below = below_hits = none = 0
        for txid, o in log.items():
            if o.seen_height < WARMUP_MILESTONES or o.seen_height + target + 2 > best:
                continue
            estimate = o.estimate.rate(target)
            made_it = txid in valid and valid[txid] - o.seen_height <= target
            if estimate is None:
                none += 1
            elif o.rate >= estimate:
                paying += 1
                hits += made_it
            else:
                below += 1
                below_hits += made_it
        out[str(target)] = {
            "paying": paying,
            "hit": round(hits / paying, 3) if paying else None,
            "below": below,
            "below_hit": round(below_hits / below, 3) if below else None,
            "none": none,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tps", type=float, default=40.0)
    parser.add_argument("--duration", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="scenario overrides (dagchain-sim run --set); the defaults below come first",
    )
    args = parser.parse_args()
    overrides = [
        'network.delay="uniform:0.05:0.2"',
        "chain.milestone_interval_s=2",
        "chain.block_rate=4",
        "chain.block_capacity=9",
        'chain.sortition_c="1/4"',
        "miners.count=10",
        f"load.tps={args.tps}",
        *args.set,
    ]
    scenario = load_scenario(
        None, overrides, nodes=args.nodes, duration_s=args.duration, seed=args.seed
    )
    sim = Simulation(scenario)
    log: dict[bytes, Offered] = {}
    sim.load.nodes = [_Entry(n, sim, log) if isinstance(n, SimNode) else n for n in sim.load.nodes]
    started = time.perf_counter()
    result = sim.run()
    valid = valid_heights(sim)
    best = sim.observer.chain.best_height
    report = {
        "overrides": overrides,
        "nodes": args.nodes,
        "duration_s": args.duration,
        "seed": args.seed,
        "milestones": best,
        "offered_scored": sum(1 for o in log.values() if o.seen_height >= WARMUP_MILESTONES),
        "valid": len(valid),
        "throughput_tps": result.metrics.get("throughput_tps"),
        "by_target": score(log, valid, best),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
