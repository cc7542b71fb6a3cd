"""HD wallets: BIP39 and BIP32 vectors, our derivation vector, keystore and CLI (issue 27 item 2).

The functional test with a real devnet node (receive on several addresses, change to a fresh
internal address, restore through ``--node``) is tests/functional/test_wallet.py.
"""

import hashlib
import io
import json
import stat
from pathlib import Path

import pytest
from coincurve import PrivateKey
from mnemonic import Mnemonic

from apiclient.models import AddressResponse, UtxoItem
from dagchain.crypto import address_from_pubkey, encode_address, sign_schnorr, verify_schnorr
from dagchain.params import DEVNET
from dagchain.transactions import check_tx_signatures, decode_transaction
from dagchain.types import Address, TxId
from wallet import cli as wallet
from wallet import hd
from wallet.coins import Keys, Utxo, WalletError, address_of

FAST = (2**4, 8, 1)  # tests only: the CLI always uses n = 2^15
ABANDON = " ".join(["abandon"] * 11 + ["about"])

# BIP39's official vectors (trezor/python-mnemonic vectors.json), passphrase "TREZOR"
BIP39_VECTORS = [
    (
        "00000000000000000000000000000000",
        ABANDON,
        "c55257c360c07c72029aebc1b53c05ed0362ada38ead3e3e9efa3708e53495531f09a6987599d18264c1e1c9"
        "2f2cf141630c7a3c4ab7c81b2f001698e7463b04",
    ),
    (
        "7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f",
        "legal winner thank year wave sausage worth useful legal winner thank yellow",
        "2e8905819b8723fe2c1d161860e5ee1830318dbf49a83bd451cfb8440c28bd6fa457fe1296106559a3c80937"
        "a1c1069be3a3a5bd381ee6260e8d9739fce1f607",
    ),
    (
        "80808080808080808080808080808080",
        "letter advice cage absurd amount doctor acoustic avoid letter advice cage above",
        "d71de856f81a8acc65e6fc851a38d4d7ec216fd0796d0a6827a3ad6ed5511a30fa280f12eb2e47ed2ac03b5c"
        "462a0358d18d69fe4f985ec81778c1b370b652a8",
    ),
    (
        "ffffffffffffffffffffffffffffffff",
        "zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo zoo wrong",
        "ac27495480225222079d7be181583751e86f571027b0497b5b5d11218e0a8a13332572917f0f8e5a589620c6"
        "f15b11c61dee327651a14c34e18231052e48c069",
    ),
]
BIP39_MASTER = (  # the first vector's BIP32 root key
    "xprv9s21ZrQH143K3h3fDYiay8mocZ3afhfULfb5GX8kCBdno77K4HiA15Tg23wpbeF1pLfs1c5SPmYHrEpTuuRhxMw"
    "vKDwqdKiGJS9XFKzUsAF"
)
# BIP32's official test vector 1: seed 000102...0f, keys along m/0H/1/2H
BIP32_VECTOR_1 = [
    (
        [],
        "xprv9s21ZrQH143K3QTDL4LXw2F7HEK3wJUD2nW2nRk4stbPy6cq3jPPqjiChkVvvNKmPGJxWUtg6LnF5kejMRNNU3"
        "TGtRBeJgk33yuGBxrMPHi",
    ),
    (
        [0 + hd.HARDENED],
        "xprv9uHRZZhk6KAJC1avXpDAp4MDc3sQKNxDiPvvkX8Br5ngLNv1TxvUxt4cV1rGL5hj6KCesnDYUhd7oWgT11eZG7"
        "XnxHrnYeSvkzY7d2bhkJ7",
    ),
    (
        [0 + hd.HARDENED, 1],
        "xprv9wTYmMFdV23N2TdNG573QoEsfRrWKQgWeibmLntzniatZvR9BmLnvSxqu53Kw1UmYPxLgboyZQaXwTCg8MSY3H"
        "2EU4pWcQDnRnrVA1xe8fs",
    ),
    (
        [0 + hd.HARDENED, 1, 2 + hd.HARDENED],
        "xprv9z4pot5VBttmtdRTWfWQmoH1taj2axGVzFqSb8C9xaxKymcFzXBDptWmT7FwuEzG3ryjH4ktypQSAewRiNMjAN"
        "TtpgP4mLTj34bhnZX7UiM",
    ),
]
# Ours (docs/wallet.md, "HD wallets"): ABANDON on devnet, m/44'/1'/0'/0/0 and m/44'/1'/0'/1/0
FIRST_RECEIVE = "ddag1nt8y0jl5f64wpdrz78alngchcl6hf969jdnf8em0waq4npat58tqnwav7f"
FIRST_CHANGE = "ddag19hkru803j62ypczpdn4slkg4wy6tdfjwr6ph4ut2ccm727qq794qtamn7k"
MAINNET_FIRST_RECEIVE = "dag1f0xfs8gqmmtgrpguwvwyetf7h4u6mq84ek7kdjx5ghkdfv7zxv5saz2fwc"

