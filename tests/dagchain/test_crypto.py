"""Merkle root (§2.4), sighash E7, addresses E8, signatures T6 and the §2.6 transaction vector."""

import hashlib
import random

import pytest
from coincurve import PrivateKey

from dagchain.crypto import (
    ZERO_HASH,
    SchnorrKey,
    address_from_pubkey,
    decode_address,
    encode_address,
    hash32,
    merkle_root,
    sign_schnorr,
    verify_schnorr,
    xonly_pubkey,
)
from dagchain.encoding import pack
from dagchain.errors import EncodingError
from dagchain.genesis import FAUCET_ADDRESS, FAUCET_PUBKEY, FAUCET_SECRET
from dagchain.params import DEVNET, MAINNET, PRESETS, SIM, TESTNET, ConsensusParams
from dagchain.transactions import (
    Transaction,
    TxIn,
    TxKind,
    TxOut,
    compute_sighash,
    decode_transaction,
    make_transaction,
    sign_transaction,
    verify_tx_signatures,
)
from dagchain.types import Address, TxId

# --- §2.4 merkle root -------------------------------------------------------------------------


def _txid(i: int) -> bytes:
    return bytes([i]) * 32


@pytest.mark.parametrize(
    ("count", "root"),
    [
        (0, "00" * 32),
        (1, "6bf22d230bc6f17e2dc9bdce220e8696630a067ab5029fb66d91e6ecd74c7c54"),
        (2, "e7ee5228698f31758aa7e13445bc54d4c4b37303a90d5ca4677fad9976d1187b"),
        (3, "a7346514f635523b73d3adb12bf49a26cf1a8063afc422025e203cde74e5ecbe"),
        (5, "daf740e7aa956cb636ee5d465a8d6fe03480fcfe405ebe98a17dd888bab43bb5"),
    ],
)
def test_merkle_root_section_2_4_vectors(count: int, root: str) -> None:
    assert merkle_root([_txid(i) for i in range(1, count + 1)]).hex() == root


def test_merkle_root_of_no_txs_is_zero_hash() -> None:
    assert merkle_root([]) == ZERO_HASH == bytes(32)


def test_merkle_odd_entry_is_promoted_not_duplicated() -> None:
    """§2.4: [t1, t2, t3] is node(node(l1, l2), l3), so [t1, t2, t3, t3] has a different root."""
    leaves = [hash32(b"\x00" + _txid(i)) for i in (1, 2, 3)]
    expected = hash32(b"\x01" + hash32(b"\x01" + leaves[0] + leaves[1]) + leaves[2])
    three = [_txid(1), _txid(2), _txid(3)]
    assert merkle_root(three) == expected
    assert merkle_root([*three, _txid(3)]) != expected


def test_merkle_leaf_and_node_are_domain_separated() -> None:
    """A single txid equal to an inner node's preimage half cannot pose as that node."""
    assert merkle_root([_txid(1)]) == hash32(b"\x00" + _txid(1)) != _txid(1)


# --- §2.6 transaction vector (E7, E8, T6, txid) -----------------------------------------------

