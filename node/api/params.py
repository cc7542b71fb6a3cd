"""Reading a request: hashes, integers, addresses, the ``{"raw": hex}`` body and the bearer token.

Each refuses bad input with one :class:`~node.api.context.ApiError` (400 or 401) naming the rule.
"""

import json
import re
import secrets
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from apiclient import models as M
from dagchain.crypto import decode_address
from dagchain.errors import (
    EncodingError,
)
from dagchain.types import Address
from node.api.context import CTX, ApiContext, ApiError

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


def parse_hex32(text: str) -> bytes | None:
    """Exactly 64 hex digits as 32 bytes, else None.

    Not ``bytes.fromhex`` alone: it skips whitespace, so 64 characters with spaces in them would
    give fewer than 32 bytes, which the store's prefix scans would match against longer keys.
    """
    return bytes.fromhex(text) if _HEX64.fullmatch(text) else None


def hex32(text: str, what: str = "hash") -> bytes:
    value = parse_hex32(text)
    if value is None:
        raise ApiError(400, f"bad-{what}", f"{what} must be 64 hex characters")
    return value


_DECIMAL = re.compile(r"[0-9]{1,19}")
"""ASCII decimal digits only, never ``int()``: it reads ``1_0``, other scripts' digits, spaces and
signs. INT_MAX has 19 digits, so a longer string is out of range before any conversion."""


def parse_int(text: str, name: str, lo: int, hi: int, code: str = "bad-parameter") -> int:
    """``text`` as an integer in ``lo..hi``; anything else is one 400 naming the bound."""
    value = int(text) if _DECIMAL.fullmatch(text) else None
    if value is None or not lo <= value <= hi:
        raise ApiError(400, code, f"{name} must be a decimal integer in {lo}..{hi}")
    return value


def int_query(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    text = request.query.get(name)
    return default if text is None else parse_int(text, name, lo, hi)


async def _json_body(request: web.Request) -> Any:
    # The bytes are parsed as JSON (UTF-8, or the UTF-16/32 that json detects), whatever charset
    # the Content-Type names: request.json() would decode by that charset, and an unknown one is
    # a LookupError. Nesting deep enough to exhaust the parser's recursion is not JSON we take.
    data = await request.read()
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise ApiError(400, "bad-json", "the body is not JSON") from None


def parse_hex(text: str) -> bytes | None:
    """Hex digits, two per byte, as bytes; else None.

    Not ``bytes.fromhex`` alone: it skips whitespace, so "00 11" would pass as two bytes. It
    refuses everything else that is not an ASCII hex digit, so two characters per byte out
    means no whitespace was skipped (no pattern match: one per tx of a batch, and the
    pattern took 13 times as long on a 230-byte tx).
    """
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        return None
    return raw if 2 * len(raw) == len(text) else None


async def raw_body(request: web.Request) -> bytes:
    """The bytes of a ``{"raw": "<hex>"}`` body."""
    try:
        body = M.RawRequest.model_validate(await _json_body(request))
    except ValidationError as exc:
        raise ApiError(400, "bad-request", 'the body must be {"raw": "<hex>"}') from exc
    raw = parse_hex(body.raw)
    if raw is None:
        raise ApiError(400, "bad-hex", "raw must be hex digits, two per byte")
    return raw


async def raw_list_body(request: web.Request) -> list[str]:
    """The items of a ``{"raw": ["<hex>", ...]}`` body (1..TX_BATCH_MAX), each still to check."""
    try:
        body = M.SubmitTxBatchRequest.model_validate(await _json_body(request))
    except ValidationError as exc:
        raise ApiError(
            400,
            "bad-request",
            f'the body must be {{"raw": ["<hex>", ...]}} with 1..{M.TX_BATCH_MAX} items',
        ) from exc
    return body.raw


def check_token(request: web.Request) -> None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise ApiError(401, "unauthorized", "missing bearer token (see <datadir>/api.token)")
    # Bytes, not str: compare_digest refuses str with non-ASCII characters (a TypeError).
    given = token.strip().encode("utf-8", "surrogateescape")
    if not secrets.compare_digest(given, request.app[CTX].token.encode()):
        raise ApiError(401, "unauthorized", "bad bearer token")


def parse_address(ctx: ApiContext, text: str) -> Address:
    """A bech32m display address of this network, or 64 hex characters."""
    raw = parse_hex32(text)
    if raw is not None:
        return Address(raw)
    try:
        return decode_address(ctx.service.params.hrp, text)
    except EncodingError as exc:
        raise ApiError(400, "bad-address", f"not a {ctx.network} address: {exc}") from None
