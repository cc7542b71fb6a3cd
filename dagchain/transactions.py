"""Transactions: types, canonical codec, txid, sighash and stateless rules (§2.2, §7)."""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final

from dagchain.crypto import SchnorrKey, verify_schnorr
from dagchain.encoding import (
    U32,
    U64,
    expect_bin,
    expect_int,
    expect_list,
    pack,
    unpack_canonical,
)
from dagchain.errors import InvalidTransaction
from dagchain.params import ConsensusParams
from dagchain.types import Address, TxId

REDEMPTION_INDEX = 0xFFFFFFFF
"""out_index of a REDEMPTION input (§7.1)."""
_SIGHASH_TAG = b"dagchain-sighash"


class TxKind(IntEnum):
    """Transaction kinds (§2.2)."""

    TRANSFER = 0
    REGISTRATION = 1
    REDEMPTION = 2


# Read-only records built per transaction on the hot path (decode, H1): slotted dataclasses whose
# fields are ``Final``, so mypy strict (run on the whole repository) rejects any assignment, and
# ``unsafe_hash`` gives the field hash that ``frozen=True`` would. Not ``frozen=True`` at run time:
# its generated ``__init__`` sets each field through ``object.__setattr__``, which made decoding a
# one-input, two-output tx about 1.5 µs slower (docs/benchmarks.md, "Core").


@dataclass(slots=True, unsafe_hash=True)
class TxIn:
    """An input: the spent outpoint (or the anchor for a REDEMPTION), key and signature."""

    txid: Final[TxId]
    out_index: Final[int]
    pubkey: Final[bytes]
    signature: Final[bytes]


@dataclass(slots=True, unsafe_hash=True)
class TxOut:
    """An output: amount in units and the 32-byte address."""

    amount: Final[int]
    address: Final[Address]


@dataclass(slots=True, unsafe_hash=True)
class Transaction:
    """A decoded transaction with its canonical bytes and txid (build with ``make_transaction``)."""

    version: Final[int]
    kind: Final[int]
    inputs: Final[tuple[TxIn, ...]]
    outputs: Final[tuple[TxOut, ...]]
    raw: Final[bytes] = field(repr=False, compare=False)
    txid: Final[TxId] = field(compare=False)
    outpoints: Final[tuple[tuple[TxId, int], ...]] = field(init=False, repr=False, compare=False)
    """``(txid, out_index)`` of each input, built once: the keys a pool and a ledger index by,
    shared by every holder of this tx (a simulator's pools hold one decoded tx, not a key each)."""

    def __post_init__(self) -> None:
        self.outpoints = tuple([(i.txid, i.out_index) for i in self.inputs])  # type: ignore[misc]

    def to_obj(self) -> list[Any]:
        """The msgpack object of §2.2."""
        return _tx_obj(self.version, self.kind, self.inputs, self.outputs)


def _tx_obj(version: int, kind: int, inputs: Sequence[TxIn], outputs: Sequence[TxOut]) -> list[Any]:
    return [
        version,
        kind,
        [[i.txid, i.out_index, i.pubkey, i.signature] for i in inputs],
        [[o.amount, o.address] for o in outputs],
    ]


def make_transaction(
    kind: int, inputs: Sequence[TxIn], outputs: Sequence[TxOut], version: int = 1
) -> Transaction:
    """Build a transaction and compute its canonical bytes and txid (§2.2)."""
    raw = pack(_tx_obj(version, kind, inputs, outputs))
    return Transaction(
        version,
        kind,
        tuple(inputs),
        tuple(outputs),
        raw,
        TxId(hashlib.blake2b(raw, digest_size=32).digest()),
    )


