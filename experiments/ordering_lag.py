"""How late blocks are ordered, and what that costs their txs (issue 8; PROTOCOL.md §14 question 2).

For one run, every block of the observer's final best chain gets its ordering lag: LS height(B)
minus the height of its milestone link. S6 makes every tx of a block with a lag above
``sortition_freshness`` INVALID(``sortition``), and R2 takes R(h) from a block whose lag is above
``reward_freshness``. Prints the lag distribution, the share of blocks beyond each bound and the
verdicts of all TRANSFER inclusions. ``--oldest-tip`` runs the same scenario with templates whose
tip link prefers the oldest unlinked pending block instead of the newest (§3.4's tie-break).
``--json PATH`` also writes the run's full metrics (the ones ``dagchain-sim run`` writes, wall
fields included) beside the lags, so one large run gives both (section 2c of docs/experiments.md).

    python experiments/ordering_lag.py experiments/assignment.toml \\
        --set nodes=100 --set miners.count=100 --set duration_s=200 --set chain.sortition_k=4 \\
        --set 'chain.sortition_weighting="uniform"' --set chain.sortition_c=1/30
"""

import argparse
import collections
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dagchain import template
from dagchain.chain import Chain
from dagchain.errors import Reason
from dagchain.transactions import TxKind
from dagchain.types import BlockId
from simulator.scenario import load_scenario
from simulator.sim_node import SimNode
from simulator.simulation import OBSERVER, Simulation


def oldest_first_tip_links(
    chain: Chain,
    ms_link: BlockId,
    previous: bytes,
    own_root: BlockId | None,
    *,
    oldest_first: bool = True,
) -> tuple[BlockId, ...]:
    """§3.4's tip links with the opposite tie-break: the *oldest* unlinked pending blocks first.

    ``--oldest-tip`` swaps it in for one run (PROTOCOL.md §14, question 2).
    """
    return ORIGINAL_TIP_LINKS(chain, ms_link, previous, own_root, oldest_first=oldest_first)


ORIGINAL_TIP_LINKS = template.choose_tip_links


def measure(
    scenario_path: Path, overrides: Sequence[str], oldest_tip: bool = False
) -> dict[str, Any]:
    """Run once; lags (lag -> blocks), tx verdicts (reason label -> inclusions) and the bounds."""
    scenario = load_scenario(scenario_path, overrides)
    sim = Simulation(scenario)
    if oldest_tip:
        template.choose_tip_links = oldest_first_tip_links
    try:
        metrics = sim.run().metrics
    finally:
        template.choose_tip_links = ORIGINAL_TIP_LINKS
    observer = sim.nodes[OBSERVER]
    if not isinstance(observer, SimNode):  # pragma: no cover - node 0 is a full node
        raise TypeError("the observer must be a full node")
    chain = observer.chain
    best = chain.best_chain()
    height = {bid: i for i, bid in enumerate(best)}
    lags: collections.Counter[int] = collections.Counter()
    verdicts: collections.Counter[str] = collections.Counter()
    for ms in best[1:]:
        delta = chain.level_set(ms)
        if delta is None:  # pragma: no cover - best-chain milestones are evaluated
            continue
        for bid in delta.order:
            block = chain.get_block(bid)
            ls = chain.ls_height(bid)
            if block is None or ls is None:  # pragma: no cover
                continue
            link = height.get(block.header.milestone_link)
            if link is not None:
                lags[ls - link] += 1
        for tx, reason in chain.level_set_txs(delta):
            if tx.kind == TxKind.TRANSFER:
                verdicts[Reason(reason).label] += 1
    return {
        "lags": dict(sorted(lags.items())),
        "verdicts": dict(sorted(verdicts.items())),
        "sortition_freshness": sim.params.sortition_freshness,
        "reward_freshness": sim.params.reward_freshness,
        "txs_offered": metrics["txs_offered"],
        "txs_confirmed": metrics["txs_confirmed"],
        "metrics": metrics,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument(
        "--oldest-tip", action="store_true", help="templates link the oldest unlinked tip first"
    )
    parser.add_argument(
        "--json",
        type=Path,
        help="also write the run's full metrics (as dagchain-sim writes them) with the lags here",
    )
    args = parser.parse_args(argv)
    result = measure(args.scenario, args.overrides, args.oldest_tip)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    lags: dict[int, int] = result["lags"]
    total = sum(lags.values())
    print(f"blocks ordered: {total}")
    print("lag distribution: " + ", ".join(f"{k}: {v}" for k, v in lags.items()))
    for name in ("sortition_freshness", "reward_freshness"):
        bound = result[name]
        late = sum(v for k, v in lags.items() if k > bound)
        print(f"lag > {name} ({bound}): {late} blocks, {late / total if total else 0.0:.3f}")
    inclusions = sum(result["verdicts"].values())
    print(
        f"tx inclusions: {inclusions}; "
        + ", ".join(f"{k} {v} ({v / inclusions:.3f})" for k, v in result["verdicts"].items())
    )
    print(f"txs offered {result['txs_offered']}, confirmed {result['txs_confirmed']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