_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def xprv_parts(text: str) -> tuple[bytes, bytes]:
    """(chain code, private key) of a serialized BIP32 xprv (base58check checked)."""
    n = 0
    for c in text:
        n = n * 58 + _B58.index(c)
    raw = n.to_bytes(82, "big")
    assert hashlib.sha256(hashlib.sha256(raw[:78]).digest()).digest()[:4] == raw[78:]
    return raw[13:45], raw[46:78]


# ------------------------------------------------------------------------------ vectors


@pytest.mark.parametrize(("entropy", "words", "seed"), BIP39_VECTORS)
def test_bip39_vectors_with_passphrase_trezor(entropy: str, words: str, seed: str) -> None:
    assert Mnemonic("english").to_mnemonic(bytes.fromhex(entropy)) == words
    assert hd.normalize_mnemonic(words.upper().replace(" ", "  ")) == words
    assert hd.seed_of(words, "TREZOR").hex() == seed


def test_bip39_vector_root_key_is_our_bip32_master_key() -> None:
    master = hd.master_key(hd.seed_of(ABANDON, "TREZOR"))
    assert (master.chain_code, master.key) == xprv_parts(BIP39_MASTER)


@pytest.mark.parametrize(("path", "xprv"), BIP32_VECTOR_1)
def test_bip32_official_vector_1(path: list[int], xprv: str) -> None:
    key = hd.master_key(bytes(range(16)))
    for index in path:
        key = hd.child_private(key, index)
    assert (key.chain_code, key.key) == xprv_parts(xprv)


def test_bip44_path_gives_the_well_known_first_bitcoin_key() -> None:
    """m/44'/0'/0'/0/0 of ABANDON (no passphrase): the key every BIP44 wallet derives."""
    key = hd.master_key(hd.seed_of(ABANDON))
    for index in (44 + hd.HARDENED, hd.HARDENED, hd.HARDENED, 0, 0):
        key = hd.child_private(key, index)
    assert key.key.hex() == "e284129cc0922579a535bbf4d1a3b25773090d28c909bc0fed73b5e0222cc372"


def test_our_derivation_vector_first_receive_and_change_address() -> None:
    """The vector written in docs/wallet.md: a restore elsewhere must give these addresses."""
    account = hd.Account.from_seed(hd.seed_of(ABANDON), "devnet")
    assert hd.account_path("devnet") == "m/44'/1'/0'"
    assert encode_address(DEVNET.hrp, account.address(hd.RECEIVE, 0)) == FIRST_RECEIVE
    assert encode_address(DEVNET.hrp, account.address(hd.CHANGE, 0)) == FIRST_CHANGE
    mainnet = hd.Account.from_seed(hd.seed_of(ABANDON), "mainnet")
    assert hd.account_path("mainnet") == "m/44'/27708'/0'"
    assert encode_address("dag", mainnet.address(hd.RECEIVE, 0)) == MAINNET_FIRST_RECEIVE


