"""Stateless transaction rules T1-T6 (PROTOCOL.md §7.1, §7.2) and the txid (§2.2)."""

from collections.abc import Sequence

import pytest

from dagchain.crypto import hash32, xonly_pubkey
from dagchain.errors import InvalidTransaction
from dagchain.params import MAINNET, TESTNET, ConsensusParams
from dagchain.transactions import (
    REDEMPTION_INDEX,
    Transaction,
    TxIn,
    TxKind,
    TxOut,
    check_tx_signatures,
    check_tx_stateless,
    compute_sighash,
    decode_transaction,
    make_transaction,
    sign_transaction,
    verify_tx_signatures,
)
from dagchain.types import Address, TxId

PARAMS = MAINNET
MAX_MONEY = PARAMS.max_money
SECRET_A = (3).to_bytes(32, "big")
SECRET_B = (7).to_bytes(32, "big")
PUBKEY = xonly_pubkey(SECRET_A)
ADDRESS = Address(hash32(b"payee"))


def _txid(i: int) -> TxId:
    return TxId(hash32(i.to_bytes(4, "little")))


def _inputs(count: int, out_index: int = 0) -> list[TxIn]:
    return [TxIn(_txid(i), out_index, PUBKEY, bytes(64)) for i in range(count)]


def _outputs(*amounts: int) -> list[TxOut]:
    return [TxOut(amount, ADDRESS) for amount in amounts]


def transfer(inputs: Sequence[TxIn] | None = None, amounts: Sequence[int] = (1000,)) -> Transaction:
    return make_transaction(
        TxKind.TRANSFER, _inputs(1) if inputs is None else inputs, _outputs(*amounts)
    )


def registration(inputs: int = 0, amounts: Sequence[int] = (0,)) -> Transaction:
    return make_transaction(TxKind.REGISTRATION, _inputs(inputs), _outputs(*amounts))


def redemption(
    inputs: int = 1, out_index: int = REDEMPTION_INDEX, amounts: Sequence[int] = (0, 5000)
) -> Transaction:
    return make_transaction(TxKind.REDEMPTION, _inputs(inputs, out_index), _outputs(*amounts))


def failed_rule(tx: Transaction, params: ConsensusParams = PARAMS) -> str | None:
    """The rule id ``check_tx_stateless`` raises, or None when the tx passes."""
    try:
        check_tx_stateless(tx, params)
    except InvalidTransaction as exc:
        return exc.rule
    return None


def test_well_formed_tx_of_each_kind_passes() -> None:
    assert failed_rule(transfer()) is None
    assert failed_rule(registration()) is None
    assert failed_rule(redemption()) is None


# --- T1 version, kind, size -------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 2, 2**64 - 1])
def test_t1_unknown_version_is_rejected(version: int) -> None:
    tx = make_transaction(TxKind.TRANSFER, _inputs(1), _outputs(1), version=version)
    assert failed_rule(tx) == "T1"


@pytest.mark.parametrize("kind", [3, 255, 2**64 - 1])
def test_t1_unknown_kind_is_rejected(kind: int) -> None:
    tx = make_transaction(kind, _inputs(1), _outputs(1))
    assert failed_rule(tx) == "T1"


def test_t1_size_at_max_tx_bytes_passes_one_byte_over_fails() -> None:
    tx = transfer(_inputs(3), (1, 2, 3))
    assert failed_rule(tx, PARAMS.replace(max_tx_bytes=len(tx.raw))) is None
    assert failed_rule(tx, PARAMS.replace(max_tx_bytes=len(tx.raw) - 1)) == "T1"


def test_t1_largest_transfer_shape_fits_max_tx_bytes() -> None:
    """64 inputs and 64 outputs with u64-sized amounts stay under 16,384 bytes."""
    tx = transfer(_inputs(64), [10**15 + i for i in range(64)])
    assert len(tx.raw) <= PARAMS.max_tx_bytes
    assert failed_rule(tx) is None


# --- T2 shapes per kind (§7.1) ----------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 64])
def test_t2_transfer_with_1_to_64_inputs_passes(count: int) -> None:
    assert failed_rule(transfer(_inputs(count))) is None


@pytest.mark.parametrize("count", [0, 65])
def test_t2_transfer_input_count_outside_1_to_64_is_rejected(count: int) -> None:
    assert failed_rule(transfer(_inputs(count))) == "T2"


@pytest.mark.parametrize("count", [1, 2, 64])
def test_t2_transfer_with_1_to_64_outputs_passes(count: int) -> None:
    assert failed_rule(transfer(amounts=[1] * count)) is None


