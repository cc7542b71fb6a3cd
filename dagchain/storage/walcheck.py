"""Where a LevelDB write-ahead log is damaged, and whether the damage is only a torn tail.

Pure Python, no LevelDB: :class:`~dagchain.storage.leveldb.LevelDBStore` calls it only when a
``paranoid_checks`` open reports a corruption, to tell a torn tail of the newest log (the end of
a batch that was never synced, so never acknowledged: the power went off while it was written)
from damage to synced data, which stays fatal (docs/protocol.md decisions 17 and 38).

LevelDB's log format (its ``doc/log_format.md``): the file is a sequence of 32 KiB blocks; a
block holds physical records, each a 7-byte header (masked CRC32C of the type byte and payload,
4 bytes little-endian; payload length, 2 bytes little-endian; type: 1 FULL, 2 FIRST, 3 MIDDLE,
4 LAST) and its payload, never crossing a block's end; a trailer of fewer than 7 bytes is
zero-filled. A logical record (one write batch) is one FULL record, or FIRST, any MIDDLEs and a
LAST. Every block starts at a record boundary, so after a bad record the scan (like LevelDB's
reader) resumes at the next block.
"""

import os
from dataclasses import dataclass

BLOCK_SIZE = 32 * 1024
HEADER_SIZE = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_MASK_DELTA = 0xA282EAD8


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_TABLE = _crc32c_table()


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of ``data``, continuing ``crc``."""
    table = _TABLE
    crc ^= 0xFFFFFFFF
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def mask_crc(crc: int) -> int:
    """LevelDB's masked form of a CRC, as stored in a log record header."""
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


@dataclass(frozen=True)
class LogScan:
    """What a scan of one log found.

    Attributes:
        size: the file's length in bytes.
        first_bad: where the first invalid logical record starts (for a multi-block record whose
            later fragment is bad, where its FIRST fragment starts), or None if every record is
            valid and complete.
        valid_after: a valid, complete logical record (a CRC-correct FULL record, or a
            CRC-correct FIRST, MIDDLEs and LAST in sequence) starts after ``first_bad``.
    """

    size: int
    first_bad: int | None
    valid_after: bool

    @property
    def clean(self) -> bool:
        """No damage at all."""
        return self.first_bad is None

    @property
    def torn_tail(self) -> bool:
        """Damaged, and nothing valid follows the damage: only the file's end was lost."""
        return self.first_bad is not None and not self.valid_after

    @property
    def tail_bytes(self) -> int:
        """Bytes from the first invalid record to the end of the file (0 if clean)."""
        return 0 if self.first_bad is None else self.size - self.first_bad


def scan_log(data: bytes | bytearray | memoryview) -> LogScan:
    """Scan a whole LevelDB log held in memory (see the module docstring)."""
    view = memoryview(data)
    size = len(view)
    first_bad: int | None = None
    valid_after = False
    fragment_start: int | None = None  # a FIRST seen, its LAST not yet

    def bad(offset: int) -> None:
        nonlocal first_bad, fragment_start
        start = offset if fragment_start is None else fragment_start
        fragment_start = None
        if first_bad is None or start < first_bad:
            first_bad = start

    def complete(offset: int) -> None:
        nonlocal valid_after
        if first_bad is not None and offset > first_bad:
            valid_after = True

    for block_start in range(0, size, BLOCK_SIZE):
        block_end = block_start + BLOCK_SIZE
        end = min(block_end, size)
        offset = block_start
        while block_end - offset >= HEADER_SIZE and offset < end:
            if end - offset < HEADER_SIZE:  # a header cut off by the end of the file
                bad(offset)
                break
            header = view[offset : offset + HEADER_SIZE]
            length = header[4] | (header[5] << 8)
            kind = header[6]
            stop = offset + HEADER_SIZE + length
            if (
                stop > end  # runs past the block's end or the file's
                or (kind == 0 and length == 0)  # zeros: a hole, or preallocated space
                or kind not in (FULL, FIRST, MIDDLE, LAST)
                or int.from_bytes(header[:4], "little") != mask_crc(crc32c(view[offset + 6 : stop]))
            ):
                bad(offset)  # its length cannot be trusted: resume at the next block
                break
            if kind == FULL:
                if fragment_start is not None:  # a FIRST never finished
                    bad(fragment_start)
                complete(offset)
            elif kind == FIRST:
                if fragment_start is not None:
                    bad(fragment_start)
                fragment_start = offset
            elif fragment_start is None:  # a MIDDLE or LAST without its FIRST
                bad(offset)
            elif kind == LAST:
                complete(fragment_start)
                fragment_start = None
            offset = stop
    if fragment_start is not None:  # the file ends inside a multi-block record
        bad(fragment_start)
    return LogScan(size=size, first_bad=first_bad, valid_after=valid_after)


def scan_log_file(path: str | os.PathLike[str]) -> LogScan:
    """Scan the LevelDB log at ``path`` (read whole: logs are a few MiB)."""
    with open(path, "rb") as file:
        return scan_log(file.read())


__all__ = [
    "BLOCK_SIZE",
    "FIRST",
    "FULL",
    "HEADER_SIZE",
    "LAST",
    "MIDDLE",
    "LogScan",
    "crc32c",
    "mask_crc",
    "scan_log",
    "scan_log_file",
]