def tx_from_obj(obj: Any, raw: bytes | None = None) -> Transaction:
    """Type-check a decoded msgpack object as a tx (E5, T2 lengths); ``raw`` if already known.

    ``obj`` comes from ``unpack_canonical(..., tuples=True)``: the common shape (arrays as
    tuples, every field of the expected msgpack type and size) is checked inline in one pass;
    anything else (lists included) takes the slow path, which names the first failure.

    Raises:
        EncodingError: wrong types, field sizes or array shapes.
    """
    if type(obj) is tuple and len(obj) == 4:
        version, kind, ins, outs = obj
        if (
            type(version) is int
            and type(kind) is int
            and 0 <= version <= U64
            and 0 <= kind <= U64
            and type(ins) is tuple
            and type(outs) is tuple
        ):
            inputs = []
            for i in ins:
                if not (
                    type(i) is tuple
                    and len(i) == 4
                    and type(i[0]) is bytes
                    and type(i[1]) is int
                    and type(i[2]) is bytes
                    and type(i[3]) is bytes
                    and len(i[0]) == 32
                    and 0 <= i[1] <= U32
                    and len(i[2]) == 32
                    and len(i[3]) == 64
                ):
                    return _tx_from_obj_checked(obj, raw)
                inputs.append(TxIn(*i))
            outputs = []
            for o in outs:
                if not (
                    type(o) is tuple
                    and len(o) == 2
                    and type(o[0]) is int
                    and type(o[1]) is bytes
                    and 0 <= o[0] <= U64
                    and len(o[1]) == 32
                ):
                    return _tx_from_obj_checked(obj, raw)
                outputs.append(TxOut(*o))
            if raw is None:
                raw = pack(obj)
            h = _BLAKE2B_256.copy()
            h.update(raw)
            return Transaction(version, kind, tuple(inputs), tuple(outputs), raw, TxId(h.digest()))
    return _tx_from_obj_checked(obj, raw)


_BLAKE2B_256 = hashlib.blake2b(digest_size=32)
"""An empty H state (E2): copying it is cheaper than a fresh ``blake2b(digest_size=32)``."""


def _tx_from_obj_checked(obj: Any, raw: bytes | None) -> Transaction:
    """The slow path of ``tx_from_obj``: field by field, naming the first failure (E5)."""
    fields = expect_list(obj, "tx", 4)
    version = expect_int(fields[0], "tx version", U64)
    kind = expect_int(fields[1], "tx kind", U64)
    inputs = tuple([_input_from_obj(i) for i in expect_list(fields[2], "tx inputs")])
    outputs = tuple([_output_from_obj(o) for o in expect_list(fields[3], "tx outputs")])
    if raw is None:
        raw = pack(obj)
    return Transaction(
        version, kind, inputs, outputs, raw, TxId(hashlib.blake2b(raw, digest_size=32).digest())
    )


def _input_from_obj(obj: Any) -> TxIn:
    txid, index, pubkey, sig = expect_list(obj, "tx input", 4)
    return TxIn(
        TxId(expect_bin(txid, "input txid", 32)),
        expect_int(index, "input out_index", U32),
        expect_bin(pubkey, "input pubkey", 32),
        expect_bin(sig, "input signature", 64),
    )


def _output_from_obj(obj: Any) -> TxOut:
    amount, address = expect_list(obj, "tx output", 2)
    return TxOut(
        expect_int(amount, "output amount", U64), Address(expect_bin(address, "address", 32))
    )


def decode_transaction(data: bytes, params: ConsensusParams) -> Transaction:
    """Decode a canonical tx (E3-E6, T1 size); shape rules are in ``check_tx_stateless``.

    Raises:
        EncodingError: not a canonical tx encoding of at most ``max_tx_bytes``.
    """
    return tx_from_obj(unpack_canonical(data, params.max_tx_bytes, tuples=True), bytes(data))


def sighash_prefix(tx: Transaction, params: ConsensusParams) -> "hashlib.blake2b":
    """Hash state over everything but the input index (E7); ``copy()`` it per input."""
    tagged = _SIGHASH_TAGGED.get(params.network_id)
    if tagged is None:
        net = params.network_id.encode("ascii")
        tagged = hashlib.blake2b(_SIGHASH_TAG + bytes([len(net)]) + net, digest_size=32)
        _SIGHASH_TAGGED[params.network_id] = tagged
    h = tagged.copy()
    h.update(stripped_encoding(tx))
    return h


_SIGHASH_TAGGED: dict[str, "hashlib.blake2b"] = {}
"""Per network id: the hash state after the E7 tag and network id, copied per transaction."""