@pytest.mark.parametrize("count", [0, 65])
def test_t2_transfer_output_count_outside_1_to_64_is_rejected(count: int) -> None:
    assert failed_rule(transfer(amounts=[1] * count)) == "T2"


@pytest.mark.parametrize("inputs", [1, 2])
def test_t2_registration_with_inputs_is_rejected(inputs: int) -> None:
    assert failed_rule(registration(inputs=inputs)) == "T2"


@pytest.mark.parametrize("amounts", [(), (0, 0)])
def test_t2_registration_needs_exactly_one_output(amounts: tuple[int, ...]) -> None:
    assert failed_rule(registration(amounts=amounts)) == "T2"


@pytest.mark.parametrize("inputs", [0, 2])
def test_t2_redemption_needs_exactly_one_input(inputs: int) -> None:
    assert failed_rule(redemption(inputs=inputs)) == "T2"


@pytest.mark.parametrize("out_index", [0, 1, REDEMPTION_INDEX - 1])
def test_t2_redemption_input_out_index_must_be_0xffffffff(out_index: int) -> None:
    assert failed_rule(redemption(out_index=out_index)) == "T2"


@pytest.mark.parametrize("amounts", [(0,), (0, 1)])
def test_t2_redemption_with_one_or_two_outputs_passes(amounts: tuple[int, ...]) -> None:
    assert failed_rule(redemption(amounts=amounts)) is None


@pytest.mark.parametrize("amounts", [(), (0, 1, 1)])
def test_t2_redemption_output_count_outside_1_to_2_is_rejected(amounts: tuple[int, ...]) -> None:
    assert failed_rule(redemption(amounts=amounts)) == "T2"


@pytest.mark.parametrize(
    ("inp", "out"),
    [
        pytest.param(TxIn(TxId(bytes(31)), 0, PUBKEY, bytes(64)), None, id="txid-31"),
        pytest.param(TxIn(TxId(bytes(33)), 0, PUBKEY, bytes(64)), None, id="txid-33"),
        pytest.param(TxIn(_txid(1), 0, PUBKEY[:31], bytes(64)), None, id="pubkey-31"),
        pytest.param(TxIn(_txid(1), 0, PUBKEY + b"\x00", bytes(64)), None, id="pubkey-33"),
        pytest.param(TxIn(_txid(1), 0, PUBKEY, bytes(63)), None, id="signature-63"),
        pytest.param(TxIn(_txid(1), 0, PUBKEY, bytes(65)), None, id="signature-65"),
        pytest.param(None, TxOut(1, Address(bytes(31))), id="address-31"),
        pytest.param(None, TxOut(1, Address(bytes(33))), id="address-33"),
    ],
)
def test_t2_field_of_wrong_length_is_rejected(inp: TxIn | None, out: TxOut | None) -> None:
    """Regression: only the decoder checked lengths, so a locally built tx (a miner's redemption,
    a wallet's transfer) with a 33-byte field passed T2 and then failed H1 at every peer."""
    tx = make_transaction(
        TxKind.TRANSFER,
        [inp if inp is not None else TxIn(_txid(1), 0, PUBKEY, bytes(64))],
        [out if out is not None else TxOut(1, ADDRESS)],
    )
    assert failed_rule(tx) == "T2"


# --- T3 transfer amounts and reserved out_index -----------------------------------------------


@pytest.mark.parametrize("amount", [1, MAX_MONEY])
def test_t3_amount_in_1_to_max_money_passes(amount: int) -> None:
    assert failed_rule(transfer(amounts=[amount])) is None


@pytest.mark.parametrize("amount", [0, MAX_MONEY + 1, 2**64 - 1, -1])
def test_t3_amount_outside_1_to_max_money_is_rejected(amount: int) -> None:
    assert failed_rule(transfer(amounts=[amount])) == "T3"


def test_t3_zero_amount_in_a_later_output_is_rejected() -> None:
    assert failed_rule(transfer(amounts=[5, 0, 5])) == "T3"


def test_t3_outputs_summing_to_max_money_pass() -> None:
    half = MAX_MONEY // 2
    assert failed_rule(transfer(amounts=[half, MAX_MONEY - half])) is None


def test_t3_outputs_summing_above_max_money_are_rejected() -> None:
    """Each amount is in range; only their sum overflows the bound a single tx may move."""
    half = MAX_MONEY // 2
    assert failed_rule(transfer(amounts=[half, MAX_MONEY - half + 1])) == "T3"