VECTOR_SECRET = (3).to_bytes(32, "big")
VECTOR_PUBKEY = "f9308a019258c31049344f85f89d5229b531c845836f99b08601f113bce036f9"
VECTOR_ADDRESS = "26527b05c191fad66a8adcf625f3ff956fa9e8d6e29e513f4d89e578609b2989"
VECTOR_FUNDING = "0c38d0a7172dd69a87d2d4ee8146bac5a6b5caa0075922a12851ec725231ae39"
VECTOR_SIGHASH = "fa938d68dda5f33e6fb32b1c1b2b66ded8c456b09d5340c4f045a5235f8c1d88"
VECTOR_SIGNATURE = (
    "cf56a1cbe8e6bca15ea9490652b3a25a0da5dba016ab43732ffdd52e1ba1c1c2"
    "c53ff6d9293bffb90f4b3febf557fe314fe6208988d08e5ce23fbc8824b33ea7"
)
VECTOR_TX_HEX = (
    "9401009194c4200c38d0a7172dd69a87d2d4ee8146bac5a6b5caa0075922a12851ec725231ae3900c420f9308a01"
    "9258c31049344f85f89d5229b531c845836f99b08601f113bce036f9c440cf56a1cbe8e6bca15ea9490652b3a25a"
    "0da5dba016ab43732ffdd52e1ba1c1c2c53ff6d9293bffb90f4b3febf557fe314fe6208988d08e5ce23fbc8824b3"
    "3ea79292ce23c34600c4209407263be9dc3c4b5b9afbd02ebb5d5cbda687dfb57c65c1816c8cdca9b677a092ce17"
    "d75cf0c42026527b05c191fad66a8adcf625f3ff956fa9e8d6e29e513f4d89e578609b2989"
)
VECTOR_TXID = "341e91862d3d95e6fbbe019c2adc2751d8c960e33dd0dfd78cfb98984990f0fa"
VECTOR_DISPLAY = "dag1yef8kpwpj8adv652mnmztullj4h6n6xku209z06d38jhscym9xysf9h56a"
G_X = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798"
G_X_ADDRESS = "9407263be9dc3c4b5b9afbd02ebb5d5cbda687dfb57c65c1816c8cdca9b677a0"


def _vector_outputs() -> list[TxOut]:
    return [
        TxOut(600_000_000, Address(bytes.fromhex(G_X_ADDRESS))),
        TxOut(399_990_000, Address(bytes.fromhex(VECTOR_ADDRESS))),
    ]


def _vector_tx(signature: bytes) -> Transaction:
    funding = TxId(bytes.fromhex(VECTOR_FUNDING))
    return make_transaction(
        TxKind.TRANSFER,
        [TxIn(funding, 0, bytes.fromhex(VECTOR_PUBKEY), signature)],
        _vector_outputs(),
    )


def test_vector_key_pubkey_and_address() -> None:
    assert xonly_pubkey(VECTOR_SECRET).hex() == VECTOR_PUBKEY
    assert address_from_pubkey(bytes.fromhex(VECTOR_PUBKEY)).hex() == VECTOR_ADDRESS


def test_vector_funding_txid_and_payee_address() -> None:
    assert hash32(b"example funding tx").hex() == VECTOR_FUNDING
    assert hash32(bytes.fromhex(G_X)).hex() == G_X_ADDRESS


def test_e7_vector_sighash() -> None:
    """The sighash ignores the signature field, so any placeholder gives the same value."""
    assert compute_sighash(_vector_tx(bytes(64)), 0, MAINNET).hex() == VECTOR_SIGHASH
    signed = _vector_tx(bytes.fromhex(VECTOR_SIGNATURE))
    assert compute_sighash(signed, 0, MAINNET).hex() == VECTOR_SIGHASH


def test_t6_vector_signature_with_zero_aux_randomness() -> None:
    signature = sign_schnorr(VECTOR_SECRET, bytes.fromhex(VECTOR_SIGHASH), bytes(32))
    assert signature.hex() == VECTOR_SIGNATURE
    assert verify_schnorr(bytes.fromhex(VECTOR_PUBKEY), signature, bytes.fromhex(VECTOR_SIGHASH))


def test_vector_tx_bytes_and_txid() -> None:
    tx = _vector_tx(bytes.fromhex(VECTOR_SIGNATURE))
    assert len(tx.raw) == 221
    assert tx.raw.hex() == VECTOR_TX_HEX
    assert tx.txid.hex() == VECTOR_TXID


def test_vector_tx_decodes_and_verifies_on_mainnet() -> None:
    tx = decode_transaction(bytes.fromhex(VECTOR_TX_HEX), MAINNET)
    assert tx == _vector_tx(bytes.fromhex(VECTOR_SIGNATURE))
    assert tx.txid.hex() == VECTOR_TXID
    assert verify_tx_signatures(tx, MAINNET)


