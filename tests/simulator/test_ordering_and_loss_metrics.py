"""v2 metrics (INTERFACES.md dagchain-sim, PROTOCOL.md v2 §14).

Ordering lag, freshness losses, lost txs, the k-chain miner.
"""

import csv
from pathlib import Path
from typing import Any

import pytest

from dagchain.types import TxId
from simulator.output import write_outputs
from simulator.scenario import load_scenario
from simulator.simulation import RunResult, Simulation

# 30 equal chains at lambda = 8/s and tau = 2 s: a chain mines every 3.75 s, beyond S6's 3
# milestones (6 s) only if no other block links it, so one tip link leaves many blocks late.
WIDE = [
    "nodes=30",
    "miners.count=30",
    "duration_s=40",
    "chain.milestone_interval_s=2",
    "chain.block_rate=8",
    'network.delay="fixed:0.1"',
    "load.tps=5",
]


def run(overrides: list[str]) -> tuple[Simulation, RunResult]:
    sim = Simulation(load_scenario(None, overrides))
    return sim, sim.run()


def lag_rates(sim: Simulation, rows: list[dict[str, Any]]) -> tuple[float, float]:
    """late / unrewarded rates recomputed from blocks.csv rows (pending: overdue only)."""
    p = sim.params
    nxt = sim.observer.chain.best_height + 1
    late = [0, 0]
    counted = [0, 0]
    for row in rows:
        if row["ms_link_height"] == "":
            continue
        ms = int(row["ms_link_height"])
        for j, bound in enumerate((p.sortition_freshness, p.reward_freshness)):
            if row["ls_height"] != "":
                counted[j] += 1
                late[j] += int(row["ls_height"]) - ms > bound
            elif nxt - ms > bound:
                counted[j] += 1
                late[j] += 1
    return late[0] / counted[0], late[1] / counted[1]


@pytest.fixture(scope="module")
def one_and_eight() -> dict[int, tuple[Simulation, RunResult]]:
    return {k: run([*WIDE, f"chain.max_tip_links={k}"]) for k in (1, 8)}


def test_late_rate_depends_on_tip_links(one_and_eight: dict[int, Any]) -> None:
    late1 = one_and_eight[1][1].metrics["late_block_rate"]
    late8 = one_and_eight[8][1].metrics["late_block_rate"]
    assert late1 > 0.05, late1
    assert late8 < late1 / 3, (late1, late8)
    for _, result in one_and_eight.values():
        m = result.metrics
        assert 0 <= m["unrewarded_block_rate"] <= m["late_block_rate"] <= 1


def test_late_rates_match_blocks_csv(one_and_eight: dict[int, Any], tmp_path: Path) -> None:
    """The metric is the lag read from blocks.csv's ms_link_height and ls_height columns."""
    for k, (sim, result) in one_and_eight.items():
        out = tmp_path / str(k)
        write_outputs(out, sim.scenario, result)
        with (out / "blocks.csv").open() as fh:
            rows = list(csv.DictReader(fh))
        assert len(rows) == result.metrics["blocks"]
        chain = sim.observer.chain
        for row in rows[:50]:
            meta = chain.get_meta(bytes.fromhex(row["block_id"]))
            assert meta is not None
            assert int(row["ms_link_height"]) == meta.ms_link_height
        late, unrewarded = lag_rates(sim, rows)
        assert result.metrics["late_block_rate"] == round(late, 6)
        assert result.metrics["unrewarded_block_rate"] == round(unrewarded, 6)


class _Dropping:
    """Stands in for a node in the load's list: the ``drop_at``-th offered tx reaches nobody."""

    def __init__(self, node: Any, state: dict[str, Any]) -> None:
        self.node = node
        self.index = node.index
        self.state = state

    def offer_tx(self, txid: TxId, raw: bytes) -> str | None:
        self.state["n"] += 1
        if self.state["n"] == self.state["drop_at"]:
            self.state["dropped"] = txid
            return None
        result: str | None = self.node.offer_tx(txid, raw)
        return result


SMALL = ["nodes=8", "miners.count=6", "duration_s=40", "chain.milestone_interval_s=2", "load.tps=4"]


def test_txs_lost_counts_a_dropped_tx() -> None:
    _, base = run(SMALL)
    assert base.metrics["txs_lost"] == 0
    assert base.metrics["txs_offered"] > 40
    sim = Simulation(load_scenario(None, SMALL))
    state: dict[str, Any] = {"n": 0, "drop_at": 30, "dropped": None}
    sim.load.nodes = [_Dropping(n, state) for n in sim.load.nodes]
    metrics = sim.run().metrics
    assert state["dropped"] is not None
    assert metrics["txs_lost"] == 1
    assert state["dropped"] in sim.recorder.tx_offered_ms
    assert state["dropped"] not in sim.recorder.tx_confirmed_ms


