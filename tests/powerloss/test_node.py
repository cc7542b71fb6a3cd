"""A real devnet node whose datadir lives on the power-loss filesystem (issue 26, item 2).

The power is cut right after the node's HTTP answer to a block submission, at seeded moments of a
block stream and of the node's start, and in the middle of its initial sync; the node then
restarts on the surviving bytes and must hold every block it answered "accepted" for (and, with
its peer, catch up). A new datadir lost everything to a cut until it was reopened (LevelDB 1.22);
the store now reopens a database it has just created, and a test cuts a new datadir. The other
tests start and stop the node once first: a cut inside LevelDB's creation of the database is not
what they try.
"""

import logging
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apiclient import ApiError
from dagchain.blocks import Block
from tests.functional.framework import STARTUP_TIMEOUT_S, BlockFactory, NodeProcess, wait_until
from tests.powerloss.disk import PowerLossDisk
from tests.powerloss.powerfs import CUT_MODES, CutMode

log = logging.getLogger("powerloss.node")

pytestmark = pytest.mark.integration

BLOCKS = 30
STREAM_BLOCKS = 900
SYNC_BLOCKS = 300
ROUNDS = 8
CUT_TIMEOUT_S = 20.0
WRITE_ERROR_EXIT_S = 2.0


class NodeDidNotRestart(Exception):
    """The node refused to start on the surviving bytes (with one clear line: checked)."""


@pytest.fixture
def node(disk: PowerLossDisk) -> Iterator[NodeProcess]:
    """A devnet node with its datadir at the mount's root (its log beside the mount)."""
    process = NodeProcess(0, disk.path)
    try:
        yield process
    finally:
        process.kill()  # before the disk's teardown unmounts the datadir


def submit_acknowledged(node: NodeProcess, factory: BlockFactory, count: int) -> list[bytes]:
    """Mine ``count`` blocks and submit them; the ids the node answered "accepted" for."""
    return [b.id for b in factory.mine(count) if node.submit_block(b).status == "accepted"]


def cut_and_restart(disk: PowerLossDisk, node: NodeProcess, mode: CutMode, seed: int) -> None:
    """Cut the power under the running node, kill it, boot the disk and start the node again."""
    disk.freeze(mode, seed)
    node.kill()
    restart_after_cut(disk, node)


def restart_after_cut(disk: PowerLossDisk, node: NodeProcess) -> None:
    """Boot the disk and start the node on the surviving bytes.

    Raises:
        NodeDidNotRestart: the node exited with status 2 and one ``dagchain-node: error:`` line.
    """
    disk.boot()
    log_start = len(node.log_path.read_bytes()) if node.log_path.exists() else 0
    try:
        node.start()
    except AssertionError:
        if node.process is None or node.process.poll() is None:
            raise
        output = node.log_path.read_bytes()[log_start:].decode(errors="replace")
        lines = [line for line in output.splitlines() if line and not line.startswith("=====")]
        assert "Traceback" not in output, output
        assert (node.process.returncode, lines[-1][:22]) == (2, "dagchain-node: error: "), output
        raise NodeDidNotRestart(lines[-1]) from None


def stream_until_cut(
    disk: PowerLossDisk,
    node: NodeProcess,
    blocks: list[Block],
    delay: float,
    mode: CutMode,
    seed: int,
) -> list[bytes]:
    """Submit ``blocks`` in order while the power goes off ``delay`` seconds in; the node is
    killed and the disk closed on return. The ids answered accepted (or duplicate: held)."""
    mount = disk.mount
    assert mount is not None
    timer = threading.Timer(delay, mount.cut, (mode, seed))
    timer.start()
    acked: list[bytes] = []
    try:
        for block in blocks:
            if not timer.is_alive():
                break
            try:
                answer = node.submit_block(block)
            except ApiError:  # the node lost its disk mid-request (5xx, reset, timeout)
                break
            if answer.status not in ("accepted", "duplicate"):
                break
            acked.append(block.id)
    finally:
        timer.join(CUT_TIMEOUT_S)
        node.kill()
        disk.close()
    return acked


