"""Scenario: every knob of a run, from TOML plus ``--set table.key=value`` overrides.

The keys are the contract of INTERFACES.md (dagchain-sim, "Scenario keys"). Unknown keys fail with
a message naming them. ``to_params`` turns a scenario into the ``ConsensusParams`` the real core
runs on: the SIM preset with the scenario's values, and for ``protocol = "nakamoto"`` the same
preset with one block per milestone (b = 1), larger blocks and no sortition (a params choice, the
same code path).
"""

import json
import tomllib
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dagchain.params import SIM, ConsensusParams


class ScenarioError(ValueError):
    """A scenario file or override is wrong; the message says which key and why."""


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NetworkConfig(_Table):
    delay: str = "fixed:0.05"
    """``fixed:S``, ``uniform:LO:HI`` (seconds) or ``regions2019``."""
    bandwidth_mbps: float = 0.0
    """Per-node upload and download, Mbit/s; 0 = unlimited (regions2019: 0 = the region table)."""
    degree: int = Field(default=8, ge=1)
    """Outbound peers per node (links are used both ways; ``topology = "random"`` only)."""
    topology: Literal["random", "ring"] = "random"
    """``random``: a random spanning tree plus ``degree`` random outbound links per node;
    ``ring``: node i linked to i - 1 and i + 1 (mod ``nodes``), as bench/network.py's ring."""
    processing_ms: float = Field(default=2.0, ge=0)
    """Per-hop processing delay (SimBlock uses 2 ms)."""
    full_nodes: int = Field(default=0, ge=0)
    """Nodes 0..full_nodes-1 run the full core, the others relay only (0 = every node full)."""
    relay: Literal["node", "push-all"] = "node"
    """``node``: every node runs p2p/relay.py (P11 push/inv, 250 ms tx inv batches, getdata);
    ``push-all``: every item pushed to every neighbour (the simulator's earlier model)."""
    tx_relay: Literal["messages", "flow"] = "messages"
    """``messages``: every tx relayed as the node relay's ``inv``/``getdata``/``tx`` messages;
    ``flow``: each tx's arrival at every node computed from the same policy, events only at
    full nodes (simulator/txflow.py; needs ``relay = "node"``, no late nodes)."""
    late_nodes: int = Field(default=0, ge=0)
    """The last ``late_nodes`` full nodes are offline until ``late_join_s``, then join and catch
    up with the node's own sync session (P5, P7-P10; simulator/late_node.py)."""
    late_join_s: float = Field(default=0.0, ge=0)
    """When the late nodes join (simulated seconds, before ``duration_s``)."""
    late_leave_s: float = Field(default=0.0, ge=0)
    """If > 0: the late nodes are online from the start, go down at this time (a crash: pool
    and peer state lost, chain kept) and come back at ``late_join_s``."""

    @field_validator("delay")
    @classmethod
    def _check_delay(cls, value: str) -> str:
        parts = value.split(":")
        try:
            if parts[0] == "fixed" and len(parts) == 2 and float(parts[1]) >= 0:
                return value
            if (
                parts[0] == "uniform"
                and len(parts) == 3
                and 0 <= float(parts[1]) <= float(parts[2])
            ):
                return value
        except ValueError:
            pass
        if value == "regions2019":
            return value
        raise ValueError('must be "fixed:S", "uniform:LO:HI" (seconds, LO <= HI) or "regions2019"')


class ChainConfig(_Table):
    milestone_interval_s: float = Field(default=10.0, gt=0)
    block_rate: float = Field(default=8.0, gt=0)
    """Blocks per second; b = block_rate * milestone_interval_s must be an integer (sdag)."""
    block_capacity: int = Field(default=128, ge=1)
    max_block_bytes: int = Field(default=262_144, ge=1024)
    sortition_c: str = "1/120"
    sortition_k: int = Field(default=100, ge=2)
    sortition_weighting: Literal["share", "uniform"] = "uniform"
    """PROTOCOL.md v2 §8.1 default: ``uniform`` (no warm-up), c = 1/120; ``share`` is kept."""
    max_tip_links: int = Field(default=8, ge=1, le=16)
    """H5 and §3.4 (v2): 1..16 tip links per block (the preset's 8 by default)."""
    sortition: bool = True
    retarget: bool = True
    punctuality: int = Field(default=100, ge=2)

    @field_validator("sortition_c", mode="before")
    @classmethod
    def _check_c(cls, value: Any) -> str:
        try:
            c = Fraction(str(value))
        except (ValueError, ZeroDivisionError):
            raise ValueError(f'{value!r} is not a fraction such as "1/100" or 0.01') from None
        if not 0 < c <= 1:
            raise ValueError("sortition_c must be in (0, 1]")
        return str(value)


