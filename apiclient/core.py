"""The node's HTTP API as data: one :class:`Call` per endpoint, and the one error type.

Sans-I/O: nothing here opens a socket. :mod:`apiclient.aio` (aiohttp) and :mod:`apiclient.sync`
(urllib, for threads and scripts) send a :class:`Call` and turn the answer into its typed result
with :func:`decode`, so paths, query strings, auth and the error shape are written once.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypedDict, TypeVar, cast
from urllib.parse import quote, urlencode

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Answer",
    "ApiError",
    "Call",
    "NodeUnreachable",
    "Token",
    "TxState",
    "TxStatus",
    "decode",
    "endpoints",
]

DEFAULT_TIMEOUT_S = 15.0
T = TypeVar("T")

TxState = Literal["mempool", "pending", "confirmed", "invalid", "unknown"]


class TxStatus(TypedDict):
    """``GET /v1/txs/{txid}``."""

    txid: str
    status: TxState
    block: str | None
    milestone_height: int | None
    confirmations: int
    reason: str | None


class ApiError(Exception):
    """A request that did not get a 2xx JSON answer.

    Attributes:
        status: The HTTP status; 0 when there was no HTTP answer (see :class:`NodeUnreachable`).
        code: ``error.code`` of the node's JSON error body (``"conflict"``, ``"T3"``, ...); '' if
            the body had none.
        message: ``error.message``, else a short description.
        body: The decoded JSON body (or its text when it was not JSON).
        method, path: The request.
    """

    def __init__(
        self, status: int, code: str, message: str, body: Any, method: str, path: str
    ) -> None:
        what = f"HTTP {status} {code}".rstrip() if status else code
        super().__init__(f"{method} {path}: {what}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        self.method = method
        self.path = path

    @classmethod
    def from_answer(cls, method: str, path: str, status: int, body: Any) -> "ApiError":
        """The error of a non-2xx answer whose body is ``{"error": {"code", "message"}}``."""
        code, message = "", str(body)[:200]
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            code = str(err.get("code", ""))
            message = str(err.get("message", ""))
        return cls(status, code, message, body, method, path)


class NodeUnreachable(ApiError):
    """No HTTP answer: refused, reset, timed out (``status`` 0, ``code`` ``"unreachable"``)."""

    def __init__(self, url: str, method: str, path: str, reason: str) -> None:
        super().__init__(0, "unreachable", f"cannot reach {url}: {reason}", None, method, path)
        self.url = url


@dataclass(frozen=True, slots=True)
class Answer:
    """A 2xx status and its decoded JSON body."""

    status: int
    body: Any


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and how to read its 2xx answer."""

    method: str
    path: str
    decode: Callable[[Answer], T]
    json: Any = None
    auth: bool = False
    query: Mapping[str, str | int] = field(default_factory=dict)

    @property
    def target(self) -> str:
        """Path and query string."""
        return self.path + ("?" + urlencode(self.query) if self.query else "")


def decode(call: Call[T], status: int, body: Any) -> T:
    """The typed result of an answer; a non-2xx one raises :class:`ApiError`."""
    if not 200 <= status < 300:
        raise ApiError.from_answer(call.method, call.target, status, body)
    return call.decode(Answer(status, body))


class Token:
    """The bearer token: given, or read from the node's ``api.token`` file (lazily).

    A restarted node writes a new token; :meth:`reload` re-reads the file after a 401/403.
    """

    def __init__(self, token: str | None = None, token_file: Path | None = None) -> None:
        self.file = token_file
        self._value = token

    def header(self) -> dict[str, str]:
        """``{"Authorization": "Bearer ..."}`` (empty without a token)."""
        if self._value is None and self.file is not None:
            self._value = self._read()
        return {"Authorization": f"Bearer {self._value}"} if self._value else {}

    def reload(self) -> bool:
        """Re-read the file; True if it now holds a different token."""
        if self.file is None:
            return False
        fresh = self._read()
        if fresh is None or fresh == self._value:
            return False
        self._value = fresh
        return True

    def _read(self) -> str | None:
        try:
            return self.file.read_text().strip() if self.file is not None else None
        except OSError:
            return None


def _seg(text: str) -> str:
    return quote(text, safe="")


def _dict(a: Answer) -> dict[str, Any]:
    if not isinstance(a.body, dict):
        raise ApiError(a.status, "bad-json", "expected a JSON object", a.body, "", "")
    return cast(dict[str, Any], a.body)


def _list(a: Answer) -> list[Any]:
    if not isinstance(a.body, list):
        raise ApiError(a.status, "bad-json", "expected a JSON array", a.body, "", "")
    return a.body


def _strings(a: Answer) -> list[str]:
    return [str(x) for x in _list(a)]


def _answer(a: Answer) -> Answer:
    return a


def _tx_status(a: Answer) -> TxStatus:
    return cast(TxStatus, _dict(a))


def _txid(a: Answer) -> str:
    return str(_dict(a)["txid"])


class endpoints:
    """One constructor per endpoint of INTERFACES.md's API table."""

    @staticmethod
    def status() -> Call[dict[str, Any]]:
        return Call("GET", "/v1/status", _dict)

    @staticmethod
    def block(block_hash: str) -> Call[dict[str, Any]]:
        return Call("GET", f"/v1/blocks/{_seg(block_hash)}", _dict)

    @staticmethod
    def milestones(start: int, limit: int) -> Call[list[dict[str, Any]]]:
        return Call("GET", "/v1/milestones", _list, query={"start": start, "limit": limit})

    @staticmethod
    def level_set(height: int) -> Call[list[str]]:
        return Call("GET", f"/v1/milestones/{height}/level-set", _strings)

    @staticmethod
    def dag(start: int, limit: int) -> Call[dict[str, Any]]:
        return Call("GET", "/v1/dag", _dict, query={"start": start, "limit": limit})

    @staticmethod
    def tx(txid: str) -> Call[TxStatus]:
        return Call("GET", f"/v1/txs/{_seg(txid)}", _tx_status)

    @staticmethod
    def submit_tx(raw: bytes) -> Call[str]:
        return Call("POST", "/v1/txs", _txid, json={"raw": raw.hex()})

    @staticmethod
    def address(address: str) -> Call[dict[str, Any]]:
        return Call("GET", f"/v1/addresses/{_seg(address)}", _dict)

    @staticmethod
    def mempool() -> Call[dict[str, Any]]:
        return Call("GET", "/v1/mempool", _dict)

    @staticmethod
    def peers() -> Call[list[dict[str, Any]]]:
        return Call("GET", "/v1/peers", _list)

    @staticmethod
    def template(query: Mapping[str, str]) -> Call[dict[str, Any]]:
        """``?root=ROOT`` or ``?register=KEYADDR``."""
        return Call("GET", "/v1/mining/template", _dict, auth=True, query=dict(query))

    @staticmethod
    def submit_block(raw: bytes) -> Call[Answer]:
        """200 accepted or duplicate, 202 orphan held: the status matters, so an Answer."""
        return Call("POST", "/v1/mining/submit", _answer, json={"raw": raw.hex()}, auth=True)

    @staticmethod
    def admin(action: Literal["invalidate", "reconsider"], milestone: str) -> Call[dict[str, Any]]:
        return Call("POST", f"/v1/admin/{action}/{_seg(milestone)}", _dict, auth=True)

    @staticmethod
    def raw(method: str, path: str, json: Any = None, auth: bool = False) -> Call[Any]:
        """Any path (tests probing the API); the decoded body of a 2xx answer."""
        return Call(method, path, lambda a: a.body, json=json, auth=auth)
