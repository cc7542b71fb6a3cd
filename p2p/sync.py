"""Pure catch-up logic: milestone header checks and the level-set download plan (§11.4 P8-P10).

The shell (``node.net.manager``) sends the requests this module asks for and feeds back the answers;
every rule is the core's: snapshots come from :func:`dagchain.retarget.compute_snapshot`, target
and proof-of-work checks from :mod:`dagchain.pow`, and blocks are accepted only by ``Chain``.
"""

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from dagchain import rules
from dagchain.blocks import BlockHeader, compute_block_id, decode_header
from dagchain.errors import EncodingError, NotYetValid, RejectedBlock
from dagchain.params import ConsensusParams
from dagchain.retarget import Snapshot, compute_snapshot
from dagchain.types import BlockId

MAX_LEVEL_SETS_IN_FLIGHT = 8
"""P9: up to 8 level sets may be in flight, applied strictly in height order."""
MAX_GETDATA_ITEMS = 500
FRESH_TIP_MS = 60_000
"""P10 (b): initial sync ends once the best milestone is under 60 s old."""


class SyncError(Exception):
    """A sync peer misbehaved (``score`` per §11.7) or must be paused (``pause``: no penalty)."""

    def __init__(self, reason: str, score: int, pause: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.score = score
        self.pause = pause


@dataclass(frozen=True, slots=True)
class VerifiedHeader:
    """A milestone header that passed P8, with the snapshot computed from its parent's."""

    block_id: BlockId
    header: BlockHeader
    snapshot: Snapshot


def verify_milestone_headers(
    raw_headers: Sequence[bytes],
    locator: Sequence[bytes],
    get_snapshot: Callable[[bytes], Snapshot | None],
    get_timestamp: Callable[[bytes], int | None],
    genesis_id: bytes,
    params: ConsensusParams,
    now_ms: int,
) -> list[VerifiedHeader]:
    """P8: a chain of real milestones hanging off our locator.

    Raises:
        SyncError: +100 for any violation; ``pause`` (no score) for H11 (a future timestamp).
    """
    out: list[VerifiedHeader] = []
    if not raw_headers:
        return out
    parent_id: bytes | None = None
    parent_snap: Snapshot | None = None
    parent_ts = 0
    for index, raw in enumerate(raw_headers):
        try:
            header = decode_header(raw)
        except EncodingError:
            raise SyncError("header is not 150 bytes", 100) from None
        block_id = compute_block_id(raw)
        if index == 0:
            parent_id = header.milestone_link
            if parent_id not in locator:
                raise SyncError("first header does not link a locator entry", 100)
            parent_snap = get_snapshot(parent_id)
            ts = get_timestamp(parent_id)
            if parent_snap is None or ts is None:
                raise SyncError("first header links a milestone we do not have", 100)
            parent_ts = ts
        elif header.milestone_link != parent_id:
            raise SyncError("headers do not form a milestone chain", 100)
        if parent_snap is None or parent_id is None:  # pragma: no cover - set above
            raise SyncError("no parent", 100)
        _check_header(header, block_id, parent_snap, parent_ts, params, now_ms)
        snap = compute_snapshot(parent_snap, parent_id == genesis_id, header.timestamp_ms, params)
        out.append(VerifiedHeader(block_id, header, snap))
        parent_id, parent_snap, parent_ts = block_id, snap, header.timestamp_ms
    return out


def _check_header(
    header: BlockHeader,
    block_id: bytes,
    parent: Snapshot,
    parent_ts: int,
    params: ConsensusParams,
    now_ms: int,
) -> None:
    """P8's list, each rule from ``dagchain.rules``: H2, H3, H5 (header part), D4, LE(id) ≤ the
    parent's ms_target, D6 against the parent and H11 (a pause, no score)."""
    try:
        rules.check_header_fields(header, block_id, params)
        rules.check_block_target(header, parent.blk_target, block_id)
        rules.check_pow(block_id, parent.ms_target, "the parent's milestone target")
        rules.check_timestamp_order(header, parent_ts, "milestone", block_id)
        rules.check_not_future(header, now_ms, params)
    except RejectedBlock as exc:
        raise SyncError(f"{exc.rule}: {exc.message}", 100) from None
    except NotYetValid as exc:
        raise SyncError(f"{exc.rule}: {exc.message}", 0, pause=True) from None


@dataclass(slots=True)
class LevelSetJob:
    """One milestone's level set being downloaded (P9)."""

    milestone: VerifiedHeader
    ids: list[bytes] = field(default_factory=list)
    total: int | None = None
    requested_offset: int | None = 0
    blocks: dict[bytes, bytes] = field(default_factory=dict)

    @property
    def listed(self) -> bool:
        """Every page of the id list has arrived."""
        return self.total is not None and len(self.ids) >= self.total


class SyncPlan:
    """P9 for one sync peer: level sets in ascending height, ≤ 8 in flight, applied in order."""

    def __init__(self, max_in_flight: int = MAX_LEVEL_SETS_IN_FLIGHT) -> None:
        self.max_in_flight = max_in_flight
        self._queue: list[VerifiedHeader] = []
        self._jobs: OrderedDict[bytes, LevelSetJob] = OrderedDict()
        self._requested_blocks: set[bytes] = set()

    @property
    def idle(self) -> bool:
        """Nothing queued or in flight."""
        return not self._queue and not self._jobs

    @property
    def queued(self) -> int:
        """Verified headers whose level sets are not requested yet."""
        return len(self._queue)

    @property
    def in_flight(self) -> int:
        """Level sets being downloaded."""
        return len(self._jobs)

    def last_header(self) -> VerifiedHeader | None:
        """The highest header known to the plan (for the next locator)."""
        if self._queue:
            return self._queue[-1]
        if self._jobs:
            return next(reversed(self._jobs.values())).milestone
        return None

    def add_headers(self, headers: Iterable[VerifiedHeader]) -> None:
        """Queue verified milestone headers (ascending height)."""
        self._queue.extend(headers)

    def start_jobs(self) -> list[tuple[bytes, int]]:
        """Open jobs up to the in-flight limit: the ``getlevelset`` (ms, offset) to send."""
        out: list[tuple[bytes, int]] = []
        while self._queue and len(self._jobs) < self.max_in_flight:
            header = self._queue.pop(0)
            self._jobs[header.block_id] = LevelSetJob(header)
            out.append((header.block_id, 0))
        return out

    def on_levelset(
        self, ms: bytes, offset: int, total: int, ids: Sequence[bytes]
    ) -> tuple[bytes, int] | None:
        """A ``levelset`` page: the next page to request, if any.

        Raises:
            SyncError: unsolicited (+10) or inconsistent paging (+50).
        """
        job = self._jobs.get(ms)
        if job is None or job.requested_offset != offset:
            raise SyncError("unsolicited levelset", 10)
        if (job.total is not None and total != job.total) or offset + len(ids) > total:
            raise SyncError("inconsistent level-set paging", 50)
        if not ids and offset < total:
            raise SyncError("empty level-set page", 50)
        job.total = total
        job.ids.extend(ids)
        if job.listed:
            job.requested_offset = None
            if not job.ids or job.ids[-1] != ms:
                raise SyncError("level set does not end with its milestone", 50)
            return None
        job.requested_offset = len(job.ids)
        return ms, job.requested_offset

    def awaiting_levelsets(self) -> bool:
        """Some ``getlevelset`` is unanswered."""
        return any(job.requested_offset is not None for job in self._jobs.values())

    def is_expected_levelset(self, ms: bytes) -> bool:
        """A ``levelset``/``notfound`` for ``ms`` would answer an outstanding request."""
        job = self._jobs.get(ms)
        return job is not None and job.requested_offset is not None

    def wanted_blocks(self, has_block: Callable[[bytes], bool], limit: int) -> list[bytes]:
        """Ids of listed level sets that we neither have nor asked for yet (≤ ``limit``)."""
        out: list[bytes] = []
        for job in self._jobs.values():
            if not job.listed:
                continue
            for block_id in job.ids:
                if len(out) >= limit:
                    return out
                if (
                    block_id not in job.blocks
                    and block_id not in self._requested_blocks
                    and not has_block(block_id)
                ):
                    out.append(block_id)
                    self._requested_blocks.add(block_id)
        return out

    def on_block(self, block_id: bytes, raw: bytes) -> bool:
        """A ``block`` arrived; True if the plan asked for it."""
        if block_id not in self._requested_blocks:
            return False
        self._requested_blocks.discard(block_id)
        for job in self._jobs.values():
            if block_id in job.ids:
                job.blocks[block_id] = raw
                return True
        return False

    def on_not_found(self, block_id: bytes) -> bool:
        """The peer lacks a block it listed: True if the plan asked for it (+50, switch peer)."""
        return block_id in self._requested_blocks

    def complete_jobs(
        self, has_block: Callable[[bytes], bool]
    ) -> list[tuple[LevelSetJob, list[bytes]]]:
        """Every listed level set whose blocks are all here (any position): (job, raws).

        The shell hands these to signature workers ahead of their turn to be applied.
        """
        out: list[tuple[LevelSetJob, list[bytes]]] = []
        for job in self._jobs.values():
            if not job.listed:
                continue
            raws = self._raws(job, has_block)
            if raws is not None:
                out.append((job, raws))
        return out

    @staticmethod
    def _raws(job: LevelSetJob, has_block: Callable[[bytes], bool]) -> list[bytes] | None:
        raws = []
        for block_id in job.ids:
            raw = job.blocks.get(block_id)
            if raw is not None:
                raws.append(raw)
            elif not has_block(block_id):
                return None
        return raws

    def pop_ready(
        self,
        has_block: Callable[[bytes], bool],
        may_apply: Callable[[LevelSetJob], bool] | None = None,
    ) -> list[tuple[LevelSetJob, list[bytes]]]:
        """Complete level sets at the front, in height order: (job, raws to submit in order).

        ``may_apply`` holds back the front job (and so every later one) while it answers False,
        e.g. while the job's signatures are still being checked by a worker.
        """
        out: list[tuple[LevelSetJob, list[bytes]]] = []
        while self._jobs:
            job = next(iter(self._jobs.values()))
            if not job.listed:
                break
            raws = self._raws(job, has_block)
            if raws is None or (may_apply is not None and not may_apply(job)):
                break
            self._jobs.popitem(last=False)
            out.append((job, raws))
        return out

    def outstanding_blocks(self) -> int:
        """Blocks asked for and not yet arrived."""
        return len(self._requested_blocks)

    def reset(self) -> None:
        """Forget everything (switching peers)."""
        self._queue.clear()
        self._jobs.clear()
        self._requested_blocks.clear()


def is_tip_fresh(best_timestamp_ms: int, now_ms: int) -> bool:
    """P10 (b): the best milestone is under 60 s old."""
    return now_ms - best_timestamp_ms < FRESH_TIP_MS


__all__ = [
    "FRESH_TIP_MS",
    "MAX_GETDATA_ITEMS",
    "MAX_LEVEL_SETS_IN_FLIGHT",
    "LevelSetJob",
    "SyncError",
    "SyncPlan",
    "VerifiedHeader",
    "is_tip_fresh",
    "verify_milestone_headers",
]
