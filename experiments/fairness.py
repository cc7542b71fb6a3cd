"""Fairness and pooling (issue 8, experiment 5; PROTOCOL.md §8.3 C3): who earns what, how steadily.

Runs one scenario (default ``experiments/fairness.toml``: a 50 % pool beside ten 5 % miners) under
three configurations, ``sdag`` with share weighting, ``sdag`` with uniform weighting and
``nakamoto``, for each seed, and reads the observer's final best chain:

- ``blocks``: the miner's share of all mined blocks (closed form: its hash share s);
- ``revenue``: its share of all reward balances (block rewards, fees, milestone bonuses; R2, R7);
- ``intake`` / ``fees``: its share of the VALID txs packed / of their fees (C3 closed form:
  s² / Σ s_j² with share weighting, s with uniform weighting or without sortition);
- ``income_cv``: the coefficient of variation of the miner's income over windows of ``--window``
  simulated seconds (balance increase per window, from snapshots of the observer's balances taken
  after every level set; windows that start before ``--skip`` seconds are dropped). The closed
  form for a Poisson block count is 1 / sqrt(r · s · W) with r = λ (sdag) or 1/τ (nakamoto); the
  same law scaled to a day (W = 86,400 s) is printed beside it.

    python experiments/fairness.py experiments/fairness.toml --seeds 1 2 --out out/fairness
    python experiments/fairness.py --closed-form   # daily CV per share and block rate

Writes ``fairness.csv`` (one row per configuration, seed and miner) and prints a markdown summary
(the pool, and the mean over the small miners) for docs/experiments.md.
"""

import argparse
import csv
import itertools
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dagchain.errors import Reason
from dagchain.transactions import TxKind
from simulator.scenario import Scenario, load_scenario
from simulator.sim_node import SimNode
from simulator.simulation import OBSERVER, Simulation

CONFIGS: dict[str, list[str]] = {
    "sdag share": ['protocol="sdag"', 'chain.sortition_weighting="share"'],
    "sdag uniform": ['protocol="sdag"', 'chain.sortition_weighting="uniform"'],
    "nakamoto": ['protocol="nakamoto"'],
}
DAY_S = 86_400.0


