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
    selfish_revenue,
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
       attacker releases every withheld block whenever, in its own view, the honest branch
       holds z milestones and its own branch has strictly more chainwork.
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
        elif self._may_release():
            self.release()

    def _may_release(self) -> bool:
        """Shipped, and in the attacker's own view z honest milestones and a heavier branch.

        The attacker judges only by the blocks it has received: the merchant's shipping gates
        the release but does not tell it about honest milestones still on their way to it.
        """
        return (
            self.shipped
            and self.honest_height >= self.z
            and self.chain.best_snapshot.chainwork > self.honest_work
            and bool(self.withheld)
        )

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
                if self._may_release():
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

    def relay(self, block_id: BlockId) -> bool:
        """The double spender relays other nodes' blocks like any node."""
        return True

    @property
    def done(self) -> bool:
        """True once every trial ran (the run may stop)."""
        return self.phase == "done"

    def finish(self) -> None:
        """Mining stopped: an unfinished trial's blocks stay private (it is not counted)."""

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


@final
class NetworkSelfishMiner:
    """Eyal-Sirer (2014) selfish mining by a withholding node, on real blocks.

    The attacker keeps its private milestone branch best in its own ``Chain`` by F2 alone (more
    chainwork while it leads; on a tie its own block arrived first). ``public`` is the greatest
    milestone height the honest nodes can know (honest milestones the attacker received, and
    its own released ones); ``private`` the height of its branch. With lead = private - public:

    - it finds a milestone: in a tie race (state 0') it publishes at once and wins both;
      otherwise it withholds (lead + 1);
    - an honest milestone raises ``public``: lead < 0, adopt (the Chain already switched; stale
      private blocks are released as ordinary blocks); lead 0, publish everything: a tie; lead
      1, publish everything: its branch is heavier; lead >= 2, publish its blocks up to the
      honest height and stay ahead.

    One safeguard Eyal and Sirer do not need: F6 finality. A branch forking more than
    ``punctuality`` milestones below the honest head can never become best there (F5), so once
    the honest chain is ``punctuality // 2`` milestones above the private branch's fork point the
    attacker publishes everything while it still leads (``finality_cashouts``); at alpha near 0.5
    a lead can otherwise outlive finality and the attacker's whole branch is lost.

    Who wins a tie is up to the honest nodes' first-seen rule (F2) and the network, so gamma is
    measured, not given: the share of ties that an honest milestone decides on the attacker's
    branch. At the end of mining every withheld block is released (Eyal-Sirer's race model
    counts the final private lead as won; here the honest nodes decide).
    """

    def __init__(
        self, node: AttackerNode, observer: Chain, release: Release, alpha: float, punctuality: int
    ) -> None:
        self.node = node
        self.horizon = punctuality // 2
        self.index = node.index
        self.chain = node.chain
        self.observer = observer
        self.release_one = release
        self.alpha = alpha
        self.withheld: list[tuple[BlockId, bytes]] = []
        self._withheld_ids: set[BlockId] = set()
        self.public = 0
        self.private = 0
        self.fork_height = 0
        """Where the private branch leaves the public chain (the public height when it began)."""
        self.finality_cashouts = 0
        self.tie: BlockId | None = None
        """The attacker's published milestone of an open tie race (state 0')."""
        self.ties = 0
        self.ties_to_attacker = 0
        self.released_blocks = 0
        self.overtakes = 0

    @property
    def done(self) -> bool:
        """Selfish mining runs for the whole ``duration_s``."""
        return False

    def relay(self, block_id: BlockId) -> bool:
        """Relay another node's block, except an honest milestone racing a private one.

        While the attacker holds a private milestone at that height or above, it does not pass
        the competing honest milestone on (its neighbours get it from others): the attacker
        wants its own block to reach them first. Without this its relay of the honest block
        would leave on each link just before its own, and gamma would be 0 by construction.
        """
        meta = self.chain.get_meta(block_id)
        if meta is None or not meta.is_milestone or self.private <= self.public:
            return True
        snap = self.chain.get_snapshot(block_id)
        return snap is None or snap.height > self.private

    def withhold(self, block_id: BlockId, raw: bytes) -> bool:
        """Every block the attacker node mines is withheld until the strategy releases it."""
        self.withheld.append((block_id, raw))
        self._withheld_ids.add(block_id)
        return True

    def release(self, through: BlockId | None = None) -> None:
        """Send the withheld blocks in mining order, all or up to and including ``through``."""
        count = len(self.withheld)
        if through is not None:
            for i, (block_id, _) in enumerate(self.withheld):
                if block_id == through:
                    count = i + 1
                    break
            else:
                return
        for block_id, raw in self.withheld[:count]:
            self.release_one(block_id, raw)
            self._withheld_ids.discard(block_id)
        del self.withheld[:count]
        self.released_blocks += count

    def finish(self) -> None:
        """Mining stopped: publish the private branch (the honest nodes' F2 decides)."""
        self.release()

    def on_accepted(self, node: int, outcome: BlockOutcome) -> None:
        """The attacker's node accepted blocks: its own, or honest ones from the network."""
        if node != self.index:
            return
        chain = self.chain
        for bid in outcome.accepted:
            meta = chain.get_meta(bid)
            if meta is None or not meta.is_milestone:
                continue
            snap = chain.get_snapshot(bid)
            if snap is None:  # pragma: no cover - accepted milestones have snapshots
                continue
            if bid in self._withheld_ids:
                self._own(bid, snap.height)
            else:
                block = chain.get_block(bid)
                parent = block.header.milestone_link if block is not None else None
                self._honest(parent, snap.height)

    def _own(self, milestone: BlockId, height: int) -> None:
        if self.private <= self.public and self.tie is None:
            self.fork_height = self.public  # a new private branch starts
        self.private = height
        if self.tie is not None:  # state 0': publish, the attacker's branch wins by one
            self.tie = None
            self.release()
            self.public = height

    def _honest(self, parent: BlockId | None, height: int) -> None:
        if self.tie is not None and height == self.public + 1:
            self.ties += 1  # an honest milestone decides the tie race
            self.ties_to_attacker += parent == self.tie
            self.tie = None
        if height <= self.public:
            return  # no progress of the public chain (an honest fork)
        self.public = height
        lead = self.private - height
        if lead < 0:  # adopt: the Chain switched to the heavier honest branch already
            self.private = height
            self.release()
        elif lead == 0:  # publish the whole branch: a tie race (state 0')
            self.tie = self.chain.state.best[height]
            self.release()
        elif lead == 1:  # publish everything: one milestone ahead, the honest one is lost
            self.overtakes += 1
            self.release()
            self.public = self.private
        elif height - self.fork_height >= self.horizon:  # cash out before F6 closes the fork
            self.finality_cashouts += 1
            self.release()
            self.public = self.private
        else:  # stay ahead: publish up to the honest height
            self.release(self.chain.state.best[height])

    def metrics(self, mined: set[bytes]) -> dict[str, Any]:
        """The ``metrics.json`` keys of the attack, given the milestones the attacker mined.

        ``attacker_milestone_share`` is Eyal-Sirer's quantity (the attacker's share of the
        observer's best-chain milestones); the caller adds ``attacker_revenue_share`` from the
        ledger (R2, R7: rewards, fees and bonuses on the best chain).
        """
        best = self.observer.state.best
        ours = sum(1 for ms in best[1:] if ms in mined)
        share = ours / (len(best) - 1) if len(best) > 1 else 0.0
        gamma = self.ties_to_attacker / self.ties if self.ties else 0.0
        return {
            "attack_model": "network",
            "attacker_milestone_share": round(share, 6),
            "attacker_milestones_on_best_chain": ours,
            "attacker_milestones_mined": len(mined),
            "selfish_gamma_measured": round(gamma, 6),
            "selfish_ties": self.ties,
            "selfish_overtakes": self.overtakes,
            "selfish_finality_cashouts": self.finality_cashouts,
            "attacker_revenue_share_closed_form": round(selfish_revenue(self.alpha, gamma), 6),
            "attacker_blocks_released": self.released_blocks,
        }


__all__ = [
    "AttackerNode",
    "HeadListener",
    "NetworkDoubleSpend",
    "NetworkSelfishMiner",
    "Release",
]
