"""The node's HTTP API as data: one :class:`Call` per endpoint, and the one error type.

Sans-I/O: nothing here opens a socket. :mod:`apiclient.aio` (aiohttp) and :mod:`apiclient.sync`
(urllib, for threads and scripts) send a :class:`Call` and turn the answer into its typed result
with :func:`decode`, so paths, query strings, auth and the error shape are written once.

Every answer is parsed into the pydantic model the node answers with (:mod:`apiclient.models`,
the one schema of the API). A client is lenient where the node is strict: fields a newer node
adds are dropped (INTERFACES.md lets the API add fields), while a missing field or a wrong type
raises :class:`ApiError` with code ``bad-answer``.
"""

import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, Union, get_args, get_origin
from urllib.parse import quote, urlencode

from pydantic import BaseModel, TypeAdapter, ValidationError

from apiclient import models as M

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Answer",
    "ApiError",
    "Call",
    "NodeUnreachable",
    "Token",
    "TxState",
    "decode",
    "endpoints",
    "reader",
]

DEFAULT_TIMEOUT_S = 15.0
T = TypeVar("T")

TxState = Literal["mempool", "pending", "confirmed", "invalid", "unknown"]
"""``status`` of ``GET /v1/txs/{txid}`` (:class:`apiclient.models.TxResponse`)."""


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
    """A 2xx status and its decoded JSON body (the bytes themselves for a ``binary`` call)."""

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
    binary: bool = False
    """A 2xx answer is bytes, not JSON (``GET /v1/blocks/{hash}/raw``); errors are JSON."""

    @property
    def target(self) -> str:
        """Path and query string."""
        return self.path + ("?" + urlencode(self.query) if self.query else "")


def decode(call: Call[T], status: int, body: Any) -> T:
    """The typed result of an answer; a non-2xx one, or one that does not fit the endpoint's
    model (``bad-answer``), raises :class:`ApiError`."""
    if not 200 <= status < 300:
        raise ApiError.from_answer(call.method, call.target, status, body)
    try:
        return call.decode(Answer(status, body))
    except ApiError as exc:
        if exc.method:
            raise
        # a reader's bad-answer names no request: this one
        raise ApiError(
            exc.status, exc.code, exc.message, exc.body, call.method, call.target
        ) from None


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


def _known_fields(model: type[BaseModel], data: Any) -> Any:
    """``data`` without the keys ``model`` does not declare, at every depth (a newer node's
    fields), when ``model`` forbids extra keys; anything else is left for validation to judge."""
    if not isinstance(data, dict) or model.model_config.get("extra") != "forbid":
        return data
    fields = {field.alias or name: field for name, field in model.model_fields.items()}
    return {k: _known(fields[k].annotation, v) for k, v in data.items() if k in fields}


