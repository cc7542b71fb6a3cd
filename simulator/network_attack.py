"""Adversaries as a node of the simulated network (``attack.model = "network"``).

The race models of simulator/adversary.py race two Poisson streams of milestones. Here the
attacker is one node of the network (node ``miners.count``, a full node that does not mine
honestly) with hash share ``attack.share``; its ``Miner`` is the honest one (real §3.4 template
from its own ``Chain``, real nonce search, at its share of the block rate). What differs is
relay: the simulation hands every block the attacker mines to ``withhold`` instead of pushing it
to its neighbours, and the strategy below decides when the withheld blocks leave, in mining
order, through the simulated network. Honest nodes then judge them with their real ``Chain``:
acceptance, F2 fork choice, reorganisation. Nothing here decides which branch wins.

The attacker node relays honest blocks and txs like any node and keeps its private branch best in
its own ``Chain`` with F8 (``invalidate``) where F2 alone would not: that is the operator healing
tool, used here as an attacker would patch its node.
"""

from collections.abc import Callable
from typing import Any, Protocol, final

from dagchain.chain import BlockOutcome, Chain
from dagchain.types import BlockId
from simulator.adversary import (
    double_spend_probability,
    double_spend_probability_cutoff,
    nakamoto_probability,
)

Release = Callable[[BlockId, bytes], None]
"""Send one withheld block from the attacker node through the simulated network."""


class AttackerNode(Protocol):
    """What the strategy reads of the attacker's node (a ``SimNode``)."""

    @property
    def index(self) -> int: ...

    @property
    def chain(self) -> Chain: ...

    @property
    def root(self) -> BlockId | None: ...


class HeadListener(Protocol):
    """The attacker's miner: told when F8 moved its node's best head (``Miner.on_head_change``)."""

    def on_head_change(self) -> None: ...


