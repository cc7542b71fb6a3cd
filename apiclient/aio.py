"""The asyncio client: :class:`NodeApi` on an aiohttp session (wallet, load generator, miner)."""

import json
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TypeVar, final

import aiohttp

from apiclient import models as M
from apiclient.core import (
    DEFAULT_TIMEOUT_S,
    ApiError,
    Call,
    NodeUnreachable,
    Token,
    decode,
    endpoints,
)

__all__ = ["NodeApi"]

T = TypeVar("T")


@final
class NodeApi:
    """One node's ``/v1`` API (use as an async context manager, or pass your own ``session``).

    Every method raises :class:`~apiclient.core.ApiError` for a non-2xx answer and
    :class:`~apiclient.core.NodeUnreachable` (an ApiError, status 0) when there is no answer.
    An authenticated call answered 401/403 re-reads ``token_file`` once (a restarted node wrote
    a new token) and retries.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        token_file: Path | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        connections: int = 64,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = Token(token, token_file)
        self._timeout_s = timeout_s
        self._connections = connections
        self._session = session
        self._owns_session = session is None

    async def __aenter__(self) -> Self:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections),
                timeout=aiohttp.ClientTimeout(total=self._timeout_s, connect=5),
            )
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session if this client opened it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The aiohttp session (e.g. for the ``/v1/events`` WebSocket)."""
        if self._session is None:
            raise RuntimeError("NodeApi used outside 'async with'")
        return self._session

    @property
    def events_url(self) -> str:
        """URL of the ``/v1/events`` WebSocket."""
        return self.url + "/v1/events"

    async def run(self, call: Call[T]) -> T:
        """Send one :class:`~apiclient.core.Call` and return its typed result."""
        for attempt in range(2):
            status, body = await self._send(call)
            if status in (401, 403) and call.auth and attempt == 0 and self.token.reload():
                continue
            return decode(call, status, body)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _send(self, call: Call[Any]) -> tuple[int, Any]:
        headers = self.token.header() if call.auth else {}
        try:
            async with self.session.request(
                call.method,
                self.url + call.path,
                params={k: str(v) for k, v in call.query.items()} or None,
                json=call.json,
                headers=headers,
            ) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            reason = str(exc) or type(exc).__name__
            raise NodeUnreachable(self.url, call.method, call.target, reason) from None
        if call.binary and 200 <= status < 300:
            return status, raw
        text = raw.decode(errors="replace")
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            if 200 <= status < 300:
                raise ApiError(
                    status, "bad-json", "the answer is not JSON", text[:200], call.method, call.path
                ) from None
            return status, text[:200]

    # ---------------------------------------------------------------- typed endpoints
    # Each answer is its model of apiclient.models; one that does not fit raises ApiError
    # ``bad-answer`` (see apiclient.core).

    async def status(self) -> M.StatusResponse:
        """``GET /v1/status``."""
        return await self.run(endpoints.status())

    async def block(self, block_hash: str) -> M.BlockResponse:
        """``GET /v1/blocks/{hash}``."""
        return await self.run(endpoints.block(block_hash))

    async def block_raw(self, block_hash: str) -> bytes:
        """``GET /v1/blocks/{hash}/raw``: the canonical block bytes."""
        return await self.run(endpoints.block_raw(block_hash))

    async def milestones(self, start: int, limit: int) -> list[M.MilestoneItem]:
        """``GET /v1/milestones?start=&limit=``."""
        return await self.run(endpoints.milestones(start, limit))

    async def level_set(self, height: int) -> list[str]:
        """``GET /v1/milestones/{height}/level-set``: block hashes in total order."""
        return await self.run(endpoints.level_set(height))

    async def dag(self, start: int, limit: int) -> M.DagResponse:
        """``GET /v1/dag?start=&limit=``."""
        return await self.run(endpoints.dag(start, limit))

    async def lookup(self, query: str) -> M.LookupResponse:
        """``GET /v1/lookup/{query}``: block, transaction, address or unknown."""
        return await self.run(endpoints.lookup(query))

    async def tx(self, txid: str) -> M.TxResponse:
        """``GET /v1/txs/{txid}`` (``unknown`` is a 200 answer)."""
        return await self.run(endpoints.tx(txid))

    async def submit_tx(self, raw: bytes) -> str:
        """``POST /v1/txs``; the txid (202). 400 invalid, 409 conflict/spent, 503 pool full."""
        return await self.run(endpoints.submit_tx(raw))

    async def submit_tx_batch(self, raws: Sequence[bytes]) -> M.SubmitTxBatchResponse:
        """``POST /v1/txs/batch``: one result per tx, in order (200 unless the body is bad)."""
        return await self.run(endpoints.submit_tx_batch(raws))

    async def address(self, address: str) -> M.AddressResponse:
        """``GET /v1/addresses/{address}``."""
        return await self.run(endpoints.address(address))

    async def mempool(self) -> M.MempoolResponse:
        """``GET /v1/mempool``."""
        return await self.run(endpoints.mempool())

    async def fees(self) -> M.FeesResponse:
        """``GET /v1/fees``: units per byte to be VALID within 1, 3 and 10 milestones."""
        return await self.run(endpoints.fees())

    async def peers(self) -> list[M.PeerInfo]:
        """``GET /v1/peers``."""
        return await self.run(endpoints.peers())

    async def template(
        self, *, root: str | None = None, register: str | None = None
    ) -> M.TemplateResponse:
        """``GET /v1/mining/template?root=`` or ``?register=`` (bearer token)."""
        query = {"root": root} if root is not None else {"register": register or ""}
        return await self.run(endpoints.template(query))

    async def submit_block(self, raw: bytes) -> M.SubmitBlockResponse:
        """``POST /v1/mining/submit`` (bearer token): 200 accepted/duplicate or 202 orphan."""
        return await self.run(endpoints.submit_block(raw))

    async def admin(
        self, action: Literal["invalidate", "reconsider"], milestone: str
    ) -> M.AdminResponse:
        """``POST /v1/admin/{action}/{milestone}`` (bearer token)."""
        return await self.run(endpoints.admin(action, milestone))