def cut_during_start(
    disk: PowerLossDisk, node: NodeProcess, delay: float, mode: CutMode, seed: int
) -> None:
    """Stop the node, start it again and cut the power ``delay`` seconds after it has taken the
    datadir lock (while it writes its token, opens and recovers LevelDB, loads the chain)."""
    node.stop()
    node.start(wait=False)
    assert node.process is not None
    pid = str(node.process.pid)
    wait_until(lambda: lock_holder(disk) == pid, STARTUP_TIMEOUT_S, "the node to take the lock")
    mount = disk.mount
    assert mount is not None
    timer = threading.Timer(delay, mount.cut, (mode, seed))
    timer.start()
    timer.join(delay + CUT_TIMEOUT_S)
    node.kill()
    disk.close()
    restart_after_cut(disk, node)


def lock_holder(disk: PowerLossDisk) -> str:
    """The pid written in the datadir's ``.lock`` (node/cli.py), or "" before it exists."""
    try:
        return (disk.path / ".lock").read_text().strip()
    except FileNotFoundError:
        return ""


def test_restarted_node_holds_every_acknowledged_block(
    disk: PowerLossDisk, node: NodeProcess
) -> None:
    """The datadir existed before (the node ran once and stopped), as on any long-lived node."""
    node.start()
    node.stop()
    node.start()
    factory = BlockFactory(miners=3)
    acked = submit_acknowledged(node, factory, BLOCKS)
    log.info("%d blocks accepted; the power goes off right after the last answer", len(acked))
    cut_and_restart(disk, node, "all", 0)
    missing = [x.hex() for x in acked if not node.has_block(x)]
    assert (len(acked), missing) == (BLOCKS, [])
    log.info("The restarted node takes the next blocks")
    more = submit_acknowledged(node, factory, 5)
    assert len(more) == 5


def test_node_on_a_new_datadir_holds_every_acknowledged_block(
    disk: PowerLossDisk, node: NodeProcess
) -> None:
    node.start()
    factory = BlockFactory(miners=3)
    acked = submit_acknowledged(node, factory, BLOCKS)
    cut_and_restart(disk, node, "all", 0)
    missing = [x.hex() for x in acked if not node.has_block(x)]
    assert (len(acked), missing) == (BLOCKS, [])


def test_power_cuts_at_seeded_moments_keep_every_acknowledged_block(
    disk: PowerLossDisk, node: NodeProcess
) -> None:
    """Cuts at seeded moments, in every mode: while blocks stream in (between a block's batch
    and its answer, in a memtable flush) and while the node starts (right after it takes the
    datadir lock, in LevelDB's open). After each restart every block answered accepted (or
    duplicate) is there, and at the end the node holds the replica's best chain."""
    rng = random.Random(26)
    factory = BlockFactory(miners=3)
    blocks = factory.mine(STREAM_BLOCKS)
    node.start()
    node.stop()  # created; the cuts below are not inside LevelDB's creation of the database
    node.start()
    acked: list[bytes] = []
    for round_ in range(ROUNDS):
        mode, seed = CUT_MODES[round_ % len(CUT_MODES)], rng.randrange(1 << 30)
        if round_ % 2:
            delay = rng.uniform(0.0, 0.3)
            log.info("round %d: cut (%s) %.2f s after the datadir lock", round_, mode, delay)
            cut_during_start(disk, node, delay, mode, seed)
        else:
            delay = rng.uniform(0.05, 0.4)
            acked += stream_until_cut(disk, node, blocks[len(acked) :], delay, mode, seed)
            log.info("round %d: %d blocks acknowledged, cut (%s)", round_, len(acked), mode)
            restart_after_cut(disk, node)
        missing = [x.hex() for x in acked if not node.has_block(x)]
        assert (round_, missing) == (round_, [])
    assert len(acked) > ROUNDS  # the stream rounds did get blocks in before their cuts
    log.info("The rest of the stream: the node ends on the replica's best chain")
    for block in blocks[len(acked) :]:
        node.submit_block(block)
    assert node.best()[0] == factory.chain.best_id.hex()


