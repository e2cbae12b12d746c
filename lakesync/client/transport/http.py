"""HTTP transport (docs/protocol.md §5): JSON push/pull over httpx, binary checkpoint stream."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import msgspec

from lakesync import hlc as _hlc
from lakesync.client._auth import TokenProvider
from lakesync.client.errors import ConnectionFailedError, ValidationError
from lakesync.client.transport._base import (
    Checkpoint,
    PullPage,
    PushResult,
    Transport,
    gateway_error,
)
from lakesync.delta import CellErrorHandler, RowDelta
from lakesync.wire import (
    FEATURES_HEADER,
    VIEW_EVICTIONS_FEATURE,
    decode_pull_response,
    decode_push_response,
    encode_push,
)
from lakesync.wsframes import decode_response

__all__ = ["HttpTransport"]


class HttpTransport(Transport):
    """Talks to ``{url}/v1/sync/{gateway_id}/…`` with a bearer token; one pooled httpx client.

    ``http`` is the httpx client to send with (for example one over an in-process ASGI app, or
    with a custom transport); it stays the caller's to close. Without it the transport makes
    its own with ``timeout`` and :meth:`close` closes that.
    """

    def __init__(
        self,
        url: str,
        gateway_id: str,
        tokens: TokenProvider,
        timeout: float = 30.0,
        http: httpx.Client | None = None,
    ) -> None:
        self._base = f"{url.rstrip('/')}/v1/sync/{gateway_id}"
        self._tokens = tokens
        self._owns_http = http is None
        self._http = httpx.Client(timeout=timeout) if http is None else http
        self._connected = False

    @property
    def connected(self) -> bool:
        """Whether the last request reached the gateway."""
        return self._connected

    def _send(self, method: str, path: str, stream: bool = False, **kw: Any) -> httpx.Response:
        for attempt in range(2):
            headers = {
                "Authorization": f"Bearer {self._tokens.token}",
                # This client forgets a row on a view eviction (lakesync.views).
                FEATURES_HEADER: VIEW_EVICTIONS_FEATURE,
            }
            if "content" in kw:
                headers["Content-Type"] = "application/json"
            try:
                req = self._http.build_request(method, self._base + path, headers=headers, **kw)
                resp = self._http.send(req, stream=stream)
            except httpx.HTTPError as exc:
                self._connected = False
                raise ConnectionFailedError(f"cannot reach the gateway: {exc}") from exc
            self._connected = True
            if resp.status_code == 401 and attempt == 0 and self._tokens.refreshable:
                resp.close()
                self._tokens.refresh()
                continue
            if resp.status_code >= 400 and not (stream and resp.status_code == 404):
                body = resp.read()
                resp.close()
                raise gateway_error(resp.status_code, body, resp.headers.get("Retry-After"))
            return resp
        raise AssertionError("unreachable")  # pragma: no cover

    def push(self, client_id: str, deltas: Sequence[RowDelta], last_seen_hlc: int) -> PushResult:
        """POST one batch to ``/push``."""
        resp = self._send("POST", "/push", content=encode_push(client_id, deltas, last_seen_hlc))
        server_hlc, accepted = decode_push_response(resp.content)
        return PushResult(server_hlc, accepted)

    def pull(self, client_id: str, since: int, limit: int) -> PullPage:
        """GET one page from ``/pull``."""
        resp = self._send(
            "GET", "/pull", params={"since": str(since), "clientId": client_id, "limit": limit}
        )
        deltas, server_hlc, has_more = decode_pull_response(resp.content, self._cell_errors)
        return PullPage(deltas, server_hlc, has_more)

    def actions(self, client_id: str, actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """POST ``/action``; the results in order."""
        body = msgspec.json.encode({"clientId": client_id, "actions": actions})
        resp = self._send("POST", "/action", content=body)
        results: list[dict[str, Any]] = msgspec.json.decode(resp.content)["results"]
        return results

    def checkpoint(self) -> Checkpoint | None:
        """GET ``/checkpoint`` as a stream of ``[uint32 length][SyncResponse]`` frames."""
        resp = self._send("GET", "/checkpoint", stream=True)
        if resp.status_code == 404:
            resp.close()
            return None
        try:
            server_hlc = _hlc.parse(resp.headers.get("X-Checkpoint-Hlc", ""), "X-Checkpoint-Hlc")
        except ValidationError:
            resp.close()
            raise
        return Checkpoint(server_hlc, _frames(resp, self._cell_errors))

    def close(self) -> None:
        """Close the connection pool, unless it was given to the constructor."""
        if self._owns_http:
            self._http.close()


def _frames(resp: httpx.Response, report: CellErrorHandler | None) -> Iterator[list[RowDelta]]:
    """Split a checkpoint body into its frames' deltas as the bytes arrive."""
    buf = bytearray()
    try:
        for chunk in resp.iter_bytes():
            buf += chunk
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
        resp.close()
    if buf:
        raise ConnectionFailedError("checkpoint stream ended inside a frame")