class MinersConfig(_Table):
    count: int = Field(default=10, ge=1)
    """Mining nodes (the first ``count`` nodes by index, capped at ``nodes``)."""
    shares: list[float] = Field(default_factory=list)
    """Hash shares of the honest miners (normalised); empty = equal."""
    warm_start: bool = False
    """Each miner's REGISTRATION block (R3: it carries no payment) is mined at t = 0, before
    the clock runs, relayed as any block, and left out of the block metrics: the run starts
    with every peer chain registered. Without it, a run with many miners first spends ~N·ln N
    blocks on registrations (docs/experiments.md, "Capacity at 10,000 nodes")."""


class LoadConfig(_Table):
    tps: float = Field(default=0.0, ge=0)
    tx_bytes: int = Field(default=250, ge=150)
    prefunded_outputs: int = Field(default=0, ge=0, le=1 << 22)
    """0: the sim genesis holds PROTOCOL.md §10's 64 faucet UTXOs and the wallet's first txs fan
    each out into 64. N > 0: it holds N faucet UTXOs instead (a simulator-only departure from
    §10, docs/protocol.md decision 43) and every tx is a plain payment from the start, so a
    wallet that spends only confirmed outputs is not starved while it has prefunded ones left:
    ``tps * duration_s`` of them and ``txs_starved`` is 0 whatever the confirmations do."""


class AttackConfig(_Table):
    kind: Literal["none", "double_spend", "selfish", "multi_root"] = "none"
    """``multi_root``: one miner with ``share`` and ``roots`` peer chains that mines, each time,
    the chain whose template pays the most fees (PROTOCOL.md v2 §8.3; simulator/multi_root.py)."""
    share: float = Field(default=0.0, ge=0, lt=1)
    gamma: float = Field(default=0.0, ge=0, le=1)
    confirmations: int = Field(default=6, ge=1)
    trials: int = Field(default=1000, ge=1)
    model: Literal["race", "network"] = "race"
    """``race``: milestone-race models (simulator/adversary.py); ``network``: a withholding node
    in the simulated network (simulator/network_attack.py)."""
    give_up_deficit: int = Field(default=10, ge=1)
    """Network double spend: the attacker abandons a trial this many milestones behind."""
    roots: int = Field(default=1, ge=1, le=1000)
    """``multi_root``: how many peer chains the attacker registers (k)."""


class EngineConfig(_Table):
    share_results: bool = True
    """Honest full nodes share the core's deterministic results (verified signatures, level-set
    evaluations, tx and block verdicts, a milestone's ledger rows: ``sim_node.Caches``), each
    computed once per run; ``false`` computes them at every node. Outputs are byte-identical
    either way (tests/simulator/test_share_results.py)."""


