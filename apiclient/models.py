"""Pydantic request and response models of the HTTP API (INTERFACES.md): the one schema of the
API, used by the node to answer (``node.api``) and by the clients to read the answers.

Hashes are lowercase hex; integers that can exceed 2^53 (amounts, balances, chainwork, nonces,
expanded targets) are decimal strings; compact targets, heights, counts and times are numbers.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "HEX_BYTES_PATTERN",
    "TX_BATCH_MAX",
    "AddressResponse",
    "AdminResponse",
    "BestMilestone",
    "BlockResponse",
    "DagBlock",
    "DagResponse",
    "ErrorBody",
    "ErrorResponse",
    "EventMessage",
    "FeeRates",
    "FeeSample",
    "FeesResponse",
    "LookupResponse",
    "MempoolResponse",
    "MempoolSummary",
    "MilestoneItem",
    "PeerInfo",
    "PruneState",
    "RawRequest",
    "StatusResponse",
    "SubmitBlockResponse",
    "SubmitTxBatchRequest",
    "SubmitTxBatchResponse",
    "SubmitTxResponse",
    "SubmitTxResult",
    "Targets",
    "TemplateResponse",
    "TxResponse",
    "UtxoItem",
]

Hex32 = Annotated[str, Field(pattern="^[0-9a-f]{64}$")]
"""A hash or id in an answer: lowercase hex of the 32 stored bytes."""
DecimalString = Annotated[str, Field(pattern="^[0-9]+$")]
"""An integer that can exceed 2^53 (amounts, chainwork, nonces, expanded targets), in decimal."""
HEX_BYTES_PATTERN = "^(?:[0-9a-fA-F]{2})*$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ErrorBody(_Model):
    code: str = Field(description="A stable code: a rule id such as H4 or T6, or a word")
    message: str


class ErrorResponse(_Model):
    error: ErrorBody


class RawRequest(_Model):
    # The pattern is checked by the handler (400 bad-hex), not here (400 bad-request).
    raw: str = Field(
        description="Canonical bytes as hex, two digits per byte",
        max_length=4 * 1024 * 1024,
        json_schema_extra={"pattern": HEX_BYTES_PATTERN},
    )


class BestMilestone(_Model):
    hash: Hex32
    height: int
    chainwork: DecimalString
    timestamp_ms: int


class MempoolSummary(_Model):
    size: int
    bytes: int


class Targets(_Model):
    block: int = Field(description="Compact block target of the best milestone")
    milestone: int = Field(description="Compact milestone target of the best milestone")


class PruneState(_Model):
    depth: int | None = Field(
        description="--prune-depth D: bodies of the last D milestones are kept; null: not pruning"
    )
    bodies_from: int = Field(
        description="The lowest best-chain milestone height whose level set keeps its block "
        "bodies (1 on a node that never pruned)"
    )


class StatusResponse(_Model):
    network: str
    version: str
    node_id: str
    best_milestone: BestMilestone
    blocks: int
    pending_blocks: int
    mempool: MempoolSummary
    peers: int
    synced: bool
    targets: Targets
    p2p: bool
    prune: PruneState | None = Field(
        default=None, description='Pruning (docs/node.md, "Pruning"); null from older nodes'
    )


class BlockResponse(_Model):
    hash: Hex32
    version: int
    milestone_link: Hex32
    previous_link: Hex32
    tips_root: Hex32 = Field(description="Commits to tip_links (PROTOCOL.md v2 §2.1)")
    tip_links: list[Hex32] = Field(description="1..max_tip_links tip links, ascending (v2)")
    merkle_root: Hex32
    timestamp_ms: int
    target: int
    nonce: DecimalString
    txids: list[Hex32]
    is_milestone: bool
    level_set_height: int | None
    tx_status: list[str] = Field(description="Per tx: valid, invalid:<reason> or pending")
    root: Hex32
    peer_height: int
    confirmations: int
    size: int = Field(description="Bytes of the canonical block; 0 once its body is pruned")
    pruned: bool = Field(
        default=False,
        description="The body was pruned (--prune-depth): header, tip links, txids and their "
        "status remain; /raw answers 410",
    )


class DagBlock(_Model):
    """One block of the explorer's DAG view: its links, peer chain and level set."""

    hash: Hex32
    milestone_link: Hex32
    previous_link: Hex32
    tip_links: list[Hex32] = Field(description="Tip links, ascending (PROTOCOL.md v2)")
    root: Hex32 = Field(description="Registration block of its peer chain (the DAG view's lane)")
    peer_height: int
    is_milestone: bool
    level_set_height: int | None = Field(description="null while pending")
    timestamp_ms: int
    txs: int