def test_vector_tx_from_sign_transaction() -> None:
    funding = TxId(bytes.fromhex(VECTOR_FUNDING))
    tx = sign_transaction(
        TxKind.TRANSFER, [(funding, 0)], _vector_outputs(), [VECTOR_SECRET], MAINNET, bytes(32)
    )
    assert tx.raw.hex() == VECTOR_TX_HEX


@pytest.mark.parametrize("params", [TESTNET, DEVNET, SIM], ids=lambda p: p.network_id)
def test_e7_vector_signature_is_not_valid_on_other_networks(params: ConsensusParams) -> None:
    tx = decode_transaction(bytes.fromhex(VECTOR_TX_HEX), MAINNET)
    assert not verify_tx_signatures(tx, params)


# --- E7 sighash -------------------------------------------------------------------------------


def _two_input_tx() -> Transaction:
    return make_transaction(
        TxKind.TRANSFER,
        [
            TxIn(TxId(_txid(1)), 0, bytes.fromhex(VECTOR_PUBKEY), bytes([1]) * 64),
            TxIn(TxId(_txid(2)), 7, bytes.fromhex(G_X), bytes([2]) * 64),
        ],
        [TxOut(5, Address(_txid(9)))],
    )


@pytest.mark.parametrize("index", [0, 1])
def test_e7_sighash_is_the_section_2_3_formula(index: int) -> None:
    tx = _two_input_tx()
    stripped = [
        tx.version,
        tx.kind,
        [[i.txid, i.out_index, i.pubkey, b""] for i in tx.inputs],
        [[o.amount, o.address] for o in tx.outputs],
    ]
    body = pack(stripped)
    assert b"\xc4\x00" in body  # the signature placeholder is an empty bin
    net = MAINNET.network_id.encode("ascii")
    preimage = b"dagchain-sighash" + bytes([len(net)]) + net + body + index.to_bytes(4, "little")
    expected = hashlib.blake2b(preimage, digest_size=32).digest()
    assert compute_sighash(tx, index, MAINNET) == expected


def test_e7_sighash_commits_to_the_input_position() -> None:
    tx = _two_input_tx()
    assert compute_sighash(tx, 0, MAINNET) != compute_sighash(tx, 1, MAINNET)


def test_e7_sighash_commits_to_the_network() -> None:
    tx = _two_input_tx()
    sighashes = {compute_sighash(tx, 0, p) for p in PRESETS.values()}
    assert len(sighashes) == len(PRESETS)


def test_e7_sighash_commits_to_kind_outputs_and_other_inputs() -> None:
    tx = _two_input_tx()
    base = compute_sighash(tx, 0, MAINNET)
    changed_kind = make_transaction(TxKind.REDEMPTION, tx.inputs, tx.outputs)
    changed_output = make_transaction(tx.kind, tx.inputs, [TxOut(6, tx.outputs[0].address)])
    other = tx.inputs[1]
    changed_other_input = make_transaction(
        tx.kind, [tx.inputs[0], TxIn(other.txid, 8, other.pubkey, other.signature)], tx.outputs
    )
    for variant in (changed_kind, changed_output, changed_other_input):
        assert compute_sighash(variant, 0, MAINNET) != base


def test_e7_sighash_ignores_every_signature() -> None:
    tx = _two_input_tx()
    resigned = make_transaction(
        tx.kind, [TxIn(i.txid, i.out_index, i.pubkey, bytes(64)) for i in tx.inputs], tx.outputs
    )
    for index in (0, 1):
        assert compute_sighash(resigned, index, MAINNET) == compute_sighash(tx, index, MAINNET)


# --- E8 addresses -----------------------------------------------------------------------------

# An independent bech32/bech32m (BIP173/BIP350 reference algorithm) to build edge-case strings.
_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
BECH32_CONST = 1
BECH32M_CONST = 0x2BC830A3