class Scenario(_Table):
    nodes: int = Field(default=20, ge=1)
    duration_s: float = Field(default=60.0, gt=0)
    seed: int = 1
    protocol: Literal["sdag", "nakamoto"] = "sdag"
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    chain: ChainConfig = Field(default_factory=ChainConfig)
    miners: MinersConfig = Field(default_factory=MinersConfig)
    load: LoadConfig = Field(default_factory=LoadConfig)
    attack: AttackConfig = Field(default_factory=AttackConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)

    # ------------------------------------------------------------------ derived values
    @property
    def blocks_per_ms(self) -> int:
        """b: 1 in nakamoto mode, else block_rate * milestone_interval_s (must be an integer)."""
        if self.protocol == "nakamoto":
            return 1
        b = Fraction(str(self.chain.block_rate)) * Fraction(str(self.chain.milestone_interval_s))
        if b.denominator != 1 or b < 1:
            raise ScenarioError(
                f"chain.block_rate * chain.milestone_interval_s = {float(b)} is not a positive "
                "integer (blocks per milestone b)"
            )
        return int(b)

    @property
    def block_rate(self) -> float:
        """Blocks per second: in nakamoto mode one per milestone interval."""
        if self.protocol == "nakamoto":
            return 1.0 / self.chain.milestone_interval_s
        return self.chain.block_rate

    @property
    def mining_nodes(self) -> int:
        return min(self.nodes, self.miners.count)

    @property
    def full_nodes(self) -> int:
        """Nodes running the full core (the first ones); the rest are relay-only."""
        full = self.network.full_nodes
        return self.nodes if full == 0 else min(self.nodes, full)

    @property
    def late_nodes(self) -> range:
        """Indices of the late-joining full nodes (the last ``network.late_nodes`` full ones)."""
        full = self.full_nodes
        return range(full - min(full, self.network.late_nodes), full)

    def honest_shares(self) -> list[float]:
        """Hash share of each honest mining node; they sum to 1 - attack.share."""
        n = self.mining_nodes
        raw = list(self.miners.shares) or [1.0] * n
        if len(raw) != n:
            raise ScenarioError(f"miners.shares has {len(raw)} entries for {n} mining nodes")
        if min(raw) < 0 or sum(raw) <= 0:
            raise ScenarioError("miners.shares must be non-negative and not all zero")
        honest = 1.0 - (self.attack.share if self.attack.kind != "none" else 0.0)
        total = sum(raw)
        return [honest * s / total for s in raw]

    def to_params(self) -> ConsensusParams:
        """The consensus parameters of this run (SIM preset plus the scenario's values)."""
        c = Fraction(self.chain.sortition_c)
        b = self.blocks_per_ms
        capacity = self.chain.block_capacity
        max_bytes = self.chain.max_block_bytes
        sortition = self.chain.sortition
        weighting = self.chain.sortition_weighting
        if self.protocol == "nakamoto":
            # One large block per interval carries what b small blocks would (same tx capacity).
            sdag_b = max(1, round(self.chain.block_rate * self.chain.milestone_interval_s))
            capacity *= sdag_b
            max_bytes *= sdag_b
            sortition = False
            weighting = "uniform"  # no assignment, so no S1 warm-up either (v2 §8.1 S1)
        return SIM.replace(
            blocks_per_ms=b,
            milestone_interval_ms=round(self.chain.milestone_interval_s * 1000),
            retarget=self.chain.retarget,
            block_capacity=capacity,
            max_block_bytes=max_bytes,
            sortition_c_num=c.numerator,
            sortition_c_den=c.denominator,
            sortition_warmup=self.chain.sortition_k,
            sortition_weighting=weighting,
            sortition_enabled=sortition,
            punctuality=self.chain.punctuality,
            max_tip_links=self.chain.max_tip_links,
            faucet_outputs=self.load.prefunded_outputs or SIM.faucet_outputs,
        )

    def manifest_dict(self) -> dict[str, Any]:
        """Every parameter, as JSON-ready data."""
        return self.model_dump(mode="json")


def _format_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown scenario key {key!r}")
        else:
            lines.append(f"scenario key {key!r}: {err['msg']}")
    return "; ".join(lines)


def parse_override(item: str) -> tuple[list[str], Any]:
    """``table.key=value`` → (["table", "key"], value); the value is read as TOML, else a string."""
    if "=" not in item:
        raise ScenarioError(f"--set {item!r}: expected table.key=value")
    key, _, text = item.partition("=")
    path = [p.strip() for p in key.strip().split(".")]
    if not all(path):
        raise ScenarioError(f"--set {item!r}: empty key")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    return path, value


def apply_override(data: dict[str, Any], path: list[str], value: Any) -> None:
    """Set ``data[path[0]]...[path[-1]] = value`` (tables are created as needed)."""
    node = data
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ScenarioError(f"--set {'.'.join(path)}: {part!r} is not a table")
        node = child
    node[path[-1]] = value