def stripped_encoding(tx: Transaction) -> bytes:
    """packb(tx') of E7: the tx with every signature replaced by an empty bin (``c4 00``).

    Fast path: ``tx.raw`` is canonical (E3), so each signature is the bin8 ``c4 40`` + 64 bytes
    at a position fixed by the canonical lengths of the fields before it; splice ``c4 00`` in
    there. Anything unusual (a signature not 64 bytes, a raw that does not line up) takes the
    plain path of re-encoding the stripped object.
    """
    raw = tx.raw
    inputs = tx.inputs
    version, kind = tx.version, tx.kind
    count = len(inputs)
    pos = (  # 94, version, kind, the inputs' array header
        1
        + (2 if version < 0x80 and kind < 0x80 else _uint_size(version) + _uint_size(kind))
        + (1 if count < 16 else _array_header_size(count))
    )
    parts = []
    start = 0
    for inp in inputs:
        index = inp.out_index
        sig_at = pos + 35 + (1 if index < 0x80 else _uint_size(index)) + 34
        # 94, c4 20 txid, index, c4 20 key: then c4 40 and the signature
        if (
            len(inp.signature) != 64
            or len(inp.txid) != 32
            or len(inp.pubkey) != 32
            or raw[sig_at : sig_at + 2] != b"\xc4\x40"
        ):
            return _stripped_by_packing(tx)
        parts.append(raw[start:sig_at])
        parts.append(b"\xc4\x00")
        start = pos = sig_at + 66
    parts.append(raw[start:])
    return b"".join(parts)


def _stripped_by_packing(tx: Transaction) -> bytes:
    stripped = [[i.txid, i.out_index, i.pubkey, b""] for i in tx.inputs]
    return pack([tx.version, tx.kind, stripped, [[o.amount, o.address] for o in tx.outputs]])


def _uint_size(value: int) -> int:
    """Bytes of the canonical msgpack encoding of a non-negative int."""
    if value < 0x80:
        return 1
    if value <= 0xFF:
        return 2
    if value <= 0xFFFF:
        return 3
    return 5 if value <= 0xFFFFFFFF else 9


def _array_header_size(length: int) -> int:
    """Bytes of a canonical msgpack array header."""
    return 1 if length < 16 else 3 if length <= 0xFFFF else 5


def compute_sighash(tx: Transaction, index: int, params: ConsensusParams) -> bytes:
    """E7 sighash(tx, i)."""
    h = sighash_prefix(tx, params)
    h.update(index.to_bytes(4, "little"))
    return h.digest()


def check_tx_stateless(tx: Transaction, params: ConsensusParams) -> None:
    """T1-T5: version, kind, size, shape, amounts and duplicate inputs (no signatures).

    The rules are checked in this order; the field lengths of T2 (which a decoded tx always has,
    E5, but a locally built one may not) come last.

    Raises:
        InvalidTransaction: naming the failed rule.
    """
    if len(tx.raw) > params.max_tx_bytes:
        raise InvalidTransaction("T1", "transaction too large", tx.txid)
    if tx.version != params.tx_version:
        raise InvalidTransaction("T1", f"unknown tx version {tx.version}", tx.txid)
    kind = tx.kind
    if kind == _TRANSFER:
        lengths_ok = _check_transfer(tx, params)
    elif kind == _REGISTRATION:
        if tx.inputs or len(tx.outputs) != 1:
            raise InvalidTransaction("T2", "a registration has no inputs and one output", tx.txid)
        if tx.outputs[0].amount != 0:
            raise InvalidTransaction("T5", "registration output amount must be 0", tx.txid)
        lengths_ok = _lengths_ok(tx)
    elif kind == _REDEMPTION:
        if len(tx.inputs) != 1 or tx.inputs[0].out_index != REDEMPTION_INDEX:
            raise InvalidTransaction("T2", "a redemption has one anchor input", tx.txid)
        if not 1 <= len(tx.outputs) <= 2:
            raise InvalidTransaction("T2", "a redemption has one or two outputs", tx.txid)
        if tx.outputs[0].amount != 0:
            raise InvalidTransaction("T5", "redemption output[0] amount must be 0", tx.txid)
        if len(tx.outputs) == 2 and not 1 <= tx.outputs[1].amount <= params.max_money:
            raise InvalidTransaction("T5", "redemption claim out of range", tx.txid)
        lengths_ok = _lengths_ok(tx)
    else:
        raise InvalidTransaction("T1", f"unknown tx kind {tx.kind}", tx.txid)
    if not lengths_ok:
        raise InvalidTransaction("T2", "a txid, key, signature or address length", tx.txid)


_TRANSFER = int(TxKind.TRANSFER)
_REGISTRATION = int(TxKind.REGISTRATION)
_REDEMPTION = int(TxKind.REDEMPTION)


