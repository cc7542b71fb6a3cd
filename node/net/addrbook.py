"""The address book of known peers, saved as ``<datadir>/peers.json`` (PROTOCOL.md §11.5 P12).

Best effort, not consensus state: a damaged file is ignored (logged) and rebuilt.
"""

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MAX_FAILURES = 5
"""P12: forget an address after 5 failed dials."""
MAX_ENTRIES = 10_000
FILE_NAME = "peers.json"


@dataclass(slots=True)
class AddrEntry:
    """One address: when it was last seen (s), consecutive failed dials, last success (s)."""

    host: str
    port: int
    seen_s: int
    failures: int = 0
    last_ok_s: int = 0


class AddrBook:
    """Known peer addresses keyed by ``host:port``."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, AddrEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, item: object) -> bool:
        return item in self._entries

    @staticmethod
    def key(host: str, port: int) -> str:
        """``host:port``."""
        return f"{host}:{port}"

    def add(self, host: str, port: int, seen_s: int) -> bool:
        """Learn or refresh an address; True if it was new."""
        if not host or not 0 < port <= 0xFFFF:
            return False
        key = self.key(host, port)
        entry = self._entries.get(key)
        if entry is not None:
            entry.seen_s = max(entry.seen_s, seen_s)
            return False
        if len(self._entries) >= MAX_ENTRIES:
            oldest = min(self._entries.values(), key=lambda e: e.seen_s)
            del self._entries[self.key(oldest.host, oldest.port)]
        self._entries[key] = AddrEntry(host, port, seen_s)
        return True

    def mark_good(self, host: str, port: int, now_s: int) -> None:
        """A dial succeeded (and the handshake passed)."""
        self.add(host, port, now_s)
        entry = self._entries[self.key(host, port)]
        entry.failures = 0
        entry.last_ok_s = now_s
        entry.seen_s = now_s

    def mark_failed(self, host: str, port: int) -> None:
        """A dial failed; the fifth failure in a row forgets the address."""
        key = self.key(host, port)
        entry = self._entries.get(key)
        if entry is None:
            return
        entry.failures += 1
        if entry.failures >= MAX_FAILURES:
            del self._entries[key]

    def good(self, limit: int = 1000) -> list[AddrEntry]:
        """Addresses without recent failures, most recently seen first."""
        entries = [e for e in self._entries.values() if e.failures == 0]
        entries.sort(key=lambda e: (-e.seen_s, e.host, e.port))
        return entries[:limit]

    def candidates(self) -> list[AddrEntry]:
        """Every address, fewest failures and most recently seen first (for dialing)."""
        return sorted(self._entries.values(), key=lambda e: (e.failures, -e.seen_s, e.host))

    def load(self) -> None:
        """Read the file if it exists; a damaged file is logged and ignored."""
        if self.path is None or not self.path.exists():
            return
        try:
            rows = json.loads(self.path.read_text(encoding="utf-8"))
            for row in rows["addresses"]:
                entry = AddrEntry(
                    str(row["host"]),
                    int(row["port"]),
                    int(row["seen_s"]),
                    int(row.get("failures", 0)),
                    int(row.get("last_ok_s", 0)),
                )
                if 0 < entry.port <= 0xFFFF:
                    self._entries[self.key(entry.host, entry.port)] = entry
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable address book %s: %s", self.path, exc)

    def save(self) -> None:
        """Write the file atomically (temp file + rename)."""
        if self.path is None:
            return
        rows = [
            {
                "host": e.host,
                "port": e.port,
                "seen_s": e.seen_s,
                "failures": e.failures,
                "last_ok_s": e.last_ok_s,
            }
            for e in self.candidates()
        ]
        tmp = self.path.with_suffix(".json.tmp")
        try:
            tmp.write_text(json.dumps({"version": 1, "addresses": rows}), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("cannot save the address book %s: %s", self.path, exc)


__all__ = ["FILE_NAME", "MAX_FAILURES", "AddrBook", "AddrEntry"]
