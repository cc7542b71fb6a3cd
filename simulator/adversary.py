"""Adversaries at the milestone-chain level, driven by the engine and the ``adversary`` stream.

Fork choice (F2) looks at milestones only, so both classic attacks are races between two Poisson
streams of milestones, the attacker's (share q or alpha) and the honest network's. These models
run thousands of trials in seconds and are checked against the closed forms below
(tests/simulator/test_validation.py). They are *milestone-race models*, not full-network runs:
the attacker's blocks do not travel through the simulated network (``metrics.json`` says so in
``attack_model``); the honest network of the same run mines with the remaining 1 - share.

- ``DoubleSpendRace``: the merchant accepts after z confirmations; the attacker mines a private
  branch from the fork point (the parent of the milestone holding the payment) and wins if, at
  any time after the merchant's z-th confirmation, its branch is at least as long as the honest
  one. With F2's strict chainwork rule that is an attacker holding a one-block head start, the
  assumption of Rosenfeld (2014); the success probability is then exactly
  ``double_spend_probability`` (Rosenfeld; Grunspan and Pérez-Marco 2017: I_{4pq}(z, 1/2)).
- ``SelfishMiner``: the Eyal-Sirer (2014) strategy with gamma, the fraction of honest power that
  mines on the attacker's branch during a tie; revenue share against ``selfish_revenue``.
"""

import math
import random
from typing import Any, final

from dagchain.params import ConsensusParams
from simulator.engine import Engine
from simulator.rng import RngStreams

GIVE_UP_PROBABILITY = 1e-12
"""The race stops once the attacker's chance to catch up, (q/p)^deficit, is below this."""


# ---------------------------------------------------------------------- closed forms
def double_spend_probability(q: float, z: int) -> float:
    """Rosenfeld / Grunspan-Pérez-Marco: 1 - Σ_{m=0}^{z} C(m+z-1, m)(p^z q^m - q^z p^m)."""
    p = 1.0 - q
    if q >= p:
        return 1.0
    total = 0.0
    for m in range(z + 1):
        total += math.comb(m + z - 1, m) * (p**z * q**m - q**z * p**m)
    return 1.0 - total


def double_spend_probability_cutoff(q: float, z: int, deficit: int) -> float:
    """Rosenfeld's race (one pre-mined block) for an attacker who gives up ``deficit`` behind.

    Events are milestones, the attacker's with probability q. The lead L = a - h starts at 1
    (the pre-mined block); the attacker gives up as soon as L <= -deficit, and wins once the
    honest branch holds z milestones and L >= 1. Exact: the lead at each honest milestone up to
    the z-th (a geometric number of attacker milestones per honest one), then gambler's ruin
    between -deficit and +1. ``deficit`` -> infinity gives ``double_spend_probability``.
    """
    if deficit < 1:
        raise ValueError("deficit must be at least 1")
    p = 1.0 - q
    if q <= 0.0:
        return 0.0
    won = 0.0
    dist: dict[int, float] = {1: 1.0}
    for k in range(1, z + 1):  # the k-th honest milestone
        step: dict[int, float] = {}
        for lead, weight in dist.items():
            sure = z - k + 2 - lead  # g >= sure attacker milestones first: ahead to the end
            if sure <= 0:
                won += weight
                continue
            won += weight * q**sure
            for g in range(sure):
                after = lead + g - 1
                if after > -deficit:
                    step[after] = step.get(after, 0.0) + weight * q**g * p
        dist = step
    span = deficit + 1
    for lead, weight in dist.items():  # lead <= 0 here: ruin between -deficit and +1
        i = lead + deficit
        if q == p:
            won += weight * i / span
        elif q < p:  # (1 - r^i) / (1 - r^span), r = p/q > 1, written with x = q/p < 1
            x = q / p
            won += weight * (x ** (span - i) - x**span) / (1.0 - x**span)
        else:
            r = p / q
            won += weight * (1.0 - r**i) / (1.0 - r**span)
    return won


def nakamoto_probability(q: float, z: int) -> float:
    """Nakamoto (2008), section 11: the Poisson approximation of the attacker's progress."""
    p = 1.0 - q
    lam = z * q / p
    total = 1.0
    for k in range(z + 1):
        poisson = math.exp(-lam) * lam**k / math.factorial(k)
        total -= poisson * (1 - (q / p) ** (z - k))
    return total


def selfish_revenue(alpha: float, gamma: float) -> float:
    """Eyal-Sirer (2014), eq. (8): the selfish pool's share of the main chain's blocks."""
    a, g = alpha, gamma
    num = a * (1 - a) ** 2 * (4 * a + g * (1 - 2 * a)) - a**3
    return num / (1 - a * (1 + (2 - a) * a))