def start_syncing(peer: NodeProcess, node: NodeProcess) -> tuple[str, int]:
    """``peer`` (on an ordinary directory) gets SYNC_BLOCKS blocks; ``node`` (on the disk, its
    datadir opened once before) starts syncing from it. The best milestone, and the node's block
    count part-way through the sync."""
    peer.start()
    factory = BlockFactory(miners=3)
    for block in factory.mine(SYNC_BLOCKS):
        peer.submit_block(block)
    node.start()
    node.stop()  # created; the cuts below are not inside LevelDB's creation of the database
    node.peers = [peer.p2p_address]
    node.start()
    counted = blocks_beyond(node, SYNC_BLOCKS // 8, 30)
    assert counted < SYNC_BLOCKS + 1  # part-way
    return factory.chain.best_id.hex(), counted


def test_power_cut_during_initial_sync_then_the_node_catches_up(
    disk: PowerLossDisk, node: NodeProcess, tmp_path: Path
) -> None:
    """The node on the disk syncs from a peer and loses its power part-way; restarted alone on
    the surviving bytes it holds every block it had counted, and with its peer again it catches
    up to the peer's best chain."""
    peer = NodeProcess(1, tmp_path / "peer" / "data")
    try:
        best, counted = start_syncing(peer, node)
        log.info("%d of %d blocks synced; the power goes off", counted - 1, SYNC_BLOCKS)
        node.peers = []
        cut_and_restart(disk, node, "torn", 7)
        assert node.status().blocks >= counted
        log.info("Restarted with its peer, it catches up")
        node.stop()
        node.peers = [peer.p2p_address]
        node.start()
        node.wait(lambda n: n.best()[0] == best, 60, f"to reach milestone {best[:16]}")
        node.wait(lambda n: n.status().blocks == SYNC_BLOCKS + 1, 30, "to hold every block")
    finally:
        peer.kill()


class NodeRanOnAfterWriteError(Exception):
    """The node kept running on a disk that refuses writes."""


def test_disk_write_error_during_sync_stops_the_node_with_one_line(
    disk: PowerLossDisk, node: NodeProcess, tmp_path: Path
) -> None:
    """The disk fails (the power-loss disk is cut and gone: every write fails, as on a dead or
    full disk) while the node applies level sets from a peer. Like Bitcoin Core on a failed
    block write, the node should stop with a non-zero status and one line naming the storage
    error, rather than run on with a store that can no longer commit anything. Regression
    test of issue 26: it logged a traceback and ran on (node/failstop.py now stops it)."""
    peer = NodeProcess(1, tmp_path / "peer" / "data")
    try:
        start_syncing(peer, node)
        assert disk.mount is not None
        assert node.process is not None
        disk.mount.cut()
        wait_until(
            lambda: "cannot write LevelDB database" in node.log_path.read_text(errors="replace"),
            15,
            "the node to meet the write error",
        )
        try:
            status = node.process.wait(WRITE_ERROR_EXIT_S)
        except subprocess.TimeoutExpired:
            raise NodeRanOnAfterWriteError(node.log_tail(3)) from None
        text = node.log_path.read_text(errors="replace")
        last = [line for line in text.splitlines() if not _from_resource_tracker(line)][-1]
        assert (status, last[:22], "cannot write" in last, "Traceback" in text) == (
            1,
            "dagchain-node: error: ",
            True,
            False,
        )
    finally:
        peer.kill()


def _from_resource_tracker(line: str) -> bool:
    """A line of multiprocessing's resource tracker, a separate process that may warn of the
    signature pool's semaphores once the node is gone (after a SIGTERM stop too): not the
    node's own output."""
    return "resource_tracker" in line or line.startswith("  warnings.warn(")


def blocks_beyond(node: NodeProcess, minimum: int, timeout: float) -> int:
    """The node's block count once it exceeds ``minimum``, polled every 5 ms (``wait_until``
    backs off to 250 ms, too coarse to land in a sync that takes a fraction of a second)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        blocks = node.status().blocks
        if blocks > minimum:
            return blocks
        time.sleep(0.005)
    raise AssertionError(f"{node.name} did not exceed {minimum} blocks in {timeout:.0f} s")