def build_scenario(data: dict[str, Any]) -> Scenario:
    """Validate raw data into a Scenario.

    Raises:
        ScenarioError: unknown keys or bad values, all named in one message.
    """
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_format_error(exc)) from None
    scenario.blocks_per_ms  # noqa: B018  (validates b)
    scenario.honest_shares()
    attack = scenario.attack
    if attack.kind == "multi_root" or (attack.model == "network" and attack.kind != "none"):
        if scenario.full_nodes <= scenario.mining_nodes:
            raise ScenarioError(
                f"attack.kind = {attack.kind} (model {attack.model}) needs a full node that does "
                "not mine honestly for the "
                f"attacker (node {scenario.mining_nodes}): nodes and network.full_nodes must "
                f"exceed miners.count ({scenario.mining_nodes})"
            )
        if attack.share <= 0:
            raise ScenarioError(f"attack.kind = {attack.kind} needs attack.share > 0")
    if scenario.miners.warm_start and attack.kind != "none":
        raise ScenarioError("miners.warm_start registers honest miners only: no attack.kind")
    _check_late_nodes(scenario)
    net = scenario.network
    if net.tx_relay == "flow" and (net.relay != "node" or net.late_nodes):
        raise ScenarioError(
            'network.tx_relay = "flow" needs network.relay = "node" and no network.late_nodes '
            "(the flow models the node relay of always-on nodes)"
        )
    if scenario.full_nodes < scenario.mining_nodes:
        raise ScenarioError(
            f"network.full_nodes = {scenario.network.full_nodes} is fewer than the "
            f"{scenario.mining_nodes} mining nodes (miners and the observer run the full core)"
        )
    return scenario


def _check_late_nodes(scenario: Scenario) -> None:
    net = scenario.network
    if net.late_nodes == 0:
        return
    if net.relay != "node":
        raise ScenarioError(
            'network.late_nodes needs network.relay = "node" (the sync session is the node\'s)'
        )
    if scenario.attack.kind != "none":
        raise ScenarioError("network.late_nodes cannot be combined with attack.kind")
    on_time = scenario.full_nodes - net.late_nodes
    if on_time < scenario.mining_nodes or on_time < 1:
        raise ScenarioError(
            f"network.late_nodes = {net.late_nodes} leaves {max(on_time, 0)} full nodes online "
            f"from the start, fewer than the {scenario.mining_nodes} mining nodes (the late "
            "nodes are the last full nodes and do not mine)"
        )
    if net.late_leave_s and not net.late_leave_s < net.late_join_s:
        raise ScenarioError(
            f"network.late_leave_s = {net.late_leave_s} must be before network.late_join_s "
            f"({net.late_join_s})"
        )
    if not 0 < net.late_join_s < scenario.duration_s:
        raise ScenarioError(
            f"network.late_join_s = {net.late_join_s} must be after 0 and before duration_s "
            f"({scenario.duration_s})"
        )


def load_scenario(path: Path | None, overrides: Sequence[str] = (), **fields: Any) -> Scenario:
    """Read a TOML scenario (or defaults), apply ``--set`` overrides, then CLI flags."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ScenarioError(f"cannot read scenario {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ScenarioError(f"scenario {path} is not valid TOML: {exc}") from None
    for item in overrides:
        key_path, value = parse_override(item)
        apply_override(data, key_path, value)
    for key, value in fields.items():
        if value is not None:
            data[key] = value
    return build_scenario(data)


def write_json(path: Path, data: Any) -> None:
    """Sorted keys, two-space indent, trailing newline: byte-stable output."""
    path.write_text(json.dumps(data, sort_keys=True, indent=2) + "\n", encoding="utf-8")


__all__ = [
    "AttackConfig",
    "ChainConfig",
    "LoadConfig",
    "MinersConfig",
    "NetworkConfig",
    "Scenario",
    "ScenarioError",
    "apply_override",
    "build_scenario",
    "load_scenario",
    "parse_override",
    "write_json",
]
