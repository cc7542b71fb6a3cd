"""The network-level double spend (``attack.model = "network"``, simulator/network_attack.py).

The attacker is a node of the simulated network whose blocks are real (template, PoW) and travel
through the network when it releases them; the honest nodes' own fork choice (F2, PROTOCOL.md
§4.2) decides. With zero delay the race is the textbook one, so the success rate must match
Rosenfeld's formula with the attacker's give-up cut-off (adversary.double_spend_probability_cutoff).
"""

import math

import pytest

from simulator.adversary import (
    double_spend_probability,
    double_spend_probability_cutoff,
    selfish_revenue,
)
from simulator.network_attack import NetworkDoubleSpend
from simulator.scenario import ScenarioError, load_scenario
from simulator.simulation import Simulation

ZERO_DELAY_TWO_MINERS = (
    'network.delay="fixed:0"',
    "network.processing_ms=0",
    "miners.count=2",
    "chain.block_rate=1",
    "chain.milestone_interval_s=1",
    "chain.retarget=false",
)
"""Two honest miners, b = 1, zero delay, no retarget: the closed forms' setting."""


def network_attack(
    q: float, z: int, deficit: int, trials: int, seed: int, *extra: str
) -> Simulation:
    """Four nodes (two honest miners, the attacker at node 2), b = 1, zero delay, no retarget."""
    sc = load_scenario(
        None,
        [
            *ZERO_DELAY_TWO_MINERS,
            'attack.kind="double_spend"',
            'attack.model="network"',
            f"attack.share={q}",
            f"attack.confirmations={z}",
            f"attack.trials={trials}",
            f"attack.give_up_deficit={deficit}",
            *extra,
        ],
        nodes=4,
        duration_s=100_000,
        seed=seed,
    )
    return Simulation(sc)


def test_cutoff_formula_by_hand_and_in_the_limit() -> None:
    # deficit 1, z = 1: the attacker wins if its next milestone comes first (q), or after one
    # honest milestone it wins the next one (p q); it gives up at the second honest one.
    assert double_spend_probability_cutoff(0.1, 1, 1) == pytest.approx(0.1 + 0.9 * 0.1)
    assert double_spend_probability_cutoff(0.3, 1, 1) == pytest.approx(0.3 + 0.7 * 0.3)
    for q, z in [(0.1, 6), (0.3, 2), (0.4, 6), (0.45, 3)]:
        assert double_spend_probability_cutoff(q, z, 2_000) == pytest.approx(
            double_spend_probability(q, z), abs=1e-9
        )
        assert double_spend_probability_cutoff(q, z, 5) < double_spend_probability(q, z)
    assert double_spend_probability_cutoff(0.5, 3, 4) < 1.0


@pytest.mark.parametrize(("q", "z", "deficit", "trials"), [(0.3, 2, 4, 300), (0.15, 1, 3, 200)])
def test_zero_delay_success_matches_the_race_formula(
    q: float, z: int, deficit: int, trials: int
) -> None:
    sim = network_attack(q, z, deficit, trials, seed=7)
    metrics = sim.run().metrics
    assert metrics["attack_model"] == "network"
    assert metrics["double_spend_trials"] == trials
    assert metrics["double_spend_aborted"] == 0  # zero delay: no honest fork below F
    exact = double_spend_probability_cutoff(q, z, deficit)
    assert metrics["double_spend_closed_form_cutoff"] == round(exact, 6)
    se = math.sqrt(exact * (1 - exact) / trials)
    rate = metrics["double_spend_success_rate"]
    assert abs(rate - exact) < 3 * se, (rate, exact, se)


def test_a_success_is_a_real_reorganisation_of_the_honest_nodes() -> None:
    sim = network_attack(0.3, 1, 3, 40, seed=3)
    metrics = sim.run().metrics
    attacker = sim.scenario.mining_nodes
    wins = metrics["double_spend_wins"]
    assert wins > 0
    records = sim.recorder.blocks
    own = {bid for bid, rec in records.items() if rec.miner == attacker}
    assert own
    for node in sim.full_nodes:  # every honest node's own fork choice took attacker milestones
        on_best = own.intersection(node.chain.best_chain())
        assert len(on_best) >= wins, node.index
    # After its last trial the attacker withholds nothing: every block it mined (released, or
    # relayed at once after the attack) reached every node and passed every rule there.
    assert isinstance(sim.attacker, NetworkDoubleSpend)
    assert sim.attacker.done
    assert sim.attacker.withheld == []
    assert metrics["blocks_rejected"] == 0
    assert 0 < metrics["attacker_blocks_released"] <= len(own)
    for node in sim.full_nodes:
        assert all(node.chain.has_block(bid) for bid in own), node.index
    assert "attacker" in metrics["revenue_share"]
    # The run stops once the trials are done; rates are per simulated second actually run.
    assert metrics["simulated_s"] < sim.scenario.duration_s
    assert metrics["blocks_per_s"] == pytest.approx(
        metrics["blocks"] / metrics["simulated_s"], rel=1e-4
    )