def test_derived_keys_sign_as_the_node_verifies_whatever_the_parity_of_y() -> None:
    """The public derivation (no seed) and the private one agree on every address, and each
    leaf key signs BIP340 that the node's verify accepts for the x-only key of its address."""
    private = hd.Account.from_seed(hd.seed_of(ABANDON), "devnet")
    public = hd.Account(private.key, private.chain_code)
    parities = set()
    for chain in (hd.RECEIVE, hd.CHANGE):
        for i in range(12):
            secret = private.secret(chain, i)
            assert public.address(chain, i) == address_of(secret)
            full = PrivateKey(secret).public_key.format(compressed=True)
            parities.add(full[0])
            xonly = full[1:]
            assert address_from_pubkey(xonly) == public.address(chain, i)
            signature = sign_schnorr(secret, bytes(32), bytes(32))
            assert verify_schnorr(xonly, signature, bytes(32))
    assert parities == {2, 3}, "both parities of y were exercised"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            ABANDON.replace("about", "abuot"),
            "word 12 'abuot' is not in the BIP39 English word list",
        ),
        (ABANDON.replace("about", "above"), "checksum does not match"),
        ("abandon " * 11, "12 or 24 words; got 11"),
    ],
)
def test_a_bad_mnemonic_is_named(text: str, message: str) -> None:
    with pytest.raises(WalletError, match=message):
        hd.normalize_mnemonic(text)


def test_new_mnemonics_have_12_or_24_valid_words() -> None:
    for words in (12, 24):
        phrase = hd.new_mnemonic(words)
        assert len(phrase.split()) == words
        assert hd.normalize_mnemonic(phrase) == phrase


# ------------------------------------------------------------------------------ keystore


def test_hd_keystore_seals_the_seed_and_keeps_the_xpub_in_clear() -> None:
    seed = hd.seed_of(ABANDON)
    data = wallet.encode_hd_keystore(seed, "pw", "devnet", scrypt=FAST)
    assert wallet.decode_keystore(data, "pw") == seed
    assert seed.hex() not in data.decode()
    header = wallet.read_keystore_header(data)
    assert header.is_hd
    assert encode_address(DEVNET.hrp, header.address) == FIRST_RECEIVE
    assert (header.next_receive, header.next_change) == (1, 0)
    with pytest.raises(WalletError, match="wrong password"):
        wallet.decode_keystore(data, "not it")


def test_an_edited_xpub_makes_the_hd_file_fail_to_open() -> None:
    doc = json.loads(wallet.encode_hd_keystore(hd.seed_of(ABANDON), "pw", "devnet", scrypt=FAST))
    other = hd.Account.from_seed(hd.seed_of(hd.new_mnemonic()), "devnet")
    doc["xpub"]["chain_code"] = other.chain_code.hex()
    with pytest.raises(WalletError, match="damaged"):
        wallet.decode_keystore(json.dumps(doc).encode(), "pw")
    doc["xpub"] = {"key": other.key.hex(), "chain_code": other.chain_code.hex()}
    doc["address"] = other.address(hd.RECEIVE, 0).hex()
    with pytest.raises(WalletError, match="wrong password"):
        wallet.decode_keystore(json.dumps(doc).encode(), "pw")


# ------------------------------------------------------------------------------ CLI


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv(wallet.PASSWORD_ENV, "secret")
    monkeypatch.setattr(wallet, "write_hd_wallet", _fast_write)  # a cheap scrypt
    return monkeypatch


_real_write = wallet.write_hd_wallet