class DagResponse(_Model):
    best_height: int
    blocks: list[DagBlock] = Field(
        description="The level sets of best-chain milestones start..start+limit-1 in total order, "
        "then (if that range reaches the best milestone) the pending blocks"
    )


class LookupResponse(_Model):
    """What a search string names; ``unknown`` is an answer, not an error (the explorer's box)."""

    query: str
    kind: Literal["block", "transaction", "address", "unknown"]


class MilestoneItem(_Model):
    hash: Hex32
    height: int
    timestamp_ms: int
    level_set_size: int


class TxResponse(_Model):
    txid: Hex32
    status: Literal["mempool", "pending", "confirmed", "invalid", "unknown"]
    block: Hex32 | None
    milestone_height: int | None
    confirmations: int
    reason: str | None


class SubmitTxResponse(_Model):
    txid: Hex32


TX_BATCH_MAX = 1000
"""``POST /v1/txs/batch`` takes 1..TX_BATCH_MAX raw txs."""


class SubmitTxBatchRequest(_Model):
    # No pattern on the items: an item that is not hex is that item's 400 bad-hex in a 200
    # answer, as POST /v1/txs would answer it alone, not a refusal of the whole batch.
    raw: list[Annotated[str, Field(max_length=4 * 1024 * 1024)]] = Field(
        min_length=1,
        max_length=TX_BATCH_MAX,
        description="Canonical bytes of each tx as hex, admitted in this order (an item that "
        "is not hex digits, two per byte, is that item's 400 bad-hex)",
    )


class SubmitTxResult(_Model):
    txid: Hex32 | None = Field(description="The tx's id; null when its bytes do not decode")
    status: Literal[202, 400, 409, 503] = Field(
        description="The status POST /v1/txs would answer for this item alone, at its turn"
    )
    reason: str | None = Field(
        description="null when accepted (202); else the error code POST /v1/txs would give"
    )


class SubmitTxBatchResponse(_Model):
    results: list[SubmitTxResult] = Field(description="One result per item, in request order")


class UtxoItem(_Model):
    txid: Hex32
    index: int
    amount: DecimalString
    confirmations: int


class AddressResponse(_Model):
    address: str
    balance: DecimalString
    pending_balance: DecimalString = Field(
        description="balance, minus outputs spent by mempool txs, plus mempool outputs to it"
    )
    utxos: list[UtxoItem]


class MempoolResponse(_Model):
    size: int
    bytes: int
    txids: list[Hex32]


class FeeRates(_Model):
    """Units per byte to be VALID within N milestones with 90 % likelihood, keyed "1", "3",
    "10"; multiples of 0.001, rounded up; null when no fee rate the node saw reached N."""

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    within_1: float | None = Field(alias="1")
    within_3: float | None = Field(alias="3")
    within_10: float | None = Field(alias="10")


class FeeSample(_Model):
    txs: int = Field(description="txs of the node's pool seen VALID in the window")
    milestones: int = Field(description="level sets in the window")
    window: int = Field(description="level sets the node keeps (the most recent)")


class FeesResponse(_Model):
    fee_per_byte: FeeRates
    floor: float = Field(description="the lowest units per byte the node's mempool admits now")
    likelihood: float = Field(description="0.9")
    sample: FeeSample


class PeerInfo(_Model):
    node_id: str
    address: str
    direction: str
    best_milestone_height: int
    score: int
    connected_s: float


class TemplateResponse(_Model):
    template_id: Hex32
    version: int
    milestone_link: Hex32
    previous_link: Hex32
    tips_root: Hex32 = Field(description="Commits to tip_links (PROTOCOL.md v2 §2.1)")
    tip_links: list[Hex32] = Field(description="1..max_tip_links tip links, ascending (v2)")
    merkle_root: Hex32
    timestamp_ms: int
    target: int = Field(description="Compact block target (the header field)")
    target_value: DecimalString
    milestone_target_value: DecimalString
    txs: list[str] = Field(description="Canonical tx bytes as hex; tx[0] the REGISTRATION if any")
    peer_height: int
    root: Hex32 | None
    anchor: Hex32 | None
    anchor_address: str | None
    redeemable: DecimalString
    needs_registration: bool
    catch_up: bool


class SubmitBlockResponse(_Model):
    hash: Hex32
    is_milestone: bool
    status: Literal["accepted", "duplicate", "orphan"]
    missing: list[Hex32] = Field(default_factory=list)


class AdminResponse(_Model):
    best_milestone: Hex32
    height: int
    changed: bool


class EventMessage(BaseModel):
    """One message of ``GET /v1/events``; more keys per type (see docs/node.md)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["block", "milestone", "reorg", "tx"]
