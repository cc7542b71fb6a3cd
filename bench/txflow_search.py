"""The tx flow's search alone: CPU ms per tx, Python against simulator._flow (issue 24 item 2).

``simulator.txflow.earliest_arrivals`` over scenario d's topology (experiments/sim_speed_d.toml:
regions2019 latencies and link rates, degree 8, each node's own tick phase) at ``--nodes`` nodes,
``--txs`` txs from random origins with real frame sizes (a 250-byte tx). Each round times every
tx with the Python search, then with the C kernel (rounds alternate A B A B), in CPU time
(``time.process_time``), and checks that both give the same arrivals, sources, ticks and
message counts.

    .venv/bin/python bench/txflow_search.py --nodes 1000 6000 --txs 50 --rounds 2

Results: docs/benchmarks.md ("Tx relay as a flow").
"""

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

# Run as a script, this file's folder is sys.path[0] and bench/simulator.py would shadow the
# simulator package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from simulator import txflow  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402
from simulator.simulation import Simulation  # noqa: E402

SCENARIO = _HERE.parent / "experiments" / "sim_speed_d.toml"


def model_of(nodes: int) -> txflow.LinkModel:
    """Scenario d's LinkModel at ``nodes`` nodes (the one its flow run searches)."""
    scenario = load_scenario(SCENARIO, ['network.tx_relay="flow"'], nodes=nodes)
    sim = Simulation(scenario)
    assert sim.txflow is not None
    return sim.txflow.model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 6000])
    parser.add_argument("--txs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    opts = parser.parse_args()
    if not txflow.KERNEL_BUILT:
        print("simulator._flow was not built", file=sys.stderr)
        return 1
    for nodes in opts.nodes:
        model = model_of(nodes)
        rnd = random.Random(opts.seed)
        txs = []
        for _ in range(opts.txs):
            txid = rnd.randbytes(32)
            txs.append(
                (rnd.randrange(nodes), rnd.uniform(0, 60_000), txflow.tx_sizes(txid, bytes(250)))
            )
        for node in range(nodes):  # every phase asked before timing (it makes a relay port)
            model.phase_ms(node)
        model.kernel()
        per_tx: dict[str, list[float]] = {"python": [], "c": []}
        reference: list[tuple[object, ...]] = []
        for _ in range(opts.rounds):
            for kind in ("python", "c"):
                model.upload_free[:] = [0.0] * nodes  # each run books the same idle uplinks
                results = []
                started = time.process_time()
                for origin, start, sizes in txs:
                    results.append(
                        txflow.earliest_arrivals(model, origin, start, sizes, kernel=kind == "c")
                    )
                cpu = time.process_time() - started
                per_tx[kind].append(cpu / len(txs) * 1000)
                if kind == "python":
                    reference = [(s.arrival, s.source, s.tick, s.invs, s.fetches) for s in results]
                else:
                    got = [(s.arrival, s.source, s.tick, s.invs, s.fetches) for s in results]
                    if got != reference:
                        print("the kernel's results differ from Python's", file=sys.stderr)
                        return 1
                del results
        py, c = statistics.median(per_tx["python"]), statistics.median(per_tx["c"])
        print(
            f"nodes {nodes}: python {', '.join(f'{x:.2f}' for x in per_tx['python'])} ms/tx, "
            f"c {', '.join(f'{x:.3f}' for x in per_tx['c'])} ms/tx "
            f"(medians {py:.2f} / {c:.3f}: {py / c:.1f}x), results identical",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
