"""The controller's redemption at tx[0] (§9 R4) and its state file."""

from pathlib import Path

import pytest

from apiclient.models import SubmitBlockResponse, TemplateResponse
from dagchain.blocks import NONCE_OFFSET, compute_tips_root
from dagchain.crypto import ZERO_HASH
from dagchain.params import DEVNET
from dagchain.transactions import REDEMPTION_INDEX, TxKind, verify_tx_signatures
from dagchain.types import Address
from miner.controller import (
    Miner,
    MinerConfig,
    MinerError,
    MinerState,
    StateWriter,
    header_from_template,
)

PAYOUT = Address(bytes(range(32)))
ANCHOR = "ab" * 32
TIP = bytes([0x33]) * 32


def _miner(tmp_path: Path, redeem_every: int = 2) -> Miner:
    cfg = MinerConfig(
        node="http://127.0.0.1:1",
        payout=PAYOUT,
        payout_text="",
        token="t",
        datadir=tmp_path,
        network="devnet",
        params=DEVNET,
        redeem_every=redeem_every,
    )
    return Miner(cfg, api=None)  # type: ignore[arg-type]


def _template(miner: Miner, redeemable: int = 500, anchor: str = ANCHOR) -> TemplateResponse:
    """A mining template as the API serves it (INTERFACES.md, v2: ``tips_root``, ``tip_links``)."""
    return TemplateResponse(
        template_id="99" * 32,
        version=1,
        milestone_link="11" * 32,
        previous_link="22" * 32,
        tips_root=compute_tips_root([TIP]).hex(),
        tip_links=[TIP.hex()],
        merkle_root=ZERO_HASH.hex(),
        timestamp_ms=1_800_000_000_000,
        target=0x2100FFFF,
        target_value=str(1 << 255),
        milestone_target_value=str(1 << 250),
        txs=[],
        peer_height=3,
        root="44" * 32,
        anchor=anchor,
        anchor_address=miner.key_address_text,
        redeemable=str(redeemable),
        needs_registration=False,
        catch_up=False,
    )


def test_redemption_is_signed_at_tx0_and_pays_the_whole_claim(tmp_path: Path) -> None:
    miner = _miner(tmp_path)
    miner._since_redemption = 2
    header, txs, redeeming = miner._prepare(_template(miner))
    assert redeeming
    red = txs[0]
    assert red.kind == TxKind.REDEMPTION
    assert (red.inputs[0].txid.hex(), red.inputs[0].out_index) == (ANCHOR, REDEMPTION_INDEX)
    assert [(o.amount, o.address) for o in red.outputs] == [(0, miner.key_address), (500, PAYOUT)]
    assert verify_tx_signatures(red, DEVNET)
    assert header.merkle_root != ZERO_HASH  # recomputed over the redemption
    assert header.tips_root == compute_tips_root([TIP])


def test_no_redemption_before_redeem_every_or_with_nothing_to_claim(tmp_path: Path) -> None:
    miner = _miner(tmp_path)
    miner._since_redemption = 1
    assert not miner._prepare(_template(miner))[2]
    miner._since_redemption = 2
    assert not miner._prepare(_template(miner, redeemable=0))[2]
    other = _template(miner).model_copy(update={"anchor_address": "ddag1somebodyelse"})
    assert not miner._prepare(other)[2]


def test_an_unordered_redemption_is_not_doubled(tmp_path: Path) -> None:
    """Until the node's anchor moves past the one we spent, a second one would fail R4(a)."""
    miner = _miner(tmp_path)
    miner._since_redemption = 2
    miner.state.last_redemption_anchor = ANCHOR
    assert not miner._prepare(_template(miner))[2]
    assert miner._prepare(_template(miner, anchor="cd" * 32))[2]
    miner._since_redemption = 64  # it never got ordered (INVALID): sign a new one
    assert miner._prepare(_template(miner))[2]


def test_state_survives_a_reload_and_refuses_another_network(tmp_path: Path) -> None:
    state = MinerState("devnet", root="aa" * 32, last_block="bb" * 32, blocks=7)
    state.save(tmp_path)
    assert MinerState.load(tmp_path, "devnet") == state
    with pytest.raises(MinerError, match="devnet"):
        MinerState.load(tmp_path, "testnet")


