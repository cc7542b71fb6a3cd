"""The blocking client: :class:`SyncNodeApi` on urllib (scripts/devnet.py, functional tests).

The same :class:`~apiclient.core.Call` table and errors as :class:`apiclient.aio.NodeApi`; only
the transport differs (no event loop, safe from any thread).
"""

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, final

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

__all__ = ["SyncNodeApi"]

T = TypeVar("T")


@final
class SyncNodeApi:
    """One node's ``/v1`` API, one blocking request per call (as :class:`apiclient.NodeApi`)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        token_file: Path | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = Token(token, token_file)
        self.timeout_s = timeout_s

    def run(self, call: Call[T], timeout_s: float | None = None) -> T:
        """Send one :class:`~apiclient.core.Call` and return its typed result."""
        for attempt in range(2):
            status, body = self._send(call, self.timeout_s if timeout_s is None else timeout_s)
            if status in (401, 403) and call.auth and attempt == 0 and self.token.reload():
                continue
            return decode(call, status, body)
        raise AssertionError("unreachable")  # pragma: no cover

    def text(self, path: str, timeout_s: float | None = None) -> str:
        """A non-JSON GET (``/metrics``, ``/``) as text.

        Raises:
            ApiError: a non-2xx answer, or no answer (NodeUnreachable).
        """
        call = endpoints.raw("GET", path)
        status, raw = self._exchange(call, self.timeout_s if timeout_s is None else timeout_s)
        text = raw.decode(errors="replace")
        if not 200 <= status < 300:
            raise ApiError.from_answer("GET", path, status, text[:200])
        return text

    def _exchange(self, call: Call[Any], timeout_s: float) -> tuple[int, bytes]:
        data = None if call.json is None else json.dumps(call.json).encode()
        req = urllib.request.Request(self.url + call.target, data=data, method=call.method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if call.auth:
            for key, value in self.token.header().items():
                req.add_header(key, value)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return int(resp.status), bytes(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, bytes(exc.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = str(getattr(exc, "reason", "") or exc) or type(exc).__name__
            raise NodeUnreachable(self.url, call.method, call.target, reason) from None

    def _send(self, call: Call[Any], timeout_s: float) -> tuple[int, Any]:
        status, raw = self._exchange(call, timeout_s)
        if call.binary and 200 <= status < 300:
            return status, raw
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            text = raw.decode(errors="replace")[:200]
            if 200 <= status < 300:
                raise ApiError(
                    status, "bad-json", "the answer is not JSON", text, call.method, call.path
                ) from None
            return status, text

    # ---------------------------------------------------------------- typed endpoints
    # Each answer is its model of apiclient.models; one that does not fit raises ApiError
    # ``bad-answer`` (see apiclient.core).

    def status(self, timeout_s: float | None = None) -> M.StatusResponse:
        """``GET /v1/status``."""
        return self.run(endpoints.status(), timeout_s)

    def block(self, block_hash: str) -> M.BlockResponse:
        """``GET /v1/blocks/{hash}``."""
        return self.run(endpoints.block(block_hash))

    def block_raw(self, block_hash: str) -> bytes:
        """``GET /v1/blocks/{hash}/raw``: the canonical block bytes."""
        return self.run(endpoints.block_raw(block_hash))

    def milestones(self, start: int, limit: int) -> list[M.MilestoneItem]:
        """``GET /v1/milestones?start=&limit=``."""
        return self.run(endpoints.milestones(start, limit))

    def level_set(self, height: int) -> list[str]:
        """``GET /v1/milestones/{height}/level-set``: block hashes in total order."""
        return self.run(endpoints.level_set(height))

    def dag(self, start: int, limit: int) -> M.DagResponse:
        """``GET /v1/dag?start=&limit=``."""
        return self.run(endpoints.dag(start, limit))

    def lookup(self, query: str) -> M.LookupResponse:
        """``GET /v1/lookup/{query}``: block, transaction, address or unknown."""
        return self.run(endpoints.lookup(query))

    def tx(self, txid: str) -> M.TxResponse:
        """``GET /v1/txs/{txid}`` (``unknown`` is a 200 answer)."""
        return self.run(endpoints.tx(txid))

    def submit_tx(self, raw: bytes) -> str:
        """``POST /v1/txs``; the txid (202). 400 invalid, 409 conflict/spent, 503 pool full."""
        return self.run(endpoints.submit_tx(raw))

    def submit_tx_batch(self, raws: Sequence[bytes]) -> M.SubmitTxBatchResponse:
        """``POST /v1/txs/batch``: one result per tx, in order (200 unless the body is bad)."""
        return self.run(endpoints.submit_tx_batch(raws))

    def address(self, address: str) -> M.AddressResponse:
        """``GET /v1/addresses/{address}``."""
        return self.run(endpoints.address(address))

    def mempool(self) -> M.MempoolResponse:
        """``GET /v1/mempool``."""
        return self.run(endpoints.mempool())

    def fees(self) -> M.FeesResponse:
        """``GET /v1/fees``: units per byte to be VALID within 1, 3 and 10 milestones."""
        return self.run(endpoints.fees())

    def peers(self) -> list[M.PeerInfo]:
        """``GET /v1/peers``."""
        return self.run(endpoints.peers())

    def template(
        self, *, root: str | None = None, register: str | None = None
    ) -> M.TemplateResponse:
        """``GET /v1/mining/template?root=`` or ``?register=`` (bearer token)."""
        query = {"root": root} if root is not None else {"register": register or ""}
        return self.run(endpoints.template(query))

    def submit_block(self, raw: bytes) -> M.SubmitBlockResponse:
        """``POST /v1/mining/submit`` (bearer token): 200 accepted/duplicate or 202 orphan."""
        return self.run(endpoints.submit_block(raw))

    def admin(self, action: Literal["invalidate", "reconsider"], milestone: str) -> M.AdminResponse:
        """``POST /v1/admin/{action}/{milestone}`` (bearer token)."""
        return self.run(endpoints.admin(action, milestone))
