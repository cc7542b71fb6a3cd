"""``make run`` smoke test: scripts/devnet.py (what the target runs, without the reinstall).

Started in the background, the explorer URL must answer and blocks must advance within 60 s;
a node killed with SIGKILL must be started again on its data directory and mine on; an
interrupt (SIGINT, as Ctrl-C) must stop every child: nodes exit 0 (databases closed) and no
process of any child's process group is left.
"""

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.functional.framework import REPO_ROOT, wait_until

log = logging.getLogger("functional")

pytestmark = pytest.mark.integration

STARTED_RE = re.compile(r"^devnet: started (\S+) pid (\d+)")
EXPLORER_RE = re.compile(r"^devnet: explorer: (http://\S+/)")
RESTARTED_RE = re.compile(r"^devnet: started node1 pid (\d+) again: it was stopped by (\S+)")
NODE1_API_RE = re.compile(r"^devnet: started node1 pid \d+ api (http://\S+) ")


class Output:
    """The devnet's stdout, collected line by line from a reader thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        if process.stdout is None:
            return
        for line in process.stdout:
            self.lines.append(line.rstrip("\n"))

    def close(self, process: subprocess.Popen[str]) -> None:
        self._thread.join(5)
        if process.stdout is not None:
            process.stdout.close()

    def find(self, pattern: re.Pattern[str]) -> list[re.Match[str]]:
        return [m for line in list(self.lines) if (m := pattern.match(line))]

    def text(self) -> str:
        return "\n".join(self.lines)


def _pgroup_members(pgids: set[int]) -> list[int]:
    """Live (non-zombie) processes whose process group is one of ``pgids``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        state, pgid = fields[0], int(fields[2])
        if pgid in pgids and state != "Z":
            out.append(int(entry.name))
    return out


@pytest.fixture
def devnet(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Output]]:
    cmd = [
        sys.executable,
        "scripts/devnet.py",
        "--datadir",
        str(tmp_path / "devnet"),
        "--ports",
        "free",
        "--plain",
        "--interval",
        "2",
    ]
    process = subprocess.Popen(
        cmd,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    output = Output(process)
    try:
        yield process, output
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(20)
        pgids = {int(m.group(2)) for m in output.find(STARTED_RE)} | {process.pid}
        for pgid in pgids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)
        output.close(process)
        log.info("devnet output:\n%s", output.text())


def _blocks(url: str) -> int:
    with urllib.request.urlopen(url + "v1/status", timeout=3) as resp:
        return int(json.loads(resp.read())["blocks"])


def _answers(url: str) -> bool:
    try:
        _blocks(url)
    except OSError:
        return False
    return True


def test_devnet_serves_the_explorer_mines_and_stops_cleanly_on_sigint(
    devnet: tuple[subprocess.Popen[str], Output],
) -> None:
    process, output = devnet
    log.info("Start scripts/devnet.py; the explorer URL must be printed and answer")
    wait_until(
        lambda: output.find(EXPLORER_RE) or process.poll() is not None,
        60,
        "the explorer URL line",
    )
    assert process.poll() is None, output.text()
    url = output.find(EXPLORER_RE)[0].group(1)
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200
        page = resp.read().decode()
    assert "dagchain" in page
    assert resp.headers["Content-Type"].startswith("text/html")

    started = {m.group(1): int(m.group(2)) for m in output.find(STARTED_RE)}
    # one miner per node by default (three peer chains)
    assert {"node0", "node1", "node2", "miner0", "miner1", "miner2"} <= set(started), output.text()

    log.info("Blocks must advance within 60 s")
    first = _blocks(url)
    wait_until(lambda: _blocks(url) >= first + 10, 60, "10 more blocks on node0")

    log.info("SIGKILL node1: the devnet starts it again on its data directory; it mines on")
    os.kill(started["node1"], signal.SIGKILL)
    wait_until(lambda: output.find(RESTARTED_RE), 30, "node1 started again")
    restarted = output.find(RESTARTED_RE)[0]
    assert restarted.group(2) == "SIGKILL", output.text()
    node1_url = output.find(NODE1_API_RE)[0].group(1) + "/"
    node1_blocks = _blocks(url)
    wait_until(
        lambda: _answers(node1_url) and _blocks(node1_url) >= node1_blocks + 5,
        90,
        "node1 back and 5 more blocks there",
    )
    started["node1 again"] = int(restarted.group(1))

    log.info("SIGINT (Ctrl-C): every child stops, nodes exit 0, nothing is left behind")
    process.send_signal(signal.SIGINT)
    assert process.wait(30) == 0, output.text()
    wait_until(lambda: any("devnet: stopped" in line for line in output.lines), 5, "final line")
    for name in ("node0", "node1", "node2"):
        assert f"devnet: {name} exited 0" in output.lines, output.text()
    for name, pid in started.items():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        log.info("%s (pid %d) is gone", name, pid)
    assert _pgroup_members(set(started.values())) == []
