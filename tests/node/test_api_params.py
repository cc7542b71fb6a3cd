"""Request parameter parsing of the HTTP API (node/api/params.py)."""

import re

from hypothesis import example, given
from hypothesis import strategies as st

from node.api.params import parse_hex

_HEX_BYTES = re.compile(r"(?:[0-9a-fA-F]{2})*")


@given(
    st.text(alphabet="0123456789abcdefABCDEFgx \t\n\r\x0b\x0c\x1c\u00a0\u0660\uff10", max_size=12)
)
@example("")
@example("00 11")
@example("0011\n")
@example("0")
@example("\u0660\u0660")
def test_parse_hex_takes_exactly_hex_digit_pairs(text: str) -> None:
    """Two ASCII hex digits per byte and nothing else: no whitespace, no other digits."""
    expected = bytes.fromhex(text) if _HEX_BYTES.fullmatch(text) else None
    assert parse_hex(text) == expected