def _known(annotation: Any, value: Any) -> Any:
    """:func:`_known_fields` for a value of a field annotated ``annotation``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _known_fields(annotation, value)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is list and args and isinstance(value, list):
        return [_known(args[0], v) for v in value]
    if origin in (Union, types.UnionType) and isinstance(value, dict):
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        return _known_fields(models[0], value) if len(models) == 1 else value
    return value


def reader(schema: type[T]) -> Callable[[Answer], T]:
    """How to read a 2xx body as ``schema`` (a model or a ``list`` of one), extra fields dropped.

    The reader raises :class:`ApiError` ``bad-answer`` when the body does not fit the schema.
    """
    adapter = TypeAdapter(schema)
    name = getattr(schema, "__name__", None) or str(schema)

    def read(a: Answer) -> T:
        try:
            return adapter.validate_python(_known(schema, a.body))
        except ValidationError as exc:
            where = "; ".join(
                f"{'.'.join(str(x) for x in e['loc']) or 'body'}: {e['msg']}"
                for e in exc.errors()[:3]
            )
            message = f"the answer does not fit {name}: {where}"
            raise ApiError(a.status, "bad-answer", message, a.body, "", "") from None

    return read


_STATUS = reader(M.StatusResponse)
_BLOCK = reader(M.BlockResponse)
_MILESTONES = reader(list[M.MilestoneItem])
_HASHES = reader(list[str])
_DAG = reader(M.DagResponse)
_LOOKUP = reader(M.LookupResponse)
_TX = reader(M.TxResponse)
_SUBMIT_TX = reader(M.SubmitTxResponse)
_SUBMIT_TX_BATCH = reader(M.SubmitTxBatchResponse)
_ADDRESS = reader(M.AddressResponse)
_MEMPOOL = reader(M.MempoolResponse)
_FEES = reader(M.FeesResponse)
_PEERS = reader(list[M.PeerInfo])
_TEMPLATE = reader(M.TemplateResponse)
_SUBMIT_BLOCK = reader(M.SubmitBlockResponse)
_ADMIN = reader(M.AdminResponse)


def _txid(a: Answer) -> str:
    return _SUBMIT_TX(a).txid


def _bytes(a: Answer) -> bytes:
    if not isinstance(a.body, bytes):
        raise ApiError(a.status, "bad-answer", "the answer is not bytes", a.body, "", "")
    return a.body


class endpoints:
    """One constructor per endpoint of INTERFACES.md's API table, each read into its model."""

    @staticmethod
    def status() -> Call[M.StatusResponse]:
        return Call("GET", "/v1/status", _STATUS)

    @staticmethod
    def block(block_hash: str) -> Call[M.BlockResponse]:
        return Call("GET", f"/v1/blocks/{_seg(block_hash)}", _BLOCK)

    @staticmethod
    def block_raw(block_hash: str) -> Call[bytes]:
        """The canonical block bytes (``application/octet-stream``)."""
        return Call("GET", f"/v1/blocks/{_seg(block_hash)}/raw", _bytes, binary=True)

    @staticmethod
    def milestones(start: int, limit: int) -> Call[list[M.MilestoneItem]]:
        return Call("GET", "/v1/milestones", _MILESTONES, query={"start": start, "limit": limit})

    @staticmethod
    def level_set(height: int) -> Call[list[str]]:
        return Call("GET", f"/v1/milestones/{height}/level-set", _HASHES)

    @staticmethod
    def dag(start: int, limit: int) -> Call[M.DagResponse]:
        return Call("GET", "/v1/dag", _DAG, query={"start": start, "limit": limit})

    @staticmethod
    def lookup(query: str) -> Call[M.LookupResponse]:
        """What the explorer's search string names (``unknown`` is a 200 answer)."""
        return Call("GET", f"/v1/lookup/{_seg(query)}", _LOOKUP)

    @staticmethod
    def tx(txid: str) -> Call[M.TxResponse]:
        return Call("GET", f"/v1/txs/{_seg(txid)}", _TX)

    @staticmethod
    def submit_tx(raw: bytes) -> Call[str]:
        """The txid of the 202 answer (:class:`~apiclient.models.SubmitTxResponse`)."""
        return Call("POST", "/v1/txs", _txid, json={"raw": raw.hex()})

    @staticmethod
    def submit_tx_batch(raws: Sequence[bytes]) -> Call[M.SubmitTxBatchResponse]:
        """One result per tx, in order; each ``status`` is what ``POST /v1/txs`` would answer."""
        return Call(
            "POST", "/v1/txs/batch", _SUBMIT_TX_BATCH, json={"raw": [r.hex() for r in raws]}
        )

    @staticmethod
    def address(address: str) -> Call[M.AddressResponse]:
        return Call("GET", f"/v1/addresses/{_seg(address)}", _ADDRESS)

    @staticmethod
    def mempool() -> Call[M.MempoolResponse]:
        return Call("GET", "/v1/mempool", _MEMPOOL)

    @staticmethod
    def fees() -> Call[M.FeesResponse]:
        return Call("GET", "/v1/fees", _FEES)

    @staticmethod
    def peers() -> Call[list[M.PeerInfo]]:
        return Call("GET", "/v1/peers", _PEERS)

    @staticmethod
    def template(query: Mapping[str, str]) -> Call[M.TemplateResponse]:
        """``?root=ROOT`` or ``?register=KEYADDR``."""
        return Call("GET", "/v1/mining/template", _TEMPLATE, auth=True, query=dict(query))

    @staticmethod
    def submit_block(raw: bytes) -> Call[M.SubmitBlockResponse]:
        """200 ``accepted``/``duplicate`` or 202 ``orphan`` (the answer's ``status`` says which)."""
        return Call("POST", "/v1/mining/submit", _SUBMIT_BLOCK, json={"raw": raw.hex()}, auth=True)

    @staticmethod
    def admin(action: Literal["invalidate", "reconsider"], milestone: str) -> Call[M.AdminResponse]:
        return Call("POST", f"/v1/admin/{action}/{_seg(milestone)}", _ADMIN, auth=True)

    @staticmethod
    def raw(method: str, path: str, json: Any = None, auth: bool = False) -> Call[Any]:
        """Any path (tests probing the API); the decoded body of a 2xx answer, unchecked."""
        return Call(method, path, lambda a: a.body, json=json, auth=auth)
