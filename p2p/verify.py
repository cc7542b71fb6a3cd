"""Signature checks of downloaded blocks in worker processes (P9 sync).

Pure: no I/O, no event loop. ``verify_blocks`` is the function a
``concurrent.futures.ProcessPoolExecutor`` worker runs on one level set: it decodes the blocks
and runs T1-T5 and T6 on every transaction, returning the txids that passed all of them. The
caller adds those txids to the chain's signature cache (§7.5) before the blocks reach
``Chain.on_block``, which then skips T1-T6 for them. Anything that fails here (a malformed
block, a bad tx, a bad signature) is simply left out: ``on_block`` checks it again and gives the
normal verdict, so the verdict never depends on the workers.
"""

from collections.abc import Sequence

from dagchain.blocks import decode_block
from dagchain.errors import EncodingError, InvalidTransaction
from dagchain.params import ConsensusParams
from dagchain.transactions import check_tx_stateless, verify_tx_signatures


def verify_blocks(raws: Sequence[bytes], params: ConsensusParams) -> list[bytes]:
    """Txids of the transactions in ``raws`` that pass T1-T6 (block bytes that fail H1 skipped)."""
    passed: list[bytes] = []
    for raw in raws:
        if len(raw) > params.max_block_bytes:
            continue
        try:
            block = decode_block(raw, params)
        except EncodingError:
            continue
        for tx in block.txs:
            try:
                check_tx_stateless(tx, params)
            except InvalidTransaction:
                continue
            if verify_tx_signatures(tx, params):
                passed.append(bytes(tx.txid))
    return passed


__all__ = ["verify_blocks"]