def _lengths_ok(tx: Transaction) -> bool:
    """T2 field lengths: 32-byte txids, keys and addresses, 64-byte signatures."""
    return all(
        len(i.txid) == 32 and len(i.pubkey) == 32 and len(i.signature) == 64 for i in tx.inputs
    ) and all(len(o.address) == 32 for o in tx.outputs)


def _check_transfer(tx: Transaction, params: ConsensusParams) -> bool:
    """T2-T4 of a TRANSFER (raising), in one pass that also returns ``_lengths_ok(tx)``."""
    inputs, outputs = tx.inputs, tx.outputs
    if not 1 <= len(inputs) <= params.max_tx_inputs:
        raise InvalidTransaction("T2", "a transfer has 1..max_tx_inputs inputs", tx.txid)
    if not 1 <= len(outputs) <= params.max_tx_outputs:
        raise InvalidTransaction("T2", "a transfer has 1..max_tx_outputs outputs", tx.txid)
    max_money = params.max_money
    lengths_ok = True
    total = 0
    for out in outputs:
        amount = out.amount
        if not 1 <= amount <= max_money:
            raise InvalidTransaction("T3", "output amount out of range", tx.txid)
        total += amount
        if len(out.address) != 32:
            lengths_ok = False
    if total > max_money:
        raise InvalidTransaction("T3", "sum of outputs exceeds max_money", tx.txid)
    for inp in inputs:
        if inp.out_index == REDEMPTION_INDEX:
            raise InvalidTransaction("T3", "out_index 0xFFFFFFFF is reserved", tx.txid)
        if len(inp.txid) != 32 or len(inp.pubkey) != 32 or len(inp.signature) != 64:
            lengths_ok = False
    if len(inputs) > 1 and len({(i.txid, i.out_index) for i in inputs}) != len(inputs):
        raise InvalidTransaction("T4", "two inputs spend the same outpoint", tx.txid)
    return lengths_ok


def verify_tx_signatures(tx: Transaction, params: ConsensusParams) -> bool:
    """T6: every input's BIP340 signature over sighash(tx, i) verifies."""
    inputs = tx.inputs
    if not inputs:
        return True
    prefix = sighash_prefix(tx, params)
    if len(inputs) == 1:  # the common case: no copy of the prefix state
        inp = inputs[0]
        prefix.update(b"\x00\x00\x00\x00")
        return verify_schnorr(inp.pubkey, inp.signature, prefix.digest())
    for index, inp in enumerate(inputs):
        h = prefix.copy()
        h.update(index.to_bytes(4, "little"))
        if not verify_schnorr(inp.pubkey, inp.signature, h.digest()):
            return False
    return True


def check_tx_signatures(tx: Transaction, params: ConsensusParams) -> None:
    """T6 as a check.

    Raises:
        InvalidTransaction: ``T6`` when a signature or key is invalid.
    """
    if not verify_tx_signatures(tx, params):
        raise InvalidTransaction("T6", "invalid signature", tx.txid)


def sign_transaction(
    kind: int,
    inputs: Sequence[tuple[TxId, int]],
    outputs: Sequence[TxOut],
    secrets: Sequence[bytes],
    params: ConsensusParams,
    aux_rand: bytes = bytes(32),
) -> Transaction:
    """Build and sign a tx: ``secrets[i]`` signs input i (wallets pass fresh ``aux_rand``)."""
    keys: dict[bytes, SchnorrKey] = {}
    for s in secrets:
        if s not in keys:
            keys[s] = SchnorrKey(s)
    unsigned = make_transaction(
        kind,
        [TxIn(t, i, keys[s].xonly, bytes(64)) for (t, i), s in zip(inputs, secrets, strict=True)],
        outputs,
    )
    prefix = sighash_prefix(unsigned, params)
    signed = []
    for index, (inp, secret) in enumerate(zip(unsigned.inputs, secrets, strict=True)):
        h = prefix.copy()
        h.update(index.to_bytes(4, "little"))
        sig = keys[secret].sign(h.digest(), aux_rand)
        signed.append(TxIn(inp.txid, inp.out_index, inp.pubkey, sig))
    return make_transaction(kind, signed, outputs)


__all__ = [
    "REDEMPTION_INDEX",
    "Transaction",
    "TxIn",
    "TxKind",
    "TxOut",
    "check_tx_signatures",
    "check_tx_stateless",
    "compute_sighash",
    "decode_transaction",
    "make_transaction",
    "sighash_prefix",
    "sign_transaction",
    "tx_from_obj",
    "verify_tx_signatures",
]
