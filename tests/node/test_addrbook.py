"""The address book survives restarts and forgets failing addresses (PROTOCOL.md §11.5 P12)."""

from pathlib import Path

from node.net.addrbook import AddrBook


def test_addresses_survive_a_restart(tmp_path: Path) -> None:
    book = AddrBook(tmp_path / "peers.json")
    book.add("10.0.0.1", 27707, 100)
    book.mark_good("10.0.0.2", 27707, 200)
    book.save()
    again = AddrBook(tmp_path / "peers.json")
    again.load()
    assert [(e.host, e.port) for e in again.good()] == [("10.0.0.2", 27707), ("10.0.0.1", 27707)]


def test_five_failed_dials_forget_an_address(tmp_path: Path) -> None:
    book = AddrBook(tmp_path / "peers.json")
    book.add("10.0.0.1", 27707, 100)
    for _ in range(4):
        book.mark_failed("10.0.0.1", 27707)
    assert "10.0.0.1:27707" in book
    book.mark_failed("10.0.0.1", 27707)
    assert "10.0.0.1:27707" not in book


def test_a_damaged_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "peers.json").write_text("{not json")
    book = AddrBook(tmp_path / "peers.json")
    book.load()
    assert len(book) == 0
