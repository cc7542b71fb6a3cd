"""dagchain.storage.walcheck: CRC32C and the scan of hand-built LevelDB logs (docs/protocol.md
decision 38): clean, torn at the end, damaged in the middle, records spanning blocks."""

import os
import time
from pathlib import Path

import plyvel
import pytest

from dagchain.storage.walcheck import (
    BLOCK_SIZE,
    FIRST,
    FULL,
    HEADER_SIZE,
    LAST,
    MIDDLE,
    crc32c,
    mask_crc,
    scan_log,
    scan_log_file,
)


def physical(kind: int, payload: bytes) -> bytes:
    crc = mask_crc(crc32c(bytes([kind]) + payload))
    return crc.to_bytes(4, "little") + len(payload).to_bytes(2, "little") + bytes([kind]) + payload


class LogWriter:
    """LevelDB's log writer (db/log_writer.cc), in Python: records the starts of logical ones."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.starts: list[int] = []

    def add(self, payload: bytes) -> int:
        begin = True
        start = -1
        while True:
            left = BLOCK_SIZE - len(self.data) % BLOCK_SIZE
            if left < HEADER_SIZE:  # the zero-filled trailer
                self.data += bytes(left)
                left = BLOCK_SIZE
            if start < 0:
                start = len(self.data)
            fragment, payload = payload[: left - HEADER_SIZE], payload[left - HEADER_SIZE :]
            end = not payload
            kind = FULL if begin and end else FIRST if begin else LAST if end else MIDDLE
            self.data += physical(kind, fragment)
            begin = False
            if end:
                self.starts.append(start)
                return start


def write_log(*sizes: int) -> LogWriter:
    writer = LogWriter()
    for i, size in enumerate(sizes):
        writer.add(bytes([i % 251 + 1]) * size)
    return writer


def test_crc32c_standard_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    assert crc32c(b"6789", crc32c(b"12345")) == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4: 32 bytes of zeros


def test_a_clean_log_has_no_damage() -> None:
    log = write_log(100, 2_000, 40_000, 90_000, 10, 32_000)
    scan = scan_log(bytes(log.data))
    assert (scan.clean, scan.torn_tail, scan.tail_bytes) == (True, False, 0)
    assert scan.size == len(log.data)
    assert scan_log(b"").clean


def test_a_record_spanning_blocks_with_a_trailer_is_clean() -> None:
    # The first record leaves 5 bytes in block 0: a zero trailer, then FIRST, MIDDLE, LAST.
    log = write_log(BLOCK_SIZE - HEADER_SIZE - 5, 2 * BLOCK_SIZE + 100, 3)
    data = bytes(log.data)
    assert data[BLOCK_SIZE - 5 : BLOCK_SIZE] == bytes(5)
    assert [data[s + 6] for s in (BLOCK_SIZE, 2 * BLOCK_SIZE, 3 * BLOCK_SIZE)] == [
        FIRST,
        MIDDLE,
        LAST,
    ]
    assert scan_log(data).clean


@pytest.mark.parametrize("keep", [1, HEADER_SIZE - 1, HEADER_SIZE + 3, 40_000, 70_000, 80_000])
def test_a_log_cut_inside_its_last_record_is_a_torn_tail(keep: int) -> None:
    log = write_log(100, 5_000, 90_000)
    last = log.starts[-1]
    data = bytes(log.data[: last + keep])
    scan = scan_log(data)
    assert (scan.first_bad, scan.torn_tail, scan.tail_bytes) == (last, True, keep)


def test_a_lost_first_fragment_is_a_torn_tail() -> None:
    """The power-loss disk's ``subset`` cut: the block holding the FIRST fragment never reached
    the disk (a hole of zeros) but a later one did: its MIDDLE and LAST are CRC-correct, yet
    they finish no record."""
    log = write_log(100, 5_000, 3 * BLOCK_SIZE)
    data = bytearray(log.data)
    last = log.starts[-1]
    data[last:BLOCK_SIZE] = bytes(BLOCK_SIZE - last)
    scan = scan_log(bytes(data))
    assert (scan.first_bad, scan.torn_tail) == (last, True)
    assert scan.tail_bytes == len(data) - last


def test_a_lost_middle_fragment_is_a_torn_tail() -> None:
    log = write_log(100, 3 * BLOCK_SIZE)
    data = bytearray(log.data)
    data[BLOCK_SIZE : 2 * BLOCK_SIZE] = bytes(BLOCK_SIZE)
    scan = scan_log(bytes(data))
    assert (scan.first_bad, scan.torn_tail) == (log.starts[-1], True)


def test_garbage_after_the_last_record_is_a_torn_tail() -> None:
    log = write_log(100, 200)
    end = len(log.data)
    scan = scan_log(bytes(log.data) + os.urandom(3_000))
    assert (scan.first_bad, scan.torn_tail, scan.tail_bytes) == (end, True, 3_000)


def test_flipped_bytes_mid_log_with_records_after_are_not_a_torn_tail() -> None:
    log = write_log(*[1_000] * 100)  # about 3 blocks
    data = bytearray(log.data)
    bad = log.starts[10]
    data[bad + HEADER_SIZE + 500] ^= 0xFF
    scan = scan_log(bytes(data))
    assert (scan.first_bad, scan.valid_after, scan.torn_tail) == (bad, True, False)


def test_a_damaged_fragment_with_a_record_after_it_is_not_a_torn_tail() -> None:
    log = write_log(100, 3 * BLOCK_SIZE, 50)
    data = bytearray(log.data)
    data[2 * BLOCK_SIZE + 100] ^= 0x01  # inside the MIDDLE fragment
    scan = scan_log(bytes(data))
    assert (scan.first_bad, scan.torn_tail) == (log.starts[1], False)


def test_a_bad_length_and_an_unknown_type_are_damage() -> None:
    log = write_log(100, 100, 100)
    too_long = bytearray(log.data)
    too_long[log.starts[1] + 4 : log.starts[1] + 6] = BLOCK_SIZE.to_bytes(2, "little")
    assert scan_log(bytes(too_long)).first_bad == log.starts[1]
    unknown = bytes(log.data) + physical(7, b"x")
    assert scan_log(unknown).first_bad == len(log.data)


def test_a_log_written_by_leveldb(tmp_path: Path) -> None:
    """Records of plyvel's LevelDB: clean; torn when cut short or its last record is damaged;
    not torn when damaged in the middle. Times the scan of an 8 MiB log."""
    db = plyvel.DB(str(tmp_path / "db"), create_if_missing=True, write_buffer_size=64 << 20)
    for i in range(2_000):
        db.put(b"k%05d" % i, os.urandom(100 if i % 50 else 40_000))
    db.close()
    (log_path,) = (tmp_path / "db").glob("*.log")
    data = log_path.read_bytes()
    assert scan_log_file(log_path).clean
    assert scan_log(data[: len(data) - 20_000]).torn_tail
    flipped = bytearray(data)
    flipped[-10] ^= 0xFF
    assert scan_log(bytes(flipped)).torn_tail
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    scan = scan_log(bytes(flipped))
    assert scan.first_bad is not None
    assert not scan.torn_tail

    db = plyvel.DB(str(tmp_path / "big"), create_if_missing=True, write_buffer_size=64 << 20)
    for i in range(8 * 1024):
        db.put(b"k%05d" % i, os.urandom(1_000 if i % 100 else 50_000))
    db.close()
    (big,) = (tmp_path / "big").glob("*.log")
    started = time.perf_counter()
    assert scan_log_file(big).clean
    elapsed = time.perf_counter() - started
    size = big.stat().st_size / 2**20
    assert size > 8
    assert elapsed < 30, f"{size:.1f} MiB scanned in {elapsed:.2f} s"