def test_the_header_is_rebuilt_from_the_typed_template(tmp_path: Path) -> None:
    t = _template(_miner(tmp_path))
    header = header_from_template(t)
    assert header.version == t.version
    assert header.milestone_link.hex() == t.milestone_link
    assert header.previous_link.hex() == t.previous_link
    assert header.tips_root.hex() == t.tips_root
    assert header.merkle_root.hex() == t.merkle_root
    assert (header.timestamp_ms, header.target, header.nonce) == (t.timestamp_ms, t.target, 0)


def test_an_accepted_registration_names_the_peer_chain_and_an_orphan_does_not(
    tmp_path: Path,
) -> None:
    miner = _miner(tmp_path)
    t = _template(miner).model_copy(update={"needs_registration": True})
    block = "55" * 32
    orphan = SubmitBlockResponse(hash=block, is_milestone=False, status="orphan", missing=[])
    assert miner._on_submitted(t, block, orphan, redeem=False)
    assert miner.state == MinerState("devnet")  # nothing recorded for an orphan
    ok = SubmitBlockResponse(hash=block, is_milestone=True, status="accepted")
    assert miner._on_submitted(t, block, ok, redeem=False)
    assert (miner.state.root, miner.state.last_block) == (block, block)
    assert (miner.stats.blocks, miner.stats.milestones) == (1, 1)
    assert MinerState.load(tmp_path, "devnet").root == block


async def test_an_ordinary_block_is_saved_in_the_background_and_flushed_at_exit(
    tmp_path: Path,
) -> None:
    """Issue 25 item 4: the fsynced state write (about 5 ms) no longer holds up the next block."""
    miner = _miner(tmp_path)
    miner.state.root = "44" * 32
    t = _template(miner)
    for i in range(3):
        ok = SubmitBlockResponse(hash=f"{i:02x}" * 32, is_milestone=False, status="accepted")
        assert miner._on_submitted(t, f"{i:02x}" * 32, ok, redeem=False)
    await miner.state_writer.aclose()
    saved = MinerState.load(tmp_path, "devnet")
    assert (saved.blocks, saved.last_block) == (3, "02" * 32)


def test_an_older_snapshot_never_replaces_a_newer_one(tmp_path: Path) -> None:
    writer = StateWriter(tmp_path)
    old = writer._snapshot(MinerState("devnet", blocks=1))
    new = writer._snapshot(MinerState("devnet", blocks=2))
    writer._write(*new)
    writer._write(*old)  # a worker thread that lost the race
    assert MinerState.load(tmp_path, "devnet").blocks == 2


class _NoPool:
    def search(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("the pool was asked")


async def test_an_easy_target_is_solved_without_the_worker_pool(tmp_path: Path) -> None:
    """On devnet nearly every hash is a block: no thread hand-off for it (issue 25 item 4)."""
    miner = _miner(tmp_path)
    prefix = bytes(NONCE_OFFSET)
    result = await miner._search(_NoPool(), prefix, (1 << 256) - 1, start=1000)  # type: ignore[arg-type]
    assert (result.nonce, result.hashes) == (1000, 1)


def test_a_peer_chain_held_back_by_d5a_is_given_up_once_no_head_comes(tmp_path: Path) -> None:
    """§3.4 (D5a): after an operator's F8 undid the side every miner was on, each peer chain
    links a milestone above the best head and §3.4 says wait for a higher one, which no one can
    mine: the network stalled (a make-test soak). A miner waits while heads keep coming, and
    registers a new peer chain (no root) once the best milestone stood still for
    ``new_chain_after_s``; the state file says so at once."""
    miner = _miner(tmp_path)
    miner.state.root = "44" * 32
    miner.best_milestone = "aa" * 32
    limit = miner.cfg.new_chain_after_s
    assert not miner._abandon_held_back_chain(now=100.0)  # first refusal: start counting
    assert not miner._abandon_held_back_chain(now=100.0 + limit - 1)
    miner.best_milestone = "bb" * 32  # a new head came: count again from here
    assert not miner._abandon_held_back_chain(now=100.0 + limit + 1)
    assert not miner._abandon_held_back_chain(now=100.0 + 2 * limit)
    assert miner.state.root == "44" * 32
    assert miner._abandon_held_back_chain(now=101.0 + 2 * limit + 1)
    assert miner.state == MinerState("devnet", root=None)
    assert MinerState.load(tmp_path, "devnet").root is None