def test_the_race_model_stays_the_default_and_unknown_models_fail() -> None:
    base = ['attack.kind="double_spend"', "attack.share=0.2", "attack.trials=300"]
    default = Simulation(load_scenario(None, base, nodes=4, duration_s=5)).run().metrics
    race = (
        Simulation(load_scenario(None, [*base, 'attack.model="race"'], nodes=4, duration_s=5))
        .run()
        .metrics
    )
    for m in (default, race):
        del m["wall_s"], m["events_per_s"]
    assert default == race
    assert default["attack_model"] == "milestone-race"
    # INTERFACES.md: revenue_share is per miner and attacker, the race attacker included
    assert default["revenue_share"]["attacker"] == default["attacker_revenue_share"]
    assert 0 < default["attacker_revenue_share"] < 0.2
    with pytest.raises(ScenarioError, match=r"attack\.model.*'race' or 'network'"):
        load_scenario(None, [*base, 'attack.model="mesh"'])
    with pytest.raises(ScenarioError, match="needs a full node that does not mine"):
        load_scenario(None, [*base, 'attack.model="network"', "miners.count=4"], nodes=4)
    with pytest.raises(ScenarioError, match=r"attack\.share > 0"):
        load_scenario(None, ['attack.kind="double_spend"', 'attack.model="network"'])


def selfish_run(
    alpha: float, duration: float, seed: int, *extra: str, nodes: int = 4
) -> Simulation:
    sc = load_scenario(
        None,
        [
            *ZERO_DELAY_TWO_MINERS,
            'attack.kind="selfish"',
            'attack.model="network"',
            f"attack.share={alpha}",
            *extra,
        ],
        nodes=nodes,
        duration_s=duration,
        seed=seed,
    )
    return Simulation(sc)


def test_zero_delay_selfish_mining_follows_eyal_sirer() -> None:
    alpha = 0.35
    sim = selfish_run(alpha, 4_000, seed=11)
    metrics = sim.run().metrics
    assert metrics["attack_model"] == "network"
    # Zero delay: every honest node hears the honest milestone before the attacker's answer.
    assert metrics["selfish_ties"] > 100
    assert metrics["selfish_gamma_measured"] < 0.05
    exact = selfish_revenue(alpha, metrics["selfish_gamma_measured"])
    assert metrics["attacker_revenue_share_closed_form"] == round(exact, 6)
    # Batch means over the observer's best chain (selfish mining makes neighbours correlated).
    attacker = sim.scenario.mining_nodes
    own = {b for b, r in sim.recorder.blocks.items() if r.miner == attacker}
    best = sim.observer.chain.best_chain()[1:]
    k = 20
    n = len(best) // k
    shares = [sum(b in own for b in best[i * n : (i + 1) * n]) / n for i in range(k)]
    mean = sum(shares) / k
    se = math.sqrt(sum((s - mean) ** 2 for s in shares) / (k - 1) / k)
    share = metrics["attacker_milestone_share"]
    assert share == pytest.approx(sum(b in own for b in best) / len(best), abs=1e-6)
    assert abs(share - exact) < 3 * se, (share, exact, se)
    # The ledger's revenue is measured, not derived: every withheld block was released at the
    # end and honest nodes ordered it (F3), so the attacker's balance is on the best chain.
    assert metrics["attacker_revenue_share"] == metrics["revenue_share"]["attacker"]
    assert metrics["attacker_blocks_released"] == len(own)


def test_gamma_emerges_from_the_network() -> None:
    # A sparse network with real latencies: neighbours of the attacker that the honest
    # milestone reaches late take the attacker's block first and mine on it.
    sim = selfish_run(
        0.35,
        600,
        1,
        'network.delay="regions2019"',
        "network.processing_ms=2",
        "network.degree=2",
        "miners.count=10",
        nodes=30,
    )
    metrics = sim.run().metrics
    assert metrics["selfish_ties"] >= 20
    assert 0.0 < metrics["selfish_gamma_measured"] < 1.0
