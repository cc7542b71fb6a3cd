"""Test helpers that build real blocks with real (easy) proof of work against a Chain.

They use only the chain's public views (snapshots, windows, peer-chain heads) and the core's own
codecs, so no consensus rule is re-implemented here.
"""

import dataclasses
import hashlib
from collections.abc import Callable, Sequence

from dagchain.blocks import (
    NONCE_OFFSET,
    Block,
    BlockHeader,
    compute_merkle_root,
    compute_tips_root,
    make_block,
)
from dagchain.chain import Chain
from dagchain.crypto import address_from_pubkey, xonly_pubkey
from dagchain.pow import encode_compact
from dagchain.transactions import Transaction, TxKind, TxOut, make_transaction
from dagchain.types import BlockId


def registration_tx(key_address: bytes) -> Transaction:
    """A REGISTRATION naming ``key_address`` (§7.1)."""
    return make_transaction(TxKind.REGISTRATION, (), (TxOut(0, key_address),))  # type: ignore[arg-type]


def secret_of(n: int) -> bytes:
    """A deterministic test secret key."""
    return n.to_bytes(32, "big")


def address_of_secret(secret: bytes) -> bytes:
    """The address of a secret key (E8)."""
    return address_from_pubkey(xonly_pubkey(secret))


def grind(
    header: BlockHeader,
    target: int,
    want_milestone: bool | None,
    ms_target: int,
    accept: Callable[[bytes], bool] | None = None,
) -> BlockHeader:
    """Find a nonce with LE(id) <= target (and milestone status as wanted, if given), whose id
    also satisfies ``accept`` if given."""
    prefix = header.encode()[:NONCE_OFFSET]
    base = hashlib.blake2b(prefix, digest_size=32)
    nonce = header.nonce
    while True:
        h = base.copy()
        h.update(nonce.to_bytes(8, "little"))
        digest = h.digest()
        value = int.from_bytes(digest, "little")
        if value <= target:
            is_ms = value <= ms_target
            wanted = want_milestone is None or want_milestone == is_ms
            if wanted and (accept is None or accept(digest)):
                return dataclasses.replace(header, nonce=nonce)
        nonce += 1


def build_block(
    chain: Chain,
    *,
    previous: bytes,
    tip: bytes | None = None,
    tips: Sequence[bytes] | None = None,
    milestone: bytes | None = None,
    txs: Sequence[Transaction] = (),
    timestamp_ms: int | None = None,
    register: bytes | None = None,
    want_milestone: bool | None = None,
    nonce_start: int = 0,
    tips_root: bytes | None = None,
    accept: Callable[[bytes], bool] | None = None,
) -> Block:
    """A block on ``previous`` with real PoW against the milestone link's snapshot.

    ``register`` (an address) prepends a REGISTRATION (use with ``previous`` = genesis).
    ``timestamp_ms`` defaults to max(ts(milestone link), ts(previous)) + 1. ``tips`` is the tip
    list exactly as given (tests may pass one that breaks H5); ``tip`` is a one-tip shorthand;
    by default the one tip is the milestone link (or genesis). ``tips_root`` overrides the
    header's commitment (for H7 tests); by default it is §2.1 over ``tips``. ``accept``: a
    further condition on the block id the nonce is ground for (e.g. S5 for a child's txs).
    """
    ms = BlockId(milestone if milestone is not None else chain.best_id)
    snap = chain.get_snapshot(ms)
    assert snap is not None, "milestone link is not an accepted milestone"
    ms_block = chain.get_block(ms)
    prev_block = chain.get_block(previous)
    assert ms_block is not None
    assert prev_block is not None
    if timestamp_ms is None:
        timestamp_ms = max(ms_block.header.timestamp_ms, prev_block.header.timestamp_ms) + 1
    body = list(txs)
    if register is not None:
        body.insert(0, registration_tx(register))
    if tips is None:
        if tip is None:
            tip = ms if ms != previous else chain.genesis_id
        tips = [tip]
    header = BlockHeader(
        1,
        ms,
        BlockId(previous),
        compute_tips_root(tips) if tips_root is None else tips_root,
        compute_merkle_root(body),
        timestamp_ms,
        encode_compact(snap.blk_target),
        nonce_start,
    )
    header = grind(header, snap.blk_target, want_milestone, snap.ms_target, accept)
    return make_block(header, tips, body)