def _polymod(values: list[int]) -> int:
    generator = [0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3]
    chk = 1
    for value in values:
        top = chk >> 25
        chk = (chk & 0x1FFFFFF) << 5 ^ value
        for i in range(5):
            chk ^= generator[i] if ((top >> i) & 1) else 0
    return chk


def _bech32_string(hrp: str, data: list[int], const: int) -> str:
    expanded = [ord(x) >> 5 for x in hrp] + [0] + [ord(x) & 31 for x in hrp]
    poly = _polymod(expanded + data + [0] * 6) ^ const
    checksum = [(poly >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(_CHARSET[d] for d in data + checksum)


def _to_5bit(data: bytes) -> list[int]:
    bits = "".join(f"{byte:08b}" for byte in data)
    bits += "0" * (-len(bits) % 5)
    return [int(bits[i : i + 5], 2) for i in range(0, len(bits), 5)]


VECTOR_ADDR = Address(bytes.fromhex(VECTOR_ADDRESS))


def test_e8_address_is_hash_of_xonly_pubkey() -> None:
    assert address_from_pubkey(bytes.fromhex(VECTOR_PUBKEY)) == hash32(bytes.fromhex(VECTOR_PUBKEY))


def test_e8_mainnet_display_form_is_the_vector() -> None:
    assert encode_address(MAINNET.hrp, VECTOR_ADDR) == VECTOR_DISPLAY
    assert decode_address(MAINNET.hrp, VECTOR_DISPLAY) == VECTOR_ADDR


@pytest.mark.parametrize(
    ("params", "prefix", "suffix"),
    [
        (MAINNET, "dag1", "xysf9h56a"),
        (TESTNET, "tdag1", "xysyzszmw"),
        (DEVNET, "ddag1", "xysuvgmaa"),
        (SIM, "sdag1", "xys53qtlt"),
    ],
    ids=lambda v: v.network_id if isinstance(v, ConsensusParams) else None,
)
def test_e8_display_form_on_each_network(params: ConsensusParams, prefix: str, suffix: str) -> None:
    """The 52 data characters are network-independent; only the HRP and the checksum change."""
    text = encode_address(params.hrp, VECTOR_ADDR)
    assert text.startswith(prefix)
    assert text.endswith(suffix)
    assert text[len(params.hrp) + 1 : -6] == VECTOR_DISPLAY[4:-6]
    assert len(text) == len(params.hrp) + 1 + 52 + 6
    assert decode_address(params.hrp, text) == VECTOR_ADDR


@pytest.mark.parametrize("params", list(PRESETS.values()), ids=lambda p: p.network_id)
def test_e8_display_form_matches_reference_bech32m(params: ConsensusParams) -> None:
    expected = _bech32_string(params.hrp, _to_5bit(VECTOR_ADDR), BECH32M_CONST)
    assert encode_address(params.hrp, VECTOR_ADDR) == expected


def test_e8_all_uppercase_display_form_is_accepted() -> None:
    """BIP350 allows one case throughout; only a mix is refused."""
    assert decode_address("dag", VECTOR_DISPLAY.upper()) == VECTOR_ADDR


@pytest.mark.parametrize("position", [0, 4, 30, len(VECTOR_DISPLAY) - 1])
def test_e8_mixed_case_is_rejected(position: int) -> None:
    text = (
        VECTOR_DISPLAY[:position]
        + VECTOR_DISPLAY[position].upper()
        + VECTOR_DISPLAY[position + 1 :]
    )
    assert text != VECTOR_DISPLAY
    with pytest.raises(EncodingError):
        decode_address("dag", text)


@pytest.mark.parametrize(("hrp", "other"), [("dag", "tdag"), ("tdag", "dag"), ("ddag", "sdag")])
def test_e8_wrong_hrp_is_rejected(hrp: str, other: str) -> None:
    """An address of one network is not an address on another, even with a valid checksum."""
    with pytest.raises(EncodingError):
        decode_address(hrp, encode_address(other, VECTOR_ADDR))


def test_e8_bech32_non_m_checksum_is_rejected() -> None:
    text = _bech32_string("dag", _to_5bit(VECTOR_ADDR), BECH32_CONST)
    assert text[:-6] == VECTOR_DISPLAY[:-6]
    assert text != VECTOR_DISPLAY
    with pytest.raises(EncodingError):
        decode_address("dag", text)


@pytest.mark.parametrize("padding", [1, 2, 8, 15])
def test_e8_non_zero_padding_bits_are_rejected(padding: int) -> None:
    """260 data bits carry 256 address bits: the last 4 must be zero (one address, one string)."""
    data = _to_5bit(VECTOR_ADDR)
    assert data[-1] & 0x0F == 0
    data[-1] |= padding
    text = _bech32_string("dag", data, BECH32M_CONST)
    with pytest.raises(EncodingError):
        decode_address("dag", text)


@pytest.mark.parametrize("length", [31, 33])
def test_e8_payload_of_wrong_length_is_rejected(length: int) -> None:
    text = _bech32_string("dag", _to_5bit(bytes(length)), BECH32M_CONST)
    with pytest.raises(EncodingError):
        decode_address("dag", text)


def test_e8_every_single_character_corruption_is_rejected() -> None:
    data_start = len("dag1")
    for position in range(data_start, len(VECTOR_DISPLAY)):
        original = VECTOR_DISPLAY[position]
        replacement = _CHARSET[(_CHARSET.index(original) + 1) % 32]
        text = VECTOR_DISPLAY[:position] + replacement + VECTOR_DISPLAY[position + 1 :]
        with pytest.raises(EncodingError):
            decode_address("dag", text)


@pytest.mark.parametrize("bad", ["b", "i", "o", "1", "!"])
def test_e8_character_outside_the_charset_is_rejected(bad: str) -> None:
    text = VECTOR_DISPLAY[:10] + bad + VECTOR_DISPLAY[11:]
    with pytest.raises(EncodingError):
        decode_address("dag", text)


@pytest.mark.parametrize(
    "text", ["", "dag1", "dag1qqqqqq", VECTOR_DISPLAY[:-1], VECTOR_DISPLAY + "q", "dagq" + "q" * 58]
)
def test_e8_truncated_extended_or_separatorless_string_is_rejected(text: str) -> None:
    with pytest.raises(EncodingError):
        decode_address("dag", text)


@pytest.mark.parametrize("length", [0, 31, 33])
def test_e8_only_32_byte_addresses_have_a_display_form(length: int) -> None:
    with pytest.raises(EncodingError):
        encode_address("dag", bytes(length))


# --- T6 signatures ----------------------------------------------------------------------------

MESSAGE = hash32(b"message")
SIGNATURE = sign_schnorr(VECTOR_SECRET, MESSAGE, bytes(32))
PUBKEY = bytes.fromhex(VECTOR_PUBKEY)
# BIP340 test vectors 5 and 14: x has no point on the curve; x is not below the field size p.
X_NOT_ON_CURVE = bytes.fromhex("eefdea4cdb677750a420fee807eacf21eb9898ae79b9768766e4faa04a2d4a34")
X_ABOVE_FIELD = bytes.fromhex("fffffffffffffffffffffffffffffffffffffffffffffffffffffffefffffc30")


def _flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def test_t6_bip340_vector_0() -> None:
    """BIP340 test vector 0: secret key 3, message and aux randomness of zero bytes."""
    signature = sign_schnorr(VECTOR_SECRET, bytes(32), bytes(32))
    assert signature.hex() == (
        "e907831f80848d1069a5371b402410364bdf1c5f8307b0084c55f1ce2dca8215"
        "25f66a4a85ea8b71e482a74f382d2ce5ebeee8fdb2172f477df4900d310536c0"
    )


def test_t6_valid_signature_verifies() -> None:
    assert verify_schnorr(PUBKEY, SIGNATURE, MESSAGE)


@pytest.mark.parametrize("bit", [0, 7, 255, 256, 511])
def test_t6_signature_with_a_flipped_bit_fails(bit: int) -> None:
    assert not verify_schnorr(PUBKEY, _flip(SIGNATURE, bit), MESSAGE)


@pytest.mark.parametrize("bit", [0, 128, 255])
def test_t6_signature_over_a_different_message_fails(bit: int) -> None:
    assert not verify_schnorr(PUBKEY, SIGNATURE, _flip(MESSAGE, bit))


def test_t6_signature_under_the_wrong_key_fails() -> None:
    assert not verify_schnorr(FAUCET_PUBKEY, SIGNATURE, MESSAGE)


@pytest.mark.parametrize(
    "pubkey",
    [
        pytest.param(X_NOT_ON_CURVE, id="x-not-on-curve"),
        pytest.param(X_ABOVE_FIELD, id="x-above-field-size"),
        pytest.param(bytes(32), id="zero"),
        pytest.param(PUBKEY[:31], id="31-bytes"),
    ],
)
def test_t6_invalid_xonly_key_returns_false_not_an_exception(pubkey: bytes) -> None:
    """A peer must not crash the verifier with an invalid key; the tx simply fails T6."""
    assert verify_schnorr(pubkey, SIGNATURE, MESSAGE) is False


@pytest.mark.parametrize("extra", [b"\x00", b"\xff" * 5], ids=["one-byte", "five-bytes"])
def test_t6_key_with_trailing_bytes_is_not_a_valid_xonly_key(extra: bytes) -> None:
    """Regression: coincurve's ``PublicKeyXOnly`` reads the first 32 bytes and ignores the rest.

    ``verify_schnorr`` returned True for a 33-byte "key" whose prefix was the signer's key.
    """
    assert verify_schnorr(PUBKEY + extra, SIGNATURE, MESSAGE) is False


@pytest.mark.parametrize("length", [0, 63, 65])
def test_t6_signature_of_wrong_length_returns_false(length: int) -> None:
    assert verify_schnorr(PUBKEY, (SIGNATURE * 2)[:length], MESSAGE) is False


# --- faucet key (§10 Genesis) -----------------------------------------------------------------


def test_faucet_key_vector() -> None:
    assert int.from_bytes(FAUCET_SECRET, "big") == 1
    assert xonly_pubkey(FAUCET_SECRET).hex() == G_X
    assert FAUCET_PUBKEY.hex() == G_X
    assert address_from_pubkey(FAUCET_PUBKEY).hex() == G_X_ADDRESS
    assert FAUCET_ADDRESS.hex() == G_X_ADDRESS


@pytest.mark.parametrize("seed", range(3))
def test_schnorr_key_signs_and_derives_as_coincurve(seed: int) -> None:
    """SchnorrKey calls libsecp256k1 directly: the same x-only keys and BIP340 signatures as
    coincurve's ``PrivateKey`` (deterministic for a given aux_rand), and they verify."""
    rng = random.Random(seed)
    for _ in range(20):
        secret = rng.randbytes(32)
        message, aux = rng.randbytes(32), rng.randbytes(32)
        key = SchnorrKey(secret)
        reference = PrivateKey(secret)
        assert key.xonly == reference.public_key_xonly.format()
        assert xonly_pubkey(secret) == key.xonly
        signature = key.sign(message, aux)
        assert signature == reference.sign_schnorr(message, aux)
        assert sign_schnorr(secret, message, aux) == signature
        assert verify_schnorr(key.xonly, signature, message)


SECP256K1_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


@pytest.mark.parametrize(
    "secret",
    [bytes(32), SECP256K1_ORDER.to_bytes(32, "big"), b"\xff" * 32, b"\x01" * 33],
)
def test_schnorr_key_refuses_an_invalid_secret(secret: bytes) -> None:
    with pytest.raises(ValueError, match="secret key"):
        SchnorrKey(secret)


def test_schnorr_key_signs_only_32_byte_messages() -> None:
    key = SchnorrKey(bytes(31) + b"\x01")
    with pytest.raises(ValueError, match="32-byte"):
        key.sign(b"short", bytes(32))