@final
class NetworkDoubleSpend:
    """Repeated double-spend attempts by a withholding node (Rosenfeld's strategy).

    One trial:

    1. Pre-mine: mine privately on the attacker's best milestone F. If an honest milestone
       extends F first, start again on it (not a trial). Once the attacker holds a private
       milestone A1 on F, the payment is sent: it is confirmed by the first honest milestone on
       F, H1. This is the one-block head start Rosenfeld (2014) assumes.
    2. Race: honest milestones on F are invalidated (F8) in the attacker's ``Chain``, so it keeps
       mining on its branch; it tracks the honest branch's chainwork from the honest milestones
       it receives.
    3. The merchant (node 0, the observer) ships when its best chain holds F and is
       ``confirmations`` milestones above it (F7: H1 has z confirmations). From then on the
       attacker releases every withheld block whenever its branch has strictly more chainwork
       than the honest branch it has seen.
    4. Success: the observer's best chain holds A1 (its fork choice reorganised the payment
       away). Failure: the honest branch is ``give_up_deficit`` milestones ahead of the private
       one in the attacker's view. Either way the withheld blocks are released, the F8 marks
       cleared and the next trial starts from the attacker's best head.

    A trial whose fork point leaves the attacker's best chain (a reorganisation below F among
    honest branches) is abandoned and counted in ``aborted``, not in ``trials``. After
    ``max_trials`` trials the node stops withholding and mines honestly.
    """

    def __init__(
        self,
        node: AttackerNode,
        observer: Chain,
        miner: HeadListener,
        release: Release,
        *,
        share: float,
        confirmations: int,
        max_trials: int,
        give_up_deficit: int,
    ) -> None:
        self.node = node
        self.index = node.index
        self.chain = node.chain
        self.observer = observer
        self.miner = miner
        self.release_one = release
        self.share = share
        self.z = confirmations
        self.max_trials = max_trials
        self.deficit = give_up_deficit
        self.withheld: list[tuple[BlockId, bytes]] = []
        self._withheld_ids: set[BlockId] = set()
        self.phase = "premine"
        self.fork = self.chain.best_id
        self.fork_height = self.chain.best_height
        self.first: BlockId | None = None
        self.invalidated: list[BlockId] = []
        self.honest_height = 0
        """Honest milestones above F on the invalidated branch, as the attacker has seen them."""
        self.honest_work = 0
        self.shipped = False
        self.trials = 0
        self.wins = 0
        self.aborted = 0
        self.restarts = 0
        self.released_blocks = 0
        self.trial_milestones = 0
        """Sum over finished trials of honest plus private milestones above F."""

    # ------------------------------------------------------------------ relay hook
    def withhold(self, block_id: BlockId, raw: bytes) -> bool:
        """The attacker node mined ``block_id``: keep it (True) unless the attack is over."""
        if self.phase == "done":
            return False
        self.withheld.append((block_id, raw))
        self._withheld_ids.add(block_id)
        return True

    def release(self) -> None:
        """Send every withheld block, in mining order."""
        for block_id, raw in self.withheld:
            self.release_one(block_id, raw)
        self.released_blocks += len(self.withheld)
        self.withheld.clear()
        self._withheld_ids.clear()

    # ------------------------------------------------------------------ events
    def on_accepted(self, node: int, outcome: BlockOutcome) -> None:
        """A node accepted blocks: the attacker's own node, or a reorganisation at the merchant."""
        if self.phase == "done":
            return
        if node == self.index:
            if self.phase == "premine":
                self._premine(outcome)
            else:
                self._race(outcome)
        elif node == 0 and outcome.reorgs and self.phase == "race":
            self._merchant()

    def _premine(self, outcome: BlockOutcome) -> None:
        chain = self.chain
        for bid in outcome.accepted:
            if bid in self._withheld_ids:
                block = chain.get_block(bid)
                meta = chain.get_meta(bid)
                if (
                    meta is not None
                    and block is not None
                    and meta.is_milestone
                    and block.header.milestone_link == self.fork
                ):
                    self.phase = "race"
                    self.first = bid
                    self.honest_height = 0
                    fork_snap = chain.get_snapshot(self.fork)
                    self.honest_work = fork_snap.chainwork if fork_snap is not None else 0
                    self.shipped = False
                    return
        if chain.best_id != self.fork:  # an honest milestone came first: pre-mine on it
            self.restarts += 1
            self.fork = chain.best_id
            self.fork_height = chain.best_height

    def _race(self, outcome: BlockOutcome) -> None:
        chain = self.chain
        fork, base = self.fork, self.fork_height
        moved = False
        for bid in outcome.accepted:
            if bid in self._withheld_ids:
                continue
            meta = chain.get_meta(bid)
            if meta is None or not meta.is_milestone:
                continue
            block = chain.get_block(bid)
            snap = chain.get_snapshot(bid)
            if block is None or snap is None:  # pragma: no cover - accepted milestones
                continue
            if block.header.milestone_link == fork:  # an honest H on F: keep it from being best
                self.invalidated.append(bid)
                chain.invalidate(bid)
                moved = True
            if self._on_honest_branch(bid, snap.height) and snap.chainwork > self.honest_work:
                self.honest_work = snap.chainwork
                self.honest_height = snap.height - base
        if moved:
            self.miner.on_head_change()
        best = chain.state.best
        if len(best) <= base + 1 or best[base] != fork or best[base + 1] != self.first:
            self._end(None)  # the private branch lost its fork point (a reorg below F)
            return
        private_height = len(best) - 1 - base
        if self.honest_height - private_height >= self.deficit:
            self._end(False)
        elif self.shipped and chain.best_snapshot.chainwork > self.honest_work and self.withheld:
            self.release()

    def _on_honest_branch(self, milestone: BlockId, height: int) -> bool:
        """True if ``milestone`` descends from an invalidated honest milestone on F."""
        chain, target = self.chain, self.fork_height + 1
        cursor = milestone
        while height > target:
            block = chain.get_block(cursor)
            if block is None:  # pragma: no cover - accepted milestones have accepted parents
                return False
            cursor = block.header.milestone_link
            height -= 1
        return height == target and cursor in self.invalidated

    def _merchant(self) -> None:
        best = self.observer.state.best
        base = self.fork_height
        if len(best) <= base or best[base] != self.fork:
            return
        if not self.shipped:
            if len(best) - 1 - base >= self.z:
                self.shipped = True  # the merchant ships: the payment has z confirmations
                if self.chain.best_snapshot.chainwork > self.honest_work and self.withheld:
                    self.release()
        elif len(best) > base + 1 and best[base + 1] == self.first:
            self._end(True)  # the merchant's node reorganised the payment away

    def _end(self, won: bool | None) -> None:
        """Close the trial (None: abandoned), release, clear F8 marks, start the next one."""
        chain = self.chain
        if won is None:
            self.aborted += 1
        else:
            self.trials += 1
            self.wins += won
            self.trial_milestones += self.honest_height + chain.best_height - self.fork_height
        self.release()
        for ms in self.invalidated:
            chain.reconsider(ms)
        self.invalidated.clear()
        self.miner.on_head_change()
        self.first = None
        self.shipped = False
        self.phase = "done" if self.trials >= self.max_trials else "premine"
        self.fork = chain.best_id
        self.fork_height = chain.best_height

    # ------------------------------------------------------------------ results
    def metrics(self) -> dict[str, Any]:
        """The ``metrics.json`` keys of the attack."""
        q, z, trials = self.share, self.z, self.trials
        return {
            "attack_model": "network",
            "double_spend_success_rate": round(self.wins / trials, 6) if trials else 0.0,
            "double_spend_trials": trials,
            "double_spend_wins": self.wins,
            "double_spend_aborted": self.aborted,
            "double_spend_premine_restarts": self.restarts,
            "double_spend_give_up_deficit": self.deficit,
            "double_spend_trial_milestones_mean": (
                round(self.trial_milestones / trials, 6) if trials else 0.0
            ),
            "double_spend_closed_form": round(double_spend_probability(q, z), 6),
            "double_spend_closed_form_cutoff": round(
                double_spend_probability_cutoff(q, z, self.deficit), 6
            ),
            "double_spend_nakamoto_2008": round(nakamoto_probability(q, z), 6),
            "attacker_blocks_released": self.released_blocks,
        }


__all__ = ["AttackerNode", "HeadListener", "NetworkDoubleSpend", "Release"]
