"""The functional framework's node processes die with the process that started them.

A developer who interrupts a test run hard (SIGKILL of pytest, a CI timeout) must not be left
with devnet daemons holding ports and datadirs: every ``NodeProcess`` asks the kernel to SIGKILL
it when its parent dies (``PR_SET_PDEATHSIG``), since ``start_new_session`` puts it out of reach
of the terminal's signals.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.functional.framework import REPO_ROOT, wait_until

SCRIPT = """
import sys, time
from pathlib import Path
from tests.functional.framework import NodeProcess
node = NodeProcess(0, Path(sys.argv[1]) / "node0")
node.start()
print(node.process.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose (its parent, init here, reaps it)
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def test_node_dies_when_the_test_process_is_sigkilled(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    node_pid = 0
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()  # the node answered /v1/status (or the script died)
        assert line.strip().isdigit(), f"the script did not start a node: {line!r}"
        node_pid = int(line)
        assert _alive(node_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_until(lambda: not _alive(node_pid), 10.0, "the node to die with its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if parent.stdout is not None:
            parent.stdout.close()
        if node_pid and _alive(node_pid):
            os.kill(node_pid, signal.SIGKILL)
