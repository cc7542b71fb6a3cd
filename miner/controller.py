"""The mining loop against a node's API (shell: HTTP, WebSocket, files, worker pool).

template -> nonce search -> submit -> next template, on the miner's own peer chain:

- The redemption key (``redemption.key``, mode 0600) and the peer chain's root (``state.json``) live
  in the datadir. Without a root the first template is asked for with ``?register=KEYADDR`` (the
  key's address, never the payout address); the accepted block's id becomes the root, written
  (atomically, fsynced) before anything else happens, so a restart continues the same peer chain.
- ``/v1/events`` (WebSocket) pushes every new milestone or reorganisation; it aborts the running
  search at once (a stale template) and the next template links the new milestone.
- The header to hash is rebuilt from the typed template (:class:`apiclient.models.
  TemplateResponse`, the schema the node answers with); the submission's answer is a
  :class:`apiclient.models.SubmitBlockResponse` or the node's refusal (an ``ApiError``).
- Every ``redeem_every`` accepted blocks, if the node reports a positive ``redeemable`` and the
  anchor names our key, tx[0] is a REDEMPTION (§9 R4) built and signed here, paying the claim to
  the payout address; its output[0] names our key again. The merkle root is recomputed.
- ``rate`` caps accepted blocks per second (devnet, where almost every hash is a block).
"""

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from apiclient import ApiError, NodeApi, NodeUnreachable
from apiclient.models import SubmitBlockResponse, TemplateResponse
from dagchain.blocks import (
    NONCE_OFFSET,
    BlockHeader,
    compute_merkle_root,
    compute_tips_root,
    make_block,
)
from dagchain.crypto import address_from_pubkey, encode_address, xonly_pubkey
from dagchain.params import ConsensusParams
from dagchain.transactions import (
    REDEMPTION_INDEX,
    Transaction,
    TxKind,
    TxOut,
    decode_transaction,
    sign_transaction,
)
from dagchain.types import Address, BlockId, TxId
from miner.pacing import Pacer, default_burst
from miner.pool import HashPool, SearchResult, default_worker_kind
from miner.search import KERNEL, LANES, search_nonce

log = logging.getLogger("dagchain.miner")

KEY_FILE = "redemption.key"
STATE_FILE = "state.json"
_REDEEM_RETRY_BLOCKS = 64
"""Blocks after which a redemption whose anchor has not moved is taken as INVALID and redone."""
_INLINE_NONCES = 64
"""Nonces tried in the event loop before the worker pool is asked (microseconds of work): on
devnet nearly every hash is a block, and a pool hand-off costs 0.4-3 ms a block (issue 25)."""


class MinerError(Exception):
    """A user-facing failure: one line, exit status 2."""


# --------------------------------------------------------------------------------------------------
# datadir: key and peer-chain state
# --------------------------------------------------------------------------------------------------


def load_or_create_key(datadir: Path) -> bytes:
    """The redemption secret key, created (mode 0600) on first use.

    Raises:
        MinerError: the key file is damaged, or the datadir cannot be created or written.
    """
    path = datadir / KEY_FILE
    if path.exists():
        try:
            secret = bytes.fromhex(path.read_text().strip())
            xonly_pubkey(secret)
        except Exception as exc:
            raise MinerError(f"{path} does not hold a valid secret key: {exc}") from exc
        return secret
    secret = _new_secret()
    try:
        datadir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret.hex() + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise MinerError(f"cannot use the miner datadir {datadir}: {exc.strerror or exc}") from None
    return secret


def _new_secret() -> bytes:
    """A random valid secret key (a draw >= the curve order, p ~ 2**-128, is drawn again)."""
    while True:
        secret = secrets.token_bytes(32)
        try:
            xonly_pubkey(secret)
        except Exception:  # pragma: no cover
            continue
        return secret