def test_a_tx_waiting_for_its_parent_at_the_end_is_not_lost() -> None:
    """A full node holds a tx whose parent a reorganisation undid in its waiting set (decision 37)
    and answers ``mempool`` for it (``GET /v1/txs/{txid}``): ``txs_lost`` (INTERFACES.md,
    "neither confirmed nor in any mempool") does not count it. Here the run's end finds one pool
    tx held only in one node's waiting set, as a reorganisation at every holder would leave it."""
    sim = Simulation(load_scenario(None, [*SMALL, "load.tps=40"]))
    result = sim.run()
    assert result.metrics["txs_lost"] == 0
    full = sim.full_nodes
    pooled = [t for t in full[0].mempool.txids_by_fee_rate() if t in sim.recorder.tx_offered_ms]
    assert pooled, "the load should outrun 40 s of 2 s milestones"
    entry = full[0].mempool.get(pooled[0])
    assert entry is not None
    for node in full:
        node.mempool.remove(pooled[0])
    assert sim._metrics()["txs_lost"] == 1  # dropped everywhere: lost
    full[-1].service.waiting.hold(entry.tx, 0)
    assert sim._metrics()["txs_lost"] == 0


def test_multi_root_registers_k_chains_and_reports_fee_share() -> None:
    sim, result = run(
        [
            "nodes=10",
            "miners.count=8",
            "duration_s=40",
            "chain.milestone_interval_s=2",
            "load.tps=5",
            'attack.kind="multi_root"',
            "attack.share=0.4",
            "attack.roots=4",
        ]
    )
    m = result.metrics
    attacker = sim.multi_root
    assert attacker is not None
    assert m["attacker_roots"] == 4
    assert len(set(attacker.roots)) == 4
    chain = sim.observer.chain
    for root in attacker.roots:
        record = chain.get_root(root)
        assert record is not None
        meta = chain.get_meta(root)
        assert meta is not None
        assert meta.root == root
    assert m["attacker_hash_share"] == 0.4
    assert 0.05 < m["attacker_fee_share"] < 0.9
    assert m["revenue_share"]["attacker"] == m["attacker_revenue_share"] > 0.1
    assert "duplicate_tx_rate" in m
    assert sum(attacker.choices.values()) + 4 == attacker.blocks
    assert len(attacker.choices) > 1  # it mines more than one of its chains


def test_v2_table_prints_a_row_per_run(tmp_path: Path) -> None:
    """experiments/v2_table.py (docs/experiments.md "v2: freshness at scale") reads real outputs."""
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("v2_table", root / "experiments" / "v2_table.py")
    assert spec is not None
    assert spec.loader is not None
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    sim, result = run(["nodes=4", "miners.count=3", "duration_s=10", "load.tps=2"])
    write_outputs(tmp_path / "run", sim.scenario, result)
    line = table.row(tmp_path / "run")
    assert line.startswith("| run | ")
    assert line.count("|") == table.HEADER.count("|")


# 20 nodes on regions2019 at 8 blocks/s and 40 tx/s: the node a tx enters at often lags the
# observer, whose best chain said the spent output was confirmed, by a milestone or two.
LAGGING_ENTRY = [
    "nodes=20",
    "duration_s=30",
    "seed=3",
    "network.degree=6",
    "chain.milestone_interval_s=1",
    "chain.block_rate=8",
    "miners.count=8",
    "load.tps=40",
]


def test_a_tx_refused_for_a_missing_input_is_offered_again_and_not_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 24 item 4: the load wallet offers a tx again, as a wallet told 409 missing-input
    would, so ``txs_lost`` counts only real loss. Without re-offers the same run loses txs that
    never got past their entry node."""
    monkeypatch.setattr("simulator.load.REOFFER_MAX", 0)
    _, once = run(LAGGING_ENTRY)
    assert once.metrics["txs_reoffered"] == 0
    assert once.metrics["txs_lost_refused_on_offer"] > 0
    assert once.metrics["txs_lost"] >= once.metrics["txs_lost_refused_on_offer"]
    monkeypatch.undo()
    _, again = run(LAGGING_ENTRY)
    assert again.metrics["txs_reoffered"] > 0
    assert again.metrics["txs_lost_refused_on_offer"] == 0
    assert again.metrics["txs_lost"] == 0