# ---------------------------------------------------------------------- race models
@final
class DoubleSpendRace:
    """One double-spend race per trial on a shared engine (milestone-race model)."""

    def __init__(self, q: float, z: int, milestone_rate_per_ms: float, rng: random.Random) -> None:
        if not 0 < q < 1:
            raise ValueError("attacker share q must be in (0, 1)")
        self.q = q
        self.z = z
        self.rate = milestone_rate_per_ms
        self.rng = rng
        p = 1.0 - q
        self.give_up = (
            math.inf if q >= p else math.ceil(math.log(GIVE_UP_PROBABILITY) / math.log(q / p))
        )
        self.final_attacker = 0
        self.final_total = 0

    def trial(self, engine: Engine) -> bool:
        """Run one race to its end on ``engine``; True if the attacker's branch caught up."""
        state = {"honest": 0, "attacker": 0, "done": False, "won": False}
        rng, q, rate = self.rng, self.q, self.rate

        def check() -> None:
            h, a = state["honest"], state["attacker"]
            if h >= self.z and a >= h:
                state["done"] = state["won"] = True
            elif h - a > self.give_up:
                state["done"] = True

        def honest() -> None:
            if state["done"]:
                return
            state["honest"] += 1
            check()
            engine.schedule(rng.expovariate((1 - q) * rate), honest)

        def attacker() -> None:
            if state["done"]:
                return
            state["attacker"] += 1
            check()
            engine.schedule(rng.expovariate(q * rate), attacker)

        engine.schedule(rng.expovariate((1 - q) * rate), honest)
        engine.schedule(rng.expovariate(q * rate), attacker)
        engine.run()  # each stream stops rescheduling once the race is decided
        self.final_attacker += state["attacker"] if state["won"] else 0
        self.final_total += state["attacker"] if state["won"] else state["honest"]
        return bool(state["won"])

    @property
    def attacker_revenue_share(self) -> float:
        """The attacker's share of the final chain's milestones over the trials run so far.

        A won race puts the attacker's ``a`` milestones on the final chain, a lost or abandoned
        one the honest ``h``: the cost of the attack in block rewards (below ``q`` because every
        abandoned private branch earns nothing).
        """
        return self.final_attacker / self.final_total if self.final_total else 0.0


@final
class SelfishMiner:
    """Eyal-Sirer selfish mining over ``blocks`` milestone events (milestone-race model)."""

    def __init__(
        self, alpha: float, gamma: float, milestone_rate_per_ms: float, rng: random.Random
    ) -> None:
        self.alpha = alpha
        self.gamma = gamma
        self.rate = milestone_rate_per_ms
        self.rng = rng
        self.lead = 0
        self.tie = False
        self.attacker_blocks = 0
        self.honest_blocks = 0
        self.events = 0

    def _attacker_found(self) -> None:
        if self.tie:  # the attacker extends its branch of the tie: both its blocks win
            self.attacker_blocks += 2
            self.tie = False
        else:
            self.lead += 1

    def _honest_found(self) -> None:
        if self.tie:
            self.tie = False
            if self.rng.random() < self.gamma:  # honest block on the attacker's branch
                self.attacker_blocks += 1
                self.honest_blocks += 1
            else:
                self.honest_blocks += 2
        elif self.lead == 0:
            self.honest_blocks += 1
        elif self.lead == 1:  # publish: a tie
            self.lead = 0
            self.tie = True
        elif self.lead == 2:  # publish both: the honest block is orphaned
            self.lead = 0
            self.attacker_blocks += 2
        else:  # publish one, stay ahead
            self.lead -= 1
            self.attacker_blocks += 1

    def run(self, engine: Engine, blocks: int) -> float:
        """Run ``blocks`` milestone events; the attacker's share of main-chain blocks."""
        rng = self.rng

        def step() -> None:
            self.events += 1
            if rng.random() < self.alpha:
                self._attacker_found()
            else:
                self._honest_found()
            if self.events < blocks:
                engine.schedule(rng.expovariate(self.rate), step)

        engine.schedule(rng.expovariate(self.rate), step)
        engine.run()
        self.attacker_blocks += self.lead  # the private lead is published at the end
        self.lead = 0
        total = self.attacker_blocks + self.honest_blocks
        return self.attacker_blocks / total if total else 0.0


# ---------------------------------------------------------------------- scenario glue
def run_attack(scenario: Any, params: ConsensusParams, streams: RngStreams) -> dict[str, Any]:
    """The ``metrics.json`` keys of the scenario's adversary (empty for ``attack.kind = none``)."""
    attack = scenario.attack
    if attack.kind == "none":
        return {}
    rate = 1.0 / params.milestone_interval_ms
    rng = streams.stream("adversary")
    engine = Engine()
    if attack.kind == "double_spend":
        race = DoubleSpendRace(attack.share, attack.confirmations, rate, rng)
        wins = sum(race.trial(engine) for _ in range(attack.trials))
        return {
            "attack_model": "milestone-race",
            "double_spend_success_rate": round(wins / attack.trials, 6),
            "double_spend_trials": attack.trials,
            "double_spend_closed_form": round(
                double_spend_probability(attack.share, attack.confirmations), 6
            ),
            "double_spend_nakamoto_2008": round(
                nakamoto_probability(attack.share, attack.confirmations), 6
            ),
            "attacker_revenue_share": round(race.attacker_revenue_share, 6),
        }
    miner = SelfishMiner(attack.share, attack.gamma, rate, rng)
    share = miner.run(engine, attack.trials)
    return {
        "attack_model": "milestone-race",
        "attacker_revenue_share": round(share, 6),
        "attacker_revenue_share_closed_form": round(selfish_revenue(attack.share, attack.gamma), 6),
        "attacker_milestone_events": attack.trials,
    }


__all__ = [
    "DoubleSpendRace",
    "SelfishMiner",
    "double_spend_probability",
    "double_spend_probability_cutoff",
    "nakamoto_probability",
    "run_attack",
    "selfish_revenue",
]
