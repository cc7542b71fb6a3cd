"""Read-only API queries: address index, milestone by height, per-block tx verdicts."""

from dagchain.errors import Reason
from dagchain.genesis import FAUCET_ADDRESS
from dagchain.params import DEVNET
from dagchain.queries import block_tx_reasons, milestone_at, utxos_of
from tests.dagchain.chainkit import Node, key, transfer

FAUCET_COINS = 10**14
_, ALICE = key(2)
_, BOB = key(3)


def test_utxos_of_equals_the_utxo_set_restricted_to_the_address() -> None:
    node = Node(DEVNET)
    faucet = utxos_of(node.chain, FAUCET_ADDRESS)
    assert [(bytes(t), i) for t, i, _ in faucet] == [(bytes(node.genesis), i) for i in range(64)]
    assert utxos_of(node.chain, BOB) == []

    warm = node.warm_peer_chain(ALICE)
    pay = transfer(
        [(node.genesis, 0)],
        [(5, BOB), (FAUCET_COINS - 10, ALICE)],
        DEVNET,
        assigned_to=[warm[-1].id],
    )
    block = node.mine(warm[-1].id, txs=[pay], ms=True)
    assert block_tx_reasons(node.chain, block.id) == (Reason.VALID,)
    bob = utxos_of(node.chain, BOB)
    assert [(t, i, u.amount) for t, i, u in bob] == [(pay.txid, 0, 5)]
    assert len(utxos_of(node.chain, FAUCET_ADDRESS)) == 63
    for address in (BOB, ALICE, FAUCET_ADDRESS):
        expected = sorted(
            (t, i, u) for (t, i), u in node.chain.utxos().items() if u.address == address
        )
        assert utxos_of(node.chain, address) == expected


def test_milestone_at_and_reasons_of_pending_blocks() -> None:
    node = Node(DEVNET)
    assert milestone_at(node.chain, 0) == node.genesis
    assert milestone_at(node.chain, 1) is None
    assert milestone_at(node.chain, -1) is None
    reg = node.register(ALICE)
    assert block_tx_reasons(node.chain, reg.id) is None
    top = node.mine(reg.id, ms=True)
    assert milestone_at(node.chain, 1) == top.id
    assert block_tx_reasons(node.chain, reg.id) == (Reason.VALID,)
    assert block_tx_reasons(node.chain, bytes(32)) is None
