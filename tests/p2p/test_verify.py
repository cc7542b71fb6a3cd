"""p2p.verify: the pure worker function of sync's signature pool (P9)."""

import dataclasses
from concurrent.futures import ProcessPoolExecutor

from dagchain.blocks import BlockHeader, compute_merkle_root, compute_tips_root, make_block
from dagchain.genesis import FAUCET_SECRET, genesis_block
from dagchain.params import DEVNET
from dagchain.pow import encode_compact
from dagchain.transactions import Transaction, TxKind, TxOut, make_transaction, sign_transaction
from dagchain.types import Address, BlockId, TxId
from p2p.verify import verify_blocks
from tests.dagchain.builders import address_of_secret, registration_tx, secret_of


def _transfer(n: int) -> Transaction:
    return sign_transaction(
        TxKind.TRANSFER,
        [(TxId(bytes([n]) * 32), 0)],
        [TxOut(1_000, Address(address_of_secret(secret_of(7))))],
        [FAUCET_SECRET],
        DEVNET,
    )


def _bad_signature(tx: Transaction) -> Transaction:
    inp = tx.inputs[0]
    sig = bytes([inp.signature[0] ^ 1]) + inp.signature[1:]
    return make_transaction(tx.kind, [dataclasses.replace(inp, signature=sig)], tx.outputs)


def _raw_block(txs: list[Transaction]) -> bytes:
    genesis = genesis_block(DEVNET)
    header = BlockHeader(
        1,
        genesis.id,
        BlockId(genesis.id),
        compute_tips_root([genesis.id]),
        compute_merkle_root(txs),
        genesis.header.timestamp_ms + 1,
        encode_compact(DEVNET.max_target),
        0,
    )
    return make_block(header, [genesis.id], txs).raw


def test_valid_transactions_pass() -> None:
    txs = [registration_tx(address_of_secret(secret_of(1))), _transfer(1), _transfer(2)]
    assert verify_blocks([_raw_block(txs)], DEVNET) == [bytes(t.txid) for t in txs]


def test_a_bad_signature_is_left_out() -> None:
    good, bad = _transfer(1), _bad_signature(_transfer(2))
    assert bad.txid != _transfer(2).txid
    assert verify_blocks([_raw_block([good, bad])], DEVNET) == [bytes(good.txid)]


def test_a_stateless_failure_is_left_out() -> None:
    """T4/T5: a transfer without outputs fails before signatures and is not passed."""
    empty = sign_transaction(TxKind.TRANSFER, [(TxId(bytes(32)), 0)], [], [FAUCET_SECRET], DEVNET)
    good = _transfer(3)
    assert verify_blocks([_raw_block([empty, good])], DEVNET) == [bytes(good.txid)]


def test_malformed_or_oversized_blocks_are_skipped() -> None:
    good = _transfer(4)
    raws = [b"\x92\xc4", b"not msgpack", b"\x00" * (DEVNET.max_block_bytes + 1)]
    raws.append(_raw_block([good]))
    assert verify_blocks(raws, DEVNET) == [bytes(good.txid)]
    assert verify_blocks([], DEVNET) == []


def test_runs_in_a_spawned_worker_process() -> None:
    """The function and its arguments pickle: what the sync driver's pool relies on."""
    import multiprocessing

    txs = [_transfer(5), _transfer(6)]
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        out = pool.submit(verify_blocks, [_raw_block(txs)], DEVNET).result(timeout=60)
    assert out == [bytes(t.txid) for t in txs]