@dataclass
class MinerState:
    """What survives a restart: the network, the peer chain's root and its last block we saw."""

    network: str
    root: str | None = None
    last_block: str | None = None
    blocks: int = 0
    last_redemption_anchor: str | None = None

    @classmethod
    def load(cls, datadir: Path, network: str) -> "MinerState":
        path = datadir / STATE_FILE
        if not path.exists():
            return cls(network)
        data = json.loads(path.read_text())
        if data.get("network") != network:
            raise MinerError(
                f"{datadir} belongs to network {data.get('network')!r}, the node runs {network!r}"
            )
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__ if k in data})

    def save(self, datadir: Path) -> None:
        """Atomic and durable: write a temporary file, fsync, rename."""
        datadir.mkdir(parents=True, exist_ok=True)
        tmp = datadir / (STATE_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(self.__dict__, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, datadir / STATE_FILE)


class StateWriter:
    """Writes ``state.json`` without holding up the mining loop (issue 25 item 4).

    Each write is still atomic and durable (:meth:`MinerState.save`: about 5 ms, an fsync and
    a rename on ext4). :meth:`save_soon` hands a snapshot to a worker thread; snapshots taken
    while one is being written are coalesced (the newest wins). :meth:`save_now` writes at once,
    for what must be on disk before mining goes on (the root, a redemption's anchor). A version
    number checked under one lock keeps an older snapshot from replacing a newer one.
    """

    def __init__(self, datadir: Path) -> None:
        self.datadir = datadir
        self._lock = threading.Lock()
        self._version = 0
        self._on_disk = 0
        self._pending: tuple[MinerState, int] | None = None
        self._task: asyncio.Task[None] | None = None

    def _snapshot(self, state: MinerState) -> tuple[MinerState, int]:
        self._version += 1
        return dataclasses.replace(state), self._version

    def _write(self, snapshot: MinerState, version: int) -> None:
        with self._lock:
            if version > self._on_disk:
                snapshot.save(self.datadir)
                self._on_disk = version

    def save_now(self, state: MinerState) -> None:
        """Write ``state`` before returning."""
        self._write(*self._snapshot(state))

    def save_soon(self, state: MinerState) -> None:
        """Write ``state`` in the background (at once when no event loop runs).

        Raises:
            OSError: the previous background write failed.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.save_now(state)
            return
        self._pending = self._snapshot(state)
        if self._task is None or self._task.done():
            if self._task is not None:
                self._task.result()  # a failed write ends the run, as an inline one did
            self._task = loop.create_task(self._drain())

    async def _drain(self) -> None:
        while self._pending is not None:
            snapshot, self._pending = self._pending, None
            await asyncio.to_thread(self._write, *snapshot)

    async def aclose(self) -> None:
        """Wait for the background writes."""
        if self._task is not None:
            await self._task


# --------------------------------------------------------------------------------------------------
# templates and redemptions (pure helpers)
# --------------------------------------------------------------------------------------------------


def tip_links_of(t: TemplateResponse) -> list[bytes]:
    """The template's ``tip_links`` (hex, ascending; PROTOCOL.md v2 §3.4) as bytes."""
    return [bytes.fromhex(x) for x in t.tip_links]


def header_from_template(t: TemplateResponse, merkle_root: bytes | None = None) -> BlockHeader:
    """The header (nonce 0) a template describes, optionally with another merkle root.

    ``tips_root`` is recomputed from ``tip_links`` (the ids the block carries), not copied.
    """
    return BlockHeader(
        t.version,
        BlockId(bytes.fromhex(t.milestone_link)),
        BlockId(bytes.fromhex(t.previous_link)),
        compute_tips_root(tip_links_of(t)),
        merkle_root if merkle_root is not None else bytes.fromhex(t.merkle_root),
        t.timestamp_ms,
        t.target,
        0,
    )


def build_redemption(
    secret: bytes, anchor: bytes, claim: int, payout: Address, params: ConsensusParams
) -> Transaction:
    """A REDEMPTION (§7.1, §9 R4): spends the anchor, names our key next, pays ``claim``."""
    key_address = address_from_pubkey(xonly_pubkey(secret))
    outputs = [TxOut(0, key_address), TxOut(claim, payout)]
    return sign_transaction(
        TxKind.REDEMPTION,
        [(TxId(anchor), REDEMPTION_INDEX)],
        outputs,
        [secret],
        params,
        aux_rand=secrets.token_bytes(32),
    )


# --------------------------------------------------------------------------------------------------
# the controller
# --------------------------------------------------------------------------------------------------


@dataclass
class Stats:
    """Counters for the status lines."""

    started: float = field(default_factory=time.monotonic)
    hashes: int = 0
    search_s: float = 0.0
    blocks: int = 0
    milestones: int = 0
    stale: int = 0
    rejected: int = 0
    redemptions: int = 0
    milestones_seen: int = 0

    def line(self, since: "Stats | None" = None) -> str:
        hashes = self.hashes - (since.hashes if since else 0)
        secs = self.search_s - (since.search_s if since else 0)
        rate = hashes / secs if secs > 0 else 0.0
        return (
            f"status: hashrate_hs={rate:.0f} blocks={self.blocks} milestones={self.milestones} "
            f"stale_templates={self.stale} rejected={self.rejected} "
            f"redemptions={self.redemptions} milestones_seen={self.milestones_seen}"
        )


@dataclass
class MinerConfig:
    node: str
    payout: Address
    payout_text: str
    token: str
    datadir: Path
    network: str
    params: ConsensusParams
    threads: int = 1
    blocks: int | None = None
    redeem_every: int = 10
    rate: float = 4.0
    status_interval_s: float = 10.0
    token_file: Path | None = None
    """Re-read when the node answers 401: a restarted node writes a new token."""
    new_chain_after_s: float = 30.0
    """§3.4: a peer chain that D5a holds back (it links a milestone above the best head) waits
    for a higher head; when the best milestone has not moved for this long (no other miner makes
    one either: every miner was on the side an operator's F8 undid), register a new peer chain,
    as §3.4 allows, instead of waiting for ever (docs/miner.md)."""


class Miner:
    """One miner on one peer chain against one node."""

    def __init__(
        self,
        cfg: MinerConfig,
        api: NodeApi,
        out: Callable[[str], None] = print,
    ) -> None:
        self.cfg = cfg
        self.api = api
        self.out = out
        self.secret = load_or_create_key(cfg.datadir)
        self.key_address = address_from_pubkey(xonly_pubkey(self.secret))
        self.key_address_text = encode_address(cfg.params.hrp, self.key_address)
        self.state = MinerState.load(cfg.datadir, cfg.network)
        self.state_writer = StateWriter(cfg.datadir)
        self.stats = Stats()
        self.abort = threading.Event()
        self.best_milestone: str | None = None
        self._since_redemption = 0
        self._warned_anchor = False
        self._held_back: tuple[float, str | None] | None = None
        """(since, best milestone then) while D5a holds our peer chain back."""

    # ---- HTTP ----------------------------------------------------------------------------------

    async def get_template(self) -> TemplateResponse:
        while True:
            try:
                if self.state.root is None:
                    t = await self.api.template(register=self.key_address_text)
                else:
                    t = await self.api.template(root=self.state.root)
                self._held_back = None
                return t
            except NodeUnreachable:
                raise
            except ApiError as exc:
                self._check_token(exc)
                if exc.status in (404, 400) and self.state.root is not None:
                    raise MinerError(
                        f"the node does not know our peer chain {self.state.root}: {exc.message}"
                    ) from None
                if exc.code == "wait-for-head" and self._abandon_held_back_chain():
                    continue
                if exc.status >= 500 or exc.status == 409:  # not ready (e.g. syncing): retry
                    log.warning("template not available (%s): %s", exc.status, exc.message)
                    await asyncio.sleep(1)
                    continue
                raise MinerError(f"template request failed ({exc.status}): {exc.body}") from None

    def _abandon_held_back_chain(self, now: float | None = None) -> bool:
        """D5a holds our peer chain back: True (and no root any more, so the next template
        registers a new peer chain) once the best milestone stood still for
        ``new_chain_after_s`` while it did."""
        now = time.monotonic() if now is None else now
        held = self._held_back
        if held is None or held[1] != self.best_milestone:
            self._held_back = (now, self.best_milestone)
            return False
        if now - held[0] < self.cfg.new_chain_after_s or self.state.root is None:
            return False
        log.warning(
            "peer chain %s links a milestone above the best head, and the best milestone has "
            "not moved for %.0f s: registering a new peer chain (PROTOCOL.md §3.4; the old "
            "chain's unredeemed rewards stay with it)",
            self.state.root,
            now - held[0],
        )
        self.state.root = None
        self.state.last_block = None
        self.state_writer.save_now(self.state)
        self._held_back = None
        return True

    def _check_token(self, exc: ApiError) -> None:
        """401/403 after the client re-read the token file: a user error."""
        if exc.status in (401, 403):
            raise MinerError(
                f"the node at {self.cfg.node} rejected the API token ({exc.status})"
            ) from None

    async def submit(self, raw: bytes) -> SubmitBlockResponse | ApiError:
        """The node's answer (``accepted``/``duplicate``, or ``orphan`` held), or its refusal."""
        try:
            return await self.api.submit_block(raw)
        except NodeUnreachable:
            raise
        except ApiError as exc:
            self._check_token(exc)
            return exc

    # ---- events --------------------------------------------------------------------------------

    async def follow_events(self) -> None:
        """Abort the running search on every new milestone or reorganisation (reconnects)."""
        while True:
            try:
                headers = self.api.token.header()
                async with self.api.session.ws_connect(
                    # Milestones and reorganisations only: not a message per tx under load.
                    f"{self.api.events_url}?types=milestone,reorg",
                    headers=headers,
                    heartbeat=20,
                ) as ws:
                    async for msg in ws:
                        if msg.type == aiohttp.WSMsgType.TEXT:
                            self.on_event(json.loads(msg.data))
                        elif msg.type in (aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSED):
                            break
            except (aiohttp.ClientError, OSError) as exc:
                log.warning("events stream lost (%s); reconnecting", exc)
            await asyncio.sleep(1)

    def on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind in ("milestone", "reorg"):
            self.stats.milestones_seen += kind == "milestone"
            ms = event.get("hash") or (event.get("best_milestone") or {}).get("hash")
            if isinstance(ms, str):
                self.best_milestone = ms
            self.abort.set()

    # ---- one block -----------------------------------------------------------------------------

    def _prepare(self, t: TemplateResponse) -> tuple[BlockHeader, list[Transaction], bool]:
        """Header and txs to hash; tx[0] becomes our REDEMPTION when one is due."""
        params = self.cfg.params
        txs = [decode_transaction(bytes.fromhex(x), params) for x in t.txs]
        redeemable = int(t.redeemable)
        anchor = t.anchor
        if anchor is None or not self._redemption_due(t, anchor, redeemable):
            return header_from_template(t), txs, False
        if len(txs) >= params.block_capacity:  # the node leaves room; never push a tx out
            return header_from_template(t), txs, False
        red = build_redemption(
            self.secret, bytes.fromhex(anchor), redeemable, self.cfg.payout, params
        )
        txs = [red, *txs]
        return header_from_template(t, compute_merkle_root(txs)), txs, True

    def _redemption_due(self, t: TemplateResponse, anchor: str, redeemable: int) -> bool:
        """Every ``redeem_every`` blocks, if there is something to claim with our key.

        While our last redemption is not ordered yet, the node still reports the anchor it spent;
        a second one would fail R4(a), so wait, unless ``_REDEEM_RETRY_BLOCKS`` blocks passed (it
        ended INVALID, e.g. after a reorganisation: then sign a new one).
        """
        if t.needs_registration or redeemable <= 0:
            return False
        if self._since_redemption < self.cfg.redeem_every:
            return False
        if t.anchor_address not in (self.key_address_text, self.key_address.hex()):
            if not self._warned_anchor:
                log.warning("anchor key %s is not ours; not redeeming", t.anchor_address)
                self._warned_anchor = True
            return False
        pending = anchor == self.state.last_redemption_anchor
        return not pending or self._since_redemption >= _REDEEM_RETRY_BLOCKS

    async def mine_one(self, pool: HashPool) -> bool:
        """One template to one submission; False when the search went stale."""
        self.abort.clear()
        t = await self.get_template()
        header, txs, redeeming = self._prepare(t)
        prefix = header.encode()[:NONCE_OFFSET]
        target = int(t.target_value)
        start = secrets.randbelow(1 << 62)
        result = await self._search(pool, prefix, target, start)
        self.stats.hashes += result.hashes
        self.stats.search_s += result.seconds
        if result.nonce is None:
            self.stats.stale += 1
            return False
        block = make_block(dataclasses.replace(header, nonce=result.nonce), tip_links_of(t), txs)
        answer = await self.submit(block.raw)
        return self._on_submitted(t, block.id.hex(), answer, redeeming)

    async def _search(self, pool: HashPool, prefix: bytes, target: int, start: int) -> SearchResult:
        """A few nonces in the loop first, then the workers (a thread hop, then theirs)."""
        t0 = time.perf_counter()
        nonce = search_nonce(prefix, target, start, _INLINE_NONCES)
        if nonce is not None:
            return SearchResult(nonce, nonce - start + 1, time.perf_counter() - t0)
        start += _INLINE_NONCES
        return await asyncio.to_thread(pool.search, prefix, target, start=start, abort=self.abort)

    def _on_submitted(
        self,
        t: TemplateResponse,
        block_hash: str,
        answer: SubmitBlockResponse | ApiError,
        redeem: bool,
    ) -> bool:
        if isinstance(answer, ApiError):
            self.stats.rejected += 1
            log.warning(
                "block %s not accepted (%s %s): %s",
                block_hash,
                answer.status,
                answer.code,
                answer.message,
            )
            return False
        if answer.status == "orphan":
            log.info("block %s held as an orphan by the node", block_hash)
            return True
        # accepted or duplicate (200): our peer chain has this block
        durable = t.needs_registration or redeem  # the root, or the anchor we spent
        if t.needs_registration:
            self.state.root = answer.hash
            log.info("registered peer chain %s", self.state.root)
        self.state.last_block = answer.hash
        self.state.blocks += 1
        if redeem:
            self.state.last_redemption_anchor = t.anchor
            self.stats.redemptions += 1
            self._since_redemption = 0
        else:
            self._since_redemption += 1
        if durable:
            self.state_writer.save_now(self.state)
        else:
            self.state_writer.save_soon(self.state)
        self.stats.blocks += 1
        self.stats.milestones += answer.is_milestone
        return True

    # ---- main loop -----------------------------------------------------------------------------

    async def run(self) -> int:
        """Mine until ``blocks`` accepted blocks (or forever); returns the exit status."""
        self.out(
            f"miner: network={self.cfg.network} key={self.key_address_text} "
            f"payout={self.cfg.payout_text} root={self.state.root or '(registering)'} "
            f"threads={self.cfg.threads} ({default_worker_kind()}s) kernel={_kernel_name()}"
        )
        if KERNEL == "python":
            log.warning("C kernel not built: hashing with hashlib in worker processes (slower)")
        events = asyncio.create_task(self.follow_events())
        status_task = asyncio.create_task(self._status_loop())
        pacer = Pacer(self.cfg.rate, burst=default_burst(self.cfg.rate))
        try:
            with HashPool(self.cfg.threads) as pool:
                while self.cfg.blocks is None or self.stats.blocks < self.cfg.blocks:
                    wait = pacer.delay(time.monotonic())
                    if wait > 0:
                        await asyncio.sleep(wait)
                    try:
                        accepted = await self.mine_one(pool)
                    except NodeUnreachable as exc:
                        # the node restarts or is busy: keep the peer chain, try again
                        log.warning("node unreachable (%s); retrying in 1 s", exc.message)
                        await asyncio.sleep(1)
                        continue
                    if accepted:
                        pacer.on_accepted(time.monotonic())
                    elif self.stats.rejected and self.stats.rejected % 5 == 0:
                        await asyncio.sleep(0.5)  # a run of rejections: do not spin
        finally:
            events.cancel()
            status_task.cancel()
            for task in (events, status_task):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.state_writer.aclose()
        self.out(self.stats.line())
        return 0

    async def _status_loop(self) -> None:
        prev = Stats(hashes=0, search_s=0.0)
        while True:
            await asyncio.sleep(self.cfg.status_interval_s)
            self.out(self.stats.line(prev))
            prev = Stats(hashes=self.stats.hashes, search_s=self.stats.search_s)


def _kernel_name() -> str:
    return KERNEL if KERNEL == "python" else f"{KERNEL}/{LANES}"


__all__ = [
    "Miner",
    "MinerConfig",
    "MinerError",
    "MinerState",
    "StateWriter",
    "Stats",
    "build_redemption",
    "header_from_template",
    "load_or_create_key",
]
