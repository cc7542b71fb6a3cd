"""Compact targets (§2.5), target validity E9 and work."""

import pytest

from dagchain.errors import EncodingError
from dagchain.params import PRESETS, ConsensusParams
from dagchain.pow import (
    MAX_TARGET,
    MAX_TARGET_BITS,
    compute_work,
    decode_compact,
    encode_compact,
    is_valid_compact_target,
    normalize_target,
)

# §2.5 table rows that decode (bits, value).
COMPACT_TABLE = [
    pytest.param(0x2100FFFF, 0xFFFF << 240, id="max_target"),
    pytest.param(0x20400000, 1 << 254, id="devnet-ms-target"),
    pytest.param(0x1E010000, 1 << 232, id="mainnet-genesis-ms-target"),
    pytest.param(0x1E0FFFF0, 0xFFFF << 220, id="work-2^20"),
    pytest.param(0x02008000, 0x80, id="0x80-shifted"),
    pytest.param(0x04123456, 0x12345600, id="0x12345600"),
]


@pytest.mark.parametrize(("bits", "value"), COMPACT_TABLE)
def test_compact_table_decodes(bits: int, value: int) -> None:
    assert decode_compact(bits) == value


@pytest.mark.parametrize(("bits", "value"), COMPACT_TABLE)
def test_compact_table_encodes_back(bits: int, value: int) -> None:
    assert encode_compact(value) == bits
    assert normalize_target(value) == value


def test_compact_sign_bit_is_negative_and_an_error() -> None:
    """0x04923456: the mantissa's 0x800000 bit is a sign bit; a negative target is REJECTed."""
    with pytest.raises(EncodingError):
        decode_compact(0x04923456)


def test_compact_encode_shifts_a_mantissa_that_would_look_negative() -> None:
    assert encode_compact(0x80) == 0x02008000
    assert decode_compact(encode_compact(0x80)) == 0x80


def test_compact_encode_truncates_to_three_significant_bytes() -> None:
    assert encode_compact(0x12345678) == 0x04123456
    assert normalize_target(0x12345678) == 0x12345600


def test_compact_max_target_constant() -> None:
    assert MAX_TARGET_BITS == 0x2100FFFF
    assert MAX_TARGET == 0xFFFF * 2**240


def test_compact_small_exponents_shift_right() -> None:
    """decode: e <= 3 drops the low bytes of the mantissa."""
    assert decode_compact(0x01123456) == 0x12
    assert decode_compact(0x02123456) == 0x1234
    assert decode_compact(0x03123456) == 0x123456


def test_compact_zero_mantissa_with_sign_bit_is_zero_not_an_error() -> None:
    """The error needs both the sign bit and a non-zero mantissa (§2.5 decode)."""
    assert decode_compact(0x04800000) == 0


# --- E9 validity ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bits", [0x2100FFFF, 0x20400000, 0x1E010000, 0x1E0FFFF0, 0x03123456, 0x01010000, 0x2000FFFF]
)
def test_e9_canonical_in_range_target_is_valid(bits: int) -> None:
    """0x03123456 is canonical (three significant bytes); 0x2000FFFF needs its zero byte (sign)."""
    assert is_valid_compact_target(bits)


@pytest.mark.parametrize(
    "bits",
    [
        pytest.param(0x00000000, id="zero"),
        pytest.param(0x03000000, id="zero-mantissa"),
        pytest.param(0x01000001, id="shifted-to-zero"),
        pytest.param(0x04800000, id="negative-zero"),
    ],
)
def test_e9_zero_target_is_invalid(bits: int) -> None:
    assert not is_valid_compact_target(bits)


@pytest.mark.parametrize(
    "bits",
    [
        pytest.param(0x21010000, id="2^256"),
        pytest.param(0x22000100, id="max_target-non-canonical-above"),
        pytest.param(0x2101_0000 | 0x1, id="just-above-max"),
        pytest.param(0xFF7FFFFF, id="huge-exponent"),
    ],
)
def test_e9_target_above_max_target_is_invalid(bits: int) -> None:
    assert decode_compact(bits) > MAX_TARGET
    assert not is_valid_compact_target(bits)


def test_e9_negative_target_is_invalid() -> None:
    assert not is_valid_compact_target(0x04923456)


@pytest.mark.parametrize(
    ("bits", "canonical"),
    [
        pytest.param(0x01123456, 0x01120000, id="low-bytes-dropped-by-small-exponent"),
        pytest.param(0x04001234, 0x03123400, id="leading-zero-byte"),
        pytest.param(0x05000080, 0x04008000, id="padded-0x800000"),
        pytest.param(0x20007FFF, 0x1F7FFF00, id="leading-zero-byte-near-max"),
        pytest.param(0x22000100, 0x2101_0000, id="above-max-too"),
    ],
)
def test_e9_non_canonical_compact_is_invalid(bits: int, canonical: int) -> None:
    """Two headers with equal targets must carry equal bytes: only encode(decode(bits)) is valid."""
    value = decode_compact(bits)
    assert encode_compact(value) == canonical != bits
    assert not is_valid_compact_target(bits)


def test_e9_canonical_of_a_non_canonical_pair_is_valid() -> None:
    """0x04001234 and 0x03123400 decode to the same value; only the canonical one passes."""
    assert decode_compact(0x04001234) == decode_compact(0x03123400)
    assert not is_valid_compact_target(0x04001234)
    assert is_valid_compact_target(0x03123400)


@pytest.mark.parametrize("bits", [-1, 1 << 32])
def test_e9_bits_outside_u32_are_invalid(bits: int) -> None:
    assert not is_valid_compact_target(bits)


def test_e9_uses_the_given_max_target() -> None:
    assert not is_valid_compact_target(0x2100FFFF, max_target=1 << 254)
    assert is_valid_compact_target(0x20400000, max_target=1 << 254)


@pytest.mark.parametrize("params", list(PRESETS.values()), ids=lambda p: p.network_id)
def test_e9_every_genesis_target_is_valid(params: ConsensusParams) -> None:
    assert is_valid_compact_target(params.genesis_ms_target_bits, params.max_target)


# --- work -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "work"),
    [
        pytest.param(MAX_TARGET, 1, id="max_target"),
        pytest.param(1 << 232, 16_776_960, id="2^232"),
        pytest.param(0xFFFF << 220, 1 << 20, id="0xffff*2^220"),
        pytest.param(1 << 254, 3, id="2^254-coarse"),
    ],
)
def test_work_is_max_target_floor_divided_by_target(target: int, work: int) -> None:
    assert compute_work(target) == work


def test_work_uses_the_given_max_target() -> None:
    assert compute_work(1 << 200, max_target=1 << 210) == 1024