def _fast_write(*args: object, **kwargs: object) -> wallet.Keystore:
    kwargs["scrypt"] = FAST
    return _real_write(*args, **kwargs)  # type: ignore[arg-type]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = wallet.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_new_prints_address_and_mnemonic_once_and_restore_rebuilds_it(
    env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "w.json"
    code, out, err = run(["--wallet", str(first), "new", "--words", "24"], capsys)
    assert code == 0, err
    address, mnemonic = out.strip().splitlines()
    assert len(mnemonic.split()) == 24
    assert "shown only this once" in err
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert mnemonic not in first.read_text()
    assert run(["--wallet", str(first), "address"], capsys)[1].strip() == address

    log_receive = [run(["--wallet", str(first), "receive"], capsys)[1].strip() for _ in range(3)]
    assert len({address, *log_receive}) == 4, "each receive is a fresh address"
    assert run(["--wallet", str(first), "address"], capsys)[1].strip() == address
    info = run(["--wallet", str(first), "info"], capsys)[1]
    assert "wallet: hd" in info
    assert "next_receive: 4" in info

    copy = tmp_path / "restored.json"
    env.setattr("sys.stdin", io.StringIO(mnemonic.upper() + "\n"))
    code, out, err = run(["--wallet", str(copy), "restore"], capsys)
    assert code == 0, err
    assert out.strip() == address
    restored = wallet.read_keystore_header(copy.read_bytes())
    original = wallet.read_keystore_header(first.read_bytes())
    assert restored.account is not None
    assert original.account is not None
    assert restored.account.key == original.account.key
    assert wallet.decode_keystore(copy.read_bytes(), "secret") == wallet.decode_keystore(
        first.read_bytes(), "secret"
    )


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        (ABANDON.replace("about", "abuot"), "word 12 'abuot' is not in the BIP39"),
        (ABANDON.replace("about", "above"), "checksum does not match"),
        ("", "12 or 24 words; got 0"),
    ],
)
def test_restore_of_a_bad_mnemonic_is_one_line_and_writes_nothing(
    stdin: str,
    message: str,
    env: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env.setattr("sys.stdin", io.StringIO(stdin + "\n"))
    code, out, err = run(["--wallet", str(tmp_path / "w.json"), "restore"], capsys)
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert message in err
    assert list(tmp_path.iterdir()) == []


def test_restore_refuses_to_overwrite_a_wallet(
    env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "w.json"
    path.write_text("keep me")
    env.setattr("sys.stdin", io.StringIO(ABANDON + "\n"))
    code, _, err = run(["--wallet", str(path), "restore"], capsys)
    assert (code, err.count("\n")) == (2, 1)
    assert "already exists" in err
    assert path.read_text() == "keep me"


def test_a_corrupt_keystore_is_one_line_and_is_left_alone(
    env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "w.json"
    path.write_text('{"dagchain_wallet": 2, "network": "devnet"')
    for command in (["receive"], ["address"], ["info"], ["balance", "--node", "http://x:1"]):
        code, _, err = run(["--wallet", str(path), *command], capsys)
        assert (code, err.count("\n")) == (2, 1), command
        assert "not a dagchain wallet file" in err
    assert path.read_text() == '{"dagchain_wallet": 2, "network": "devnet"'


def test_one_key_wallets_are_labelled_and_have_no_receive(
    env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.json"
    address = wallet.write_new_wallet(path, "secret", "devnet", FAST)
    before = path.read_bytes()
    assert run(["--wallet", str(path), "info"], capsys)[1].splitlines()[0] == (
        "wallet: one-key wallet"
    )
    code, out, err = run(["--wallet", str(path), "receive"], capsys)
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert "one-key wallet" in err
    assert run(["--wallet", str(path), "address"], capsys)[1].strip() == encode_address(
        DEVNET.hrp, address
    )
    assert path.read_bytes() == before


# ------------------------------------------------------------------------------ spending


class _Node:
    """A node answering ``GET /v1/addresses`` from a fixed table and taking any tx."""

    def __init__(self, coins: dict[Address, list[Utxo]]) -> None:
        self.coins = coins
        self.posted: list[bytes] = []
        self.url = "http://fake"
        self.asked: list[str] = []

    async def address(self, address: str) -> AddressResponse:
        from dagchain.crypto import decode_address

        self.asked.append(address)
        utxos = self.coins.get(decode_address(DEVNET.hrp, address), [])
        rows = [
            UtxoItem(txid=u.txid.hex(), index=u.index, amount=str(u.amount), confirmations=1)
            for u in utxos
        ]
        total = str(sum(u.amount for u in utxos))
        return AddressResponse(address=address, balance=total, pending_balance=total, utxos=rows)

    async def submit_tx(self, raw: bytes) -> None:
        self.posted.append(raw)


def coin(n: int, amount: int) -> Utxo:
    return Utxo(TxId(n.to_bytes(32, "big")), 0, amount)


async def test_send_spends_across_addresses_each_input_signed_by_its_own_key() -> None:
    keystore = wallet.read_keystore_header(
        wallet.encode_hd_keystore(
            hd.seed_of(ABANDON), "pw", "devnet", next_receive=3, next_change=1, scrypt=FAST
        )
    )
    account = hd.Account.from_seed(hd.seed_of(ABANDON), "devnet")
    r1, r2, c0 = (
        account.address(hd.RECEIVE, 1),
        account.address(hd.RECEIVE, 2),
        account.address(hd.CHANGE, 0),
    )
    node = _Node({r1: [coin(1, 600)], r2: [coin(2, 500)], c0: [coin(3, 400)]})
    keys = wallet._hd_keys(keystore, hd.seed_of(ABANDON))
    assert keys.change == account.address(hd.CHANGE, 1), "change goes to the next unused address"
    to = address_of((9).to_bytes(32, "big"))
    tx = await wallet.send_payment(node, DEVNET, keys, to, 1200, 10)  # type: ignore[arg-type]
    assert node.posted == [tx.raw]
    decoded = decode_transaction(tx.raw, DEVNET)
    check_tx_signatures(decoded, DEVNET)
    owners = {coin(n, 0).txid: a for n, a in ((1, r1), (2, r2), (3, c0))}
    assert [address_from_pubkey(i.pubkey) for i in decoded.inputs] == [
        owners[i.txid] for i in decoded.inputs
    ]
    assert len(decoded.inputs) == 3
    assert [(o.address, o.amount) for o in decoded.outputs] == [
        (to, 1200),
        (keys.change, 1500 - 1210),
    ]


async def test_a_one_key_spender_keeps_its_change_on_its_address() -> None:
    secret = (7).to_bytes(32, "big")
    node = _Node({address_of(secret): [coin(1, 1000)]})
    to = address_of((9).to_bytes(32, "big"))
    tx = await wallet.send_payment(node, DEVNET, Keys.single(secret), to, 300, 1)  # type: ignore[arg-type]
    assert [o.address for o in tx.outputs] == [to, address_of(secret)]


async def test_restore_scan_finds_coins_past_spent_addresses_within_the_gap_limit() -> None:
    account = hd.Account.from_seed(hd.seed_of(ABANDON), "devnet")
    node = _Node(
        {
            account.address(hd.RECEIVE, 0): [coin(1, 5)],
            account.address(hd.RECEIVE, 7): [coin(2, 6)],  # 1..6 spent: look unused
        }
    )
    found = await wallet.scan_chain(node, DEVNET, account, hd.RECEIVE, 7)  # type: ignore[arg-type]
    assert (found[0], sorted(u.amount for u in found[1])) == (8, [5, 6])
    assert len(node.asked) == 8 + 7, "scanned to 7 unused addresses past the last used one"
    short = await wallet.scan_chain(node, DEVNET, account, hd.RECEIVE, 6)  # type: ignore[arg-type]
    assert (short[0], [u.amount for u in short[1]]) == (1, [5]), "a gap of 6 misses index 7"