def test_t3_out_index_0xfffffffe_is_spendable() -> None:
    assert failed_rule(transfer(_inputs(1, out_index=REDEMPTION_INDEX - 1))) is None


def test_t3_transfer_may_not_spend_out_index_0xffffffff() -> None:
    """0xFFFFFFFF marks a redemption's anchor; a transfer naming it spends nothing real."""
    assert failed_rule(transfer(_inputs(1, out_index=REDEMPTION_INDEX))) == "T3"


def test_t3_reserved_out_index_in_a_later_input_is_rejected() -> None:
    inputs = [*_inputs(1), TxIn(_txid(9), REDEMPTION_INDEX, PUBKEY, bytes(64))]
    assert failed_rule(transfer(inputs)) == "T3"


# --- T4 duplicate outpoints -------------------------------------------------------------------


def test_t4_two_inputs_spending_one_outpoint_are_rejected() -> None:
    inputs = [TxIn(_txid(1), 3, PUBKEY, bytes(64)), TxIn(_txid(1), 3, PUBKEY, bytes([1]) * 64)]
    assert failed_rule(transfer(inputs)) == "T4"


def test_t4_duplicate_need_not_be_adjacent() -> None:
    inputs = [
        TxIn(_txid(1), 3, PUBKEY, bytes(64)),
        *_inputs(1),
        TxIn(_txid(1), 3, PUBKEY, bytes(64)),
    ]
    assert failed_rule(transfer(inputs)) == "T4"


def test_t4_same_txid_different_index_passes() -> None:
    inputs = [TxIn(_txid(1), 0, PUBKEY, bytes(64)), TxIn(_txid(1), 1, PUBKEY, bytes(64))]
    assert failed_rule(transfer(inputs)) is None


def test_t4_same_index_different_txid_passes() -> None:
    inputs = [TxIn(_txid(1), 0, PUBKEY, bytes(64)), TxIn(_txid(2), 0, PUBKEY, bytes(64))]
    assert failed_rule(transfer(inputs)) is None


# --- T5 registration and redemption amounts ---------------------------------------------------


@pytest.mark.parametrize("amount", [1, MAX_MONEY])
def test_t5_registration_amount_must_be_zero(amount: int) -> None:
    assert failed_rule(registration(amounts=[amount])) == "T5"


@pytest.mark.parametrize("amounts", [(1,), (1, 5)])
def test_t5_redemption_output0_amount_must_be_zero(amounts: tuple[int, ...]) -> None:
    """output[0] names the next redemption key and creates no UTXO, so it carries nothing."""
    assert failed_rule(redemption(amounts=amounts)) == "T5"


@pytest.mark.parametrize("claim", [0, MAX_MONEY + 1])
def test_t5_redemption_claim_outside_1_to_max_money_is_rejected(claim: int) -> None:
    assert failed_rule(redemption(amounts=(0, claim))) == "T5"


@pytest.mark.parametrize("claim", [1, MAX_MONEY])
def test_t5_redemption_claim_in_1_to_max_money_passes(claim: int) -> None:
    assert failed_rule(redemption(amounts=(0, claim))) is None


# --- T6 signatures ----------------------------------------------------------------------------

OUTPOINTS = [(_txid(1), 0), (_txid(2), 5), (_txid(3), 1)]
SECRETS = [SECRET_A, SECRET_B, SECRET_A]


def signed_transfer(aux_rand: bytes = bytes(32)) -> Transaction:
    return sign_transaction(
        TxKind.TRANSFER,
        OUTPOINTS,
        [TxOut(100, ADDRESS), TxOut(200, Address(hash32(b"change")))],
        SECRETS,
        PARAMS,
        aux_rand,
    )


def _with(
    tx: Transaction, inputs: Sequence[TxIn] | None = None, outputs: Sequence[TxOut] | None = None
) -> Transaction:
    return make_transaction(
        tx.kind,
        tx.inputs if inputs is None else inputs,
        tx.outputs if outputs is None else outputs,
    )


def test_t6_signed_transfer_verifies() -> None:
    tx = signed_transfer()
    assert failed_rule(tx) is None
    assert verify_tx_signatures(tx, PARAMS)
    check_tx_signatures(tx, PARAMS)


def test_t6_signed_transfer_verifies_after_a_bytes_round_trip() -> None:
    tx = decode_transaction(signed_transfer().raw, PARAMS)
    assert verify_tx_signatures(tx, PARAMS)


def test_t6_each_input_is_signed_by_its_own_key() -> None:
    tx = signed_transfer()
    assert [i.pubkey for i in tx.inputs] == [xonly_pubkey(s) for s in SECRETS]