def run_config(scenario: Scenario, window_s: float, skip_s: float) -> list[dict[str, Any]]:
    """One run; one row per miner."""
    sim = Simulation(scenario)
    node0 = sim.nodes[OBSERVER]
    if not isinstance(node0, SimNode):  # pragma: no cover - node 0 is a full node
        raise TypeError("the observer must be a full node")
    observer = node0.chain
    snapshots: list[tuple[float, dict[bytes, int]]] = []
    original = sim.recorder.on_level_set

    def on_level_set(chain: Any, delta: Any, now_ms: float) -> None:
        original(chain, delta, now_ms)
        balances = {bytes(root): rec.balance for root, rec in chain.roots().items()}
        if snapshots and snapshots[-1][0] == now_ms / 1000.0:
            snapshots[-1] = (now_ms / 1000.0, balances)
        else:
            snapshots.append((now_ms / 1000.0, balances))

    setattr(sim.recorder, "on_level_set", on_level_set)  # noqa: B010 - instance hook
    sim.run()
    shares = scenario.honest_shares()
    miners = range(len(shares))
    root_of = {i: sim.nodes[i].root for i in miners}

    blocks = dict.fromkeys(miners, 0)
    for rec in sim.recorder.blocks.values():
        blocks[rec.miner] += 1
    # VALID txs packed per miner and their fees (fee = inputs - outputs, inputs looked up among
    # the outputs of genesis and of earlier VALID txs).
    genesis = bytes(observer.genesis_id)  # the sim faucet outpoints are (genesis id, i)
    outputs = {(genesis, j): sim.params.faucet_amount for j in range(sim.params.faucet_outputs)}
    intake = dict.fromkeys(miners, 0)
    fees = dict.fromkeys(miners, 0)
    for ms in observer.best_chain()[1:]:
        delta = observer.level_set(ms)
        if delta is None:  # pragma: no cover - best-chain milestones are evaluated
            continue
        i = 0
        for bid in delta.order:
            block = observer.get_block(bid)
            mined = sim.recorder.blocks.get(bytes(bid))
            for tx in block.txs if block is not None else ():
                if delta.reasons[i] == Reason.VALID and tx.kind == TxKind.TRANSFER:
                    for j, out in enumerate(tx.outputs):
                        outputs[(bytes(tx.txid), j)] = out.amount
                    if mined is not None:
                        paid = [outputs.get((bytes(t.txid), t.out_index)) for t in tx.inputs]
                        intake[mined.miner] += 1
                        if None not in paid:
                            fee = sum(p for p in paid if p is not None)
                            fees[mined.miner] += fee - sum(o.amount for o in tx.outputs)
                i += 1
    final = {bytes(r): rec.balance for r, rec in observer.roots().items()}
    total_balance = sum(final.values()) or 1
    total_blocks = sum(blocks.values()) or 1
    total_intake = sum(intake.values()) or 1
    total_fees = sum(fees.values()) or 1
    sum_sq = sum(s * s for s in shares)
    rate = (
        scenario.block_rate
        if scenario.protocol == "sdag"
        else 1 / scenario.chain.milestone_interval_s
    )
    uniform = scenario.protocol == "nakamoto" or scenario.chain.sortition_weighting == "uniform"
    duration = scenario.duration_s
    edges = [skip_s + k * window_s for k in range(int((duration - skip_s) // window_s) + 1)]
    rows = []
    for i in miners:
        root = root_of[i]
        incomes = []
        if root is not None and len(edges) >= 2:
            levels = [_balance_at(snapshots, bytes(root), t) for t in edges]
            incomes = [b - a for a, b in itertools.pairwise(levels)]
        mean = statistics.fmean(incomes) if incomes else 0.0
        cv = statistics.pstdev(incomes) / mean if len(incomes) >= 2 and mean > 0 else float("nan")
        s = shares[i]
        rows.append(
            {
                "miner": i,
                "hash_share": round(s, 6),
                "block_share": round(blocks[i] / total_blocks, 6),
                "revenue_share": round(final.get(bytes(root), 0) / total_balance, 6)
                if root is not None
                else 0.0,
                "intake_share": round(intake[i] / total_intake, 6),
                "fee_share": round(fees[i] / total_fees, 6),
                "intake_closed_form": round(s if uniform else s * s / sum_sq, 6),
                "windows": len(incomes),
                "income_cv": round(cv, 4),
                "income_cv_closed_form": round(1 / math.sqrt(rate * s * window_s), 4),
                "day_cv_closed_form": round(1 / math.sqrt(rate * s * DAY_S), 5),
                "txs_packed": intake[i],
            }
        )
    return rows


def _balance_at(snapshots: list[tuple[float, dict[bytes, int]]], root: bytes, t: float) -> int:
    """The root's balance in the last snapshot taken at or before ``t`` (0 before any)."""
    value = 0
    for at, balances in snapshots:
        if at > t:
            break
        value = balances.get(root, 0)
    return value


CLOSED_FORM_RATES = {
    "sdag, lambda = 8/s (mainnet: b = 80, tau = 10 s; these runs)": 8.0,
    "nakamoto, tau = 2 s (these runs)": 0.5,
    "nakamoto, tau = 10 s (mainnet tau)": 0.1,
    "Bitcoin, 600 s": 1 / 600,
}
CLOSED_FORM_SHARES = (0.0001, 0.001, 0.01, 0.05)


def closed_form_table() -> str:
    """Markdown: CV of a miner's daily block count, 1 / sqrt(r * s * 86,400), per rate and share."""
    lines = [
        "| blocks earning rewards | " + " | ".join(f"s = {s:g}" for s in CLOSED_FORM_SHARES) + " |",
        "|---|" + "---:|" * len(CLOSED_FORM_SHARES),
    ]
    for name, rate in CLOSED_FORM_RATES.items():
        cells = [f"{1 / math.sqrt(rate * s * DAY_S):.3g}" for s in CLOSED_FORM_SHARES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", type=Path, nargs="?")
    parser.add_argument("--closed-form", action="store_true", help="print the daily-CV table only")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--window", type=float, default=60.0, help="income window, seconds")
    parser.add_argument("--skip", type=float, default=60.0, help="drop windows before this time")
    parser.add_argument("--configs", nargs="+", choices=sorted(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.closed_form:
        print(closed_form_table())
        return 0
    if args.scenario is None or args.out is None:
        parser.error("a scenario and --out are needed unless --closed-form")

    table: list[dict[str, Any]] = []
    for name in args.configs:
        for seed in args.seeds:
            scenario = load_scenario(
                args.scenario, [*CONFIGS[name], *args.overrides, f"seed={seed}"]
            )
            rows = run_config(scenario, args.window, args.skip)
            table.extend({"config": name, "seed": seed, **row} for row in rows)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "fairness.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    print(summary(table))
    print(path)
    return 0


def summary(table: list[dict[str, Any]]) -> str:
    """Markdown: per configuration, the largest miner and the mean over the smallest ones."""
    keys = (
        "hash_share",
        "block_share",
        "revenue_share",
        "intake_share",
        "fee_share",
        "intake_closed_form",
        "income_cv",
        "income_cv_closed_form",
        "day_cv_closed_form",
    )
    lines = [
        "| config | miner | " + " | ".join(keys) + " |",
        "|---|---|" + "---:|" * len(keys),
    ]
    for name in dict.fromkeys(r["config"] for r in table):
        rows = [r for r in table if r["config"] == name]
        top = max(r["hash_share"] for r in rows)
        low = min(r["hash_share"] for r in rows)
        for label, pick in (("largest", top), ("small (mean)", low)):
            chosen = [r for r in rows if r["hash_share"] == pick]
            cells = []
            for k in keys:
                values = [float(r[k]) for r in chosen if not math.isnan(float(r[k]))]
                cells.append(f"{statistics.fmean(values):.4g}" if values else "—")
            lines.append(f"| {name} | {label} ({pick:.3g}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
