"""Does the tx relay keep up with the offered load? Txs in flight, their age, and uplink queues.

For one run with ``network.tx_relay = "flow"``, prints once per simulated second: how many txs
are still spreading (their search has not reached every node), the age of those txs since the
wallet offered them (p10/p50/p90), how many nodes each has reached (p10/p50/p90), and, per
``regions2019`` region, how long a message queued now would wait for the node's uplink
(p50/p90). A relay that keeps up holds a level number of txs in flight, each a couple of seconds
old; one that does not holds ever more, ever older (docs/experiments.md, "With a prefunded
wallet"). Runs the mining and the load without the final drain.

    python experiments/relay_backlog.py experiments/capacity_10k.toml --nodes 2000 \\
        --duration 6 --set load.tps=4096 --set load.prefunded_outputs=65536
"""

import argparse
from collections.abc import Sequence
from pathlib import Path

from simulator.network import REGIONS
from simulator.scenario import load_scenario
from simulator.simulation import Simulation


def _q(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(len(values) * p))] if values else 0.0


def report(sim: Simulation) -> str:
    """One line: txs in flight, their age and reach, uplink queues by region."""
    now = sim.engine.now_ms
    flow = sim.txflow
    if flow is None:
        raise ValueError('needs network.tx_relay = "flow"')
    offered = sim.recorder.tx_offered_ms
    ages: list[float] = []
    reached: list[float] = []
    for txid, spread in flow.in_flight():
        ages.append((now - offered.get(txid, now)) / 1000.0)
        reached.append(sum(1 for at in spread.arrival.values() if at <= now))
    ages.sort()
    reached.sort()
    net = sim.network
    queues: list[str] = []
    for r, name in enumerate(REGIONS):
        waits = sorted(
            net.uplink_backlog_ms(i, now) / 1000.0 for i in range(net.nodes) if net.region[i] == r
        )
        if waits:
            queues.append(f"{name} {_q(waits, 0.5):.2f}/{_q(waits, 0.9):.2f}")
    return (
        f"t={now / 1000:.0f} s: {len(ages):,} txs in flight of {sim.load.offered:,} offered, "
        f"age p10/p50/p90 {_q(ages, 0.1):.2f}/{_q(ages, 0.5):.2f}/{_q(ages, 0.9):.2f} s, "
        f"nodes reached {_q(reached, 0.1):.0f}/{_q(reached, 0.5):.0f}/{_q(reached, 0.9):.0f}; "
        f"uplink queue p50/p90 s: {', '.join(queues)}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--duration", type=float)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--set", action="append", default=[], metavar="TABLE.KEY=VALUE")
    args = parser.parse_args(argv)
    scenario = load_scenario(
        args.scenario, args.set, nodes=args.nodes, duration_s=args.duration, seed=args.seed
    )
    if scenario.network.tx_relay != "flow":
        parser.error('needs network.tx_relay = "flow"')
    sim = Simulation(scenario)
    for t in range(1, int(scenario.duration_s) + 1):
        sim.engine.schedule_at(t * 1000.0, lambda: print(report(sim), flush=True))
    sim.start()
    sim.engine.run(until_ms=scenario.duration_s * 1000.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