@pytest.mark.parametrize("index", [0, 1])
def test_t6_changing_an_output_amount_invalidates(index: int) -> None:
    tx = signed_transfer()
    outputs = list(tx.outputs)
    outputs[index] = TxOut(outputs[index].amount + 1, outputs[index].address)
    assert not verify_tx_signatures(_with(tx, outputs=outputs), PARAMS)


@pytest.mark.parametrize("index", [0, 1])
def test_t6_changing_an_output_address_invalidates(index: int) -> None:
    tx = signed_transfer()
    outputs = list(tx.outputs)
    outputs[index] = TxOut(outputs[index].amount, Address(hash32(b"thief")))
    assert not verify_tx_signatures(_with(tx, outputs=outputs), PARAMS)


def test_t6_adding_an_output_invalidates() -> None:
    tx = signed_transfer()
    assert not verify_tx_signatures(_with(tx, outputs=[*tx.outputs, TxOut(1, ADDRESS)]), PARAMS)


def test_t6_changing_the_kind_invalidates() -> None:
    tx = signed_transfer()
    changed = make_transaction(TxKind.REDEMPTION, tx.inputs, tx.outputs)
    assert not verify_tx_signatures(changed, PARAMS)


def test_t6_changing_an_outpoint_invalidates() -> None:
    tx = signed_transfer()
    first = tx.inputs[0]
    moved = TxIn(first.txid, first.out_index + 1, first.pubkey, first.signature)
    assert not verify_tx_signatures(_with(tx, inputs=[moved, *tx.inputs[1:]]), PARAMS)


def test_t6_signature_from_another_network_is_invalid() -> None:
    """A testnet transaction replayed on mainnet (or the reverse) fails: the network is signed."""
    tx = signed_transfer()
    assert not verify_tx_signatures(tx, TESTNET)
    with pytest.raises(InvalidTransaction) as excinfo:
        check_tx_signatures(tx, TESTNET)
    assert excinfo.value.rule == "T6"


def test_t6_sighash_commits_to_the_input_position() -> None:
    """Inputs 0 and 2 share a key; input 0's signature copied to slot 2 must not verify there."""
    tx = signed_transfer()
    assert compute_sighash(tx, 0, PARAMS) != compute_sighash(tx, 2, PARAMS)
    inputs = list(tx.inputs)
    inputs[2] = TxIn(inputs[2].txid, inputs[2].out_index, inputs[2].pubkey, inputs[0].signature)
    assert not verify_tx_signatures(_with(tx, inputs=inputs), PARAMS)


def test_t6_reordering_inputs_invalidates() -> None:
    tx = signed_transfer()
    inputs = [tx.inputs[2], tx.inputs[1], tx.inputs[0]]
    assert not verify_tx_signatures(_with(tx, inputs=inputs), PARAMS)


def test_t6_signature_under_the_wrong_key_is_invalid() -> None:
    tx = signed_transfer()
    first = tx.inputs[0]
    swapped = TxIn(first.txid, first.out_index, xonly_pubkey(SECRET_B), first.signature)
    assert not verify_tx_signatures(_with(tx, inputs=[swapped, *tx.inputs[1:]]), PARAMS)


def test_t6_one_bad_signature_among_several_invalidates() -> None:
    tx = signed_transfer()
    last = tx.inputs[-1]
    bad = TxIn(last.txid, last.out_index, last.pubkey, bytes(64))
    assert not verify_tx_signatures(_with(tx, inputs=[*tx.inputs[:-1], bad]), PARAMS)


def test_t6_signed_redemption_verifies() -> None:
    tx = sign_transaction(
        TxKind.REDEMPTION,
        [(_txid(7), REDEMPTION_INDEX)],
        _outputs(0, 5000),
        [SECRET_B],
        PARAMS,
    )
    assert failed_rule(tx) is None
    assert verify_tx_signatures(tx, PARAMS)


def test_t6_registration_has_no_signatures_to_check() -> None:
    assert verify_tx_signatures(registration(), PARAMS)


# --- txid covers signatures (§2.2) ------------------------------------------------------------


def test_txid_covers_signatures() -> None:
    """A signer who re-signs with fresh randomness gets a new txid for the same payment."""
    first = signed_transfer(bytes(32))
    second = signed_transfer(bytes([1]) * 32)
    assert verify_tx_signatures(first, PARAMS)
    assert verify_tx_signatures(second, PARAMS)
    assert first.inputs[0].signature != second.inputs[0].signature
    assert first.outputs == second.outputs
    assert first.txid != second.txid
    assert first.txid == hash32(first.raw)
