"""The sync WebSocket (docs/protocol.md §9) on ``/v1/sync/{gw}/ws`` and ``/sync/{gw}/ws``.

Binary frames only: 0x01 SyncPush, 0x02 SyncPull in; untagged SyncResponse replies and 0x03
broadcasts out. Close codes: 4401 bad token, 4403 forbidden (wrong gateway or clientId), 4400
invalid frame, 4409/4422/4429/4503 for the protocol errors of a push, 1003 text frame, 1008 a
page of an origin ``server.cors_origins`` does not allow (checked before the token) or frame
rate exceeded, 1013 a connection cap reached (all, the gateway's or the client's; see
:class:`~lakesync.api.services.hub.Hub`) or receiver too slow, 1001 gateway shutting down.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from litestar import WebSocket, websocket
from litestar.exceptions import WebSocketDisconnect
from litestar.params import FromPath

from lakesync.api.auth import authenticate
from lakesync.api.cors import OriginPolicy
from lakesync.api.errors import client_message
from lakesync.api.services.hub import Connection
from lakesync.api.services.initial_sync import check_cursor
from lakesync.api.services.limits import TokenBucket
from lakesync.api.services.sync import SyncService
from lakesync.errors import LakeSyncError
from lakesync.hlc import parse_cursor
from lakesync.wire import FEATURES_HEADER, knows_view_evictions
from lakesync.wsframes import SyncPushMsg, decode_client_frame, encode_response

__all__ = ["sync_socket"]

log = logging.getLogger("lakesync.gateway")


def _close_code(exc: LakeSyncError) -> int:
    return 4000 + exc.status


def _reason(message: str) -> str:
    # A close reason is at most 123 bytes of UTF-8.
    return message.encode()[:120].decode(errors="ignore")


def _refusal(service: SyncService, gw: str, sub: str) -> tuple[int, str] | None:
    """The close code and reason for a handshake the gateway turns away, if it does."""
    if service.draining:
        return 1001, "gateway shutting down"
    reason = service.hub.refusal(gw, sub)
    return None if reason is None else (1013, _reason(reason))


@websocket(["/v1/sync/{gw:str}/ws", "/sync/{gw:str}/ws"])
async def sync_socket(socket: WebSocket, gw: FromPath[str]) -> None:  # type: ignore[type-arg]
    """Authenticate, register with the hub, then serve push/pull frames until closed."""
    service: SyncService = socket.app.state.service
    origins: OriginPolicy = socket.app.state.origins
    refused_origin = origins.refusal(socket.headers, socket.scope["scheme"])
    if refused_origin is not None:
        await socket.accept()
        await socket.close(1008, _reason(refused_origin))
        return
    try:
        claims = authenticate(socket, gw)
    except LakeSyncError as exc:
        await socket.accept()
        await socket.close(_close_code(exc), _reason(exc.message))
        return
    sub = str(claims["sub"])
    refused = _refusal(service, gw, sub)  # before the store call, to spare it
    stamp = 0
    bound: Mapping[str, Any] = claims
    if refused is None:
        stamp, bound = await service.view(gw, claims)
        refused = _refusal(service, gw, sub)  # again: others may have joined meanwhile
    if refused is not None:
        await socket.accept()
        await socket.close(*refused)
        return

    async def close(code: int, reason: str) -> None:
        with contextlib.suppress(Exception):
            await socket.close(code, _reason(reason))

    # No await since the last check: concurrent handshakes cannot overshoot a cap.
    # A client says in its handshake whether it knows view evictions (lakesync.views).
    whole_rows = not knows_view_evictions(socket.headers.get(FEATURES_HEADER))
    conn = Connection(gw, sub, bound, stamp, socket.send_bytes, close, whole_rows)
    service.hub.add(conn)
    try:
        await socket.accept()
    except Exception:
        await service.hub.remove(conn)
        raise
    conn.accepted.set()
    rate = service.settings.ws_rate_limit
    bucket = TokenBucket(rate, max(2 * rate, 5.0)) if rate > 0 else None
    try:
        while True:
            message = await socket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            if not isinstance(data, bytes):
                await close(1003, "binary frames only (docs/protocol.md §9)")
                return
            if bucket is not None and bucket.take() > 0:
                await close(1008, "frame rate limit exceeded")
                return
            try:
                frame = decode_client_frame(data)
                service.check_client(claims, frame.client_id or sub)
                if isinstance(frame, SyncPushMsg):
                    result = await service.push(
                        gw, claims, sub, frame.deltas, origin=conn, whole_rows=whole_rows
                    )
                    reply = encode_response([], result.server_hlc, False)
                else:
                    limit = frame.max_deltas or service.settings.pull_default_limit
                    limit = min(limit, service.settings.pull_max_limit)
                    since = parse_cursor(frame.since_hlc, "since_hlc")
                    page = await service.pull(gw, claims, since, limit, whole_rows=whole_rows)
                    await check_cursor(service, gw, sub, since, page, whole_rows=whole_rows)
                    reply = encode_response(page.deltas, page.server_hlc, page.has_more)
            except LakeSyncError as exc:
                await close(_close_code(exc), client_message(exc))
                return
            except RecursionError:
                await close(4400, "input is nested too deeply")
                return
            await conn.reply(reply)
    except WebSocketDisconnect:
        return
    finally:
        await service.hub.remove(conn)
