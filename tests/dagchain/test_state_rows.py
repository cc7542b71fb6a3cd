"""The A2+A3 rows of outputs with any out_index (PROTOCOL.md §12 ``u``, ``o``, ``k`` rows).

``ChainState.write_apply`` builds the outpoint keys inline (a table for indexes below 256, the
u32 encoding above, for speed); they must equal ``storage.schema``'s keys for both, and a
reopened chain must read the same UTXO set back.
"""

import gc

from dagchain.chain import Chain
from dagchain.params import DEVNET
from dagchain.storage import schema as S
from dagchain.storage.memory import MemoryStore
from tests.dagchain.chainkit import Node, key, transfer

WIDE = DEVNET.replace(max_tx_outputs=300, max_tx_bytes=64_000)
FAUCET_COINS = 10**14
ALICE_SECRET, ALICE = key(2)
BOB_SECRET, BOB = key(3)


def test_s12_outpoint_keys_below_and_above_index_256_match_the_schema() -> None:
    """u and o rows of outputs 0..299, then k rows and deleted u/o rows once two are spent."""
    store = MemoryStore()
    node = Node(WIDE, store)
    last = node.warm_peer_chain(ALICE)[-1]
    fan = transfer(
        [(node.genesis, 0)], [(FAUCET_COINS // 300, BOB)] * 300, WIDE, assigned_to=[last.id]
    )
    last = node.mine(last.id, txs=[fan], ms=True)
    for index in (0, 255, 256, 299):
        assert store.get(S.outpoint_key(S.P_UTXO, fan.txid, index)) is not None
        assert store.get(S.address_key(BOB, fan.txid, index)) is not None

    spend = transfer(
        [(fan.txid, 255), (fan.txid, 256)],
        [(FAUCET_COINS // 300, ALICE)],
        WIDE,
        BOB_SECRET,
        assigned_to=[last.id],
    )
    node.mine(last.id, txs=[spend], ms=True)
    for index in (255, 256):
        assert store.get(S.outpoint_key(S.P_UTXO, fan.txid, index)) is None
        assert store.get(S.address_key(BOB, fan.txid, index)) is None
        assert store.get(S.outpoint_key(S.P_SPENT, fan.txid, index)) is not None
    assert store.get(S.outpoint_key(S.P_UTXO, fan.txid, 257)) is not None

    reopened = Chain(WIDE, store)
    assert reopened.utxos() == node.chain.utxos()
    assert reopened.get_utxo(fan.txid, 299) == node.chain.get_utxo(fan.txid, 299)


def test_utxo_set_entries_leave_gc_scans() -> None:
    """The UTXO set holds plain (amount, address, height) tuples, which the garbage collector
    untracks after one pass: a node's largest structure is not rescanned by every full
    collection (``Chain.get_utxo`` still returns ``Utxo`` records)."""
    node = Node(WIDE)
    last = node.warm_peer_chain(ALICE)[-1]
    fan = transfer([(node.genesis, 0)], [(FAUCET_COINS // 3, BOB)] * 3, WIDE, assigned_to=[last.id])
    node.mine(last.id, txs=[fan], ms=True)
    gc.collect()
    entries = list(node.chain.state.utxos.values())
    assert len(entries) == WIDE.faucet_outputs - 1 + 3
    assert not any(gc.is_tracked(e) for e in entries)
    utxo = node.chain.get_utxo(fan.txid, 2)
    assert utxo is not None
    assert (utxo.amount, utxo.address) == (FAUCET_COINS // 3, BOB)
