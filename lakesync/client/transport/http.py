"""HTTP transport (docs/protocol.md §5): JSON push/pull over httpx, binary checkpoint stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import httpx
import msgspec

from lakesync import hlc as _hlc
from lakesync.client._auth import TokenProvider
from lakesync.client.errors import ConnectionFailedError, ValidationError
from lakesync.client.transport._base import (
    AsyncCheckpoint,
    AsyncTransport,
    PullPage,
    PushResult,
    Received,
    gateway_error,
)
from lakesync.client.transport._bridge import BlockingTransport
from lakesync.delta import CellErrorHandler, RowDelta
from lakesync.status import DEAD_LETTERS_HEADER, OUTBOX_HEADER
from lakesync.wire import (
    FEATURES_HEADER,
    VIEW_EVICTIONS_FEATURE,
    decode_pull_response,
    decode_push_response,
    encode_push,
)
from lakesync.wsframes import decode_response

__all__ = ["AsyncHttpTransport", "HttpTransport"]

HttpClient = httpx.AsyncClient | httpx.Client


class _SchemaList(msgspec.Struct):
    schemas: list[dict[str, Any]]


_SCHEMA_LIST = msgspec.json.Decoder(_SchemaList)


class AsyncHttpTransport(AsyncTransport):
    """Talks to ``{url}/v1/sync/{gateway_id}/…`` with a bearer token; one pooled httpx client.

    ``http`` is the httpx client to send with (for example one over an in-process ASGI app, or
    with a custom transport); it stays the caller's to close. A blocking ``httpx.Client`` is
    called in a worker thread. Without it the transport makes its own ``httpx.AsyncClient``
    with ``timeout`` and :meth:`aclose` closes that.
    """

    def __init__(
        self,
        url: str,
        gateway_id: str,
        tokens: TokenProvider,
        timeout: float = 30.0,
        http: HttpClient | None = None,
    ) -> None:
        self._base = f"{url.rstrip('/')}/v1/sync/{gateway_id}"
        self._tokens = tokens
        self._owns_http = not isinstance(http, httpx.AsyncClient)
        if isinstance(http, httpx.AsyncClient):
            self._http = http
        elif http is None:
            self._http = httpx.AsyncClient(timeout=timeout)
        else:
            self._http = httpx.AsyncClient(transport=_Threaded(http), timeout=timeout)
        self._connected = False
        self._closed = False

    @property
    def connected(self) -> bool:
        """Whether the last request reached the gateway."""
        return self._connected

    async def _send(
        self, method: str, path: str, stream: bool = False, report: bool = False, **kw: Any
    ) -> httpx.Response:
        backlog = {}
        if report and self._backlog is not None:
            # The replica's counts are SQLite reads: off the loop, as the engine's writes are.
            pending, dead = await asyncio.to_thread(self._backlog)
            backlog = {OUTBOX_HEADER: str(pending), DEAD_LETTERS_HEADER: str(dead)}
        for attempt in range(2):
            headers = {
                "Authorization": f"Bearer {self._tokens.token}",
                # This client forgets a row on a view eviction (lakesync.views).
                FEATURES_HEADER: VIEW_EVICTIONS_FEATURE,
                **backlog,
            }
            if "content" in kw:
                headers["Content-Type"] = "application/json"
            try:
                req = self._http.build_request(method, self._base + path, headers=headers, **kw)
                resp = await self._http.send(req, stream=stream)
            except httpx.HTTPError as exc:
                self._connected = False
                raise ConnectionFailedError(f"cannot reach the gateway: {exc}") from exc
            self._connected = True
            if resp.status_code == 401 and attempt == 0 and self._tokens.refreshable:
                await resp.aclose()
                # The token source is the caller's code and may block (it may fetch a token).
                await asyncio.to_thread(self._tokens.refresh)
                continue
            if resp.status_code >= 400 and not (stream and resp.status_code == 404):
                body = await resp.aread()
                await resp.aclose()
                raise gateway_error(resp.status_code, body, resp.headers.get("Retry-After"))
            return resp
        raise AssertionError("unreachable")  # pragma: no cover

    async def push(
        self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int
    ) -> PushResult:
        """POST one batch to ``/push``."""
        body = encode_push(client_id, deltas, last_seen_hlc)
        resp = await self._send("POST", "/push", content=body, report=True)
        server_hlc, accepted = decode_push_response(resp.content)
        return PushResult(server_hlc, accepted)

    async def pull(self, client_id: str, since: int, limit: int) -> PullPage:
        """GET one page from ``/pull``."""
        resp = await self._send(
            "GET", "/pull", params={"since": str(since), "clientId": client_id, "limit": limit},
            report=True,
        )
        deltas, server_hlc, has_more = decode_pull_response(resp.content, self._cell_errors)
        return PullPage(deltas, server_hlc, has_more)

    async def actions(self, client_id: str, actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """POST ``/action``; the results in order."""
        body = msgspec.json.encode({"clientId": client_id, "actions": actions})
        resp = await self._send("POST", "/action", content=body)
        results: list[dict[str, Any]] = msgspec.json.decode(resp.content)["results"]
        return results

    async def schemas(self) -> list[dict[str, Any]] | None:
        """GET ``/schemas``; None from a gateway without the route (404, or a reply that is not
        a schema list: a LakeSync v1 gateway's)."""
        resp = await self._send("GET", "/schemas", stream=True)
        try:
            if resp.status_code == 404:
                return None
            return _SCHEMA_LIST.decode(await resp.aread()).schemas
        except msgspec.DecodeError:
            return None
        finally:
            await resp.aclose()

    async def checkpoint(self) -> AsyncCheckpoint | None:
        """GET ``/checkpoint`` as a stream of ``[uint32 length][SyncResponse]`` frames."""
        resp = await self._send("GET", "/checkpoint", stream=True)
        if resp.status_code == 404:
            await resp.aclose()
            return None
        try:
            server_hlc = _hlc.parse(resp.headers.get("X-Checkpoint-Hlc", ""), "X-Checkpoint-Hlc")
        except ValidationError:
            await resp.aclose()
            raise
        received = Received()
        return AsyncCheckpoint(server_hlc, _frames(resp, self._cell_errors, received), received)

    async def aclose(self) -> None:
        """Close the connection pool, unless it was given to the constructor (idempotent)."""
        if self._owns_http and not self._closed:
            await self._http.aclose()
        self._closed = True


class HttpTransport(BlockingTransport[AsyncHttpTransport]):
    """:class:`AsyncHttpTransport` with blocking calls (same arguments); a client given one
    drives its core on the client's own loop."""

    implementation = AsyncHttpTransport


async def _frames(
    resp: httpx.Response, report: CellErrorHandler | None, received: Received
) -> AsyncGenerator[list[RowDelta], None]:
    """Split a checkpoint body into its frames' deltas as the bytes arrive (counted in
    ``received``)."""
    buf = bytearray()
    try:
        async for chunk in resp.aiter_bytes():
            buf += chunk
            received.bytes += len(chunk)
            while len(buf) >= 4:
                size = int.from_bytes(buf[:4], "big")
                if len(buf) < 4 + size:
                    break
                frame = bytes(buf[4 : 4 + size])
                del buf[: 4 + size]
                yield decode_response(frame, report)[0]
    except httpx.HTTPError as exc:
        raise ConnectionFailedError(f"checkpoint download broke off: {exc}") from exc
    finally:
        await resp.aclose()
    if buf:
        raise ConnectionFailedError("checkpoint stream ended inside a frame")


_ENCODING = frozenset({"content-encoding", "content-length", "transfer-encoding"})


class _Threaded(httpx.AsyncBaseTransport):
    """Sends an async client's requests with a caller's blocking ``httpx.Client``, in a worker
    thread (the caller keeps the client; closing this one leaves it open)."""

    def __init__(self, http: httpx.Client) -> None:
        self._http = http

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        blocking = httpx.Request(request.method, request.url, headers=request.headers, content=body)

        def send() -> httpx.Response:
            resp = self._http.send(blocking)
            # The body comes decoded: drop the headers that described its encoding.
            headers = [
                (k, v) for k, v in resp.headers.multi_items() if k.lower() not in _ENCODING
            ]
            return httpx.Response(resp.status_code, headers=headers, content=resp.content)

        return await asyncio.to_thread(send)
