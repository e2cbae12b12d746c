"""Transports between a client and a gateway.

The asyncio core (:class:`AsyncTransport`: :class:`AsyncHttpTransport`,
:class:`AsyncWebSocketTransport`) is what both clients run on; :class:`HttpTransport` and
:class:`WebSocketTransport` are the same transports with blocking calls (:class:`Transport`).
"""

from lakesync.client.transport._base import (
    AsyncCheckpoint,
    AsyncTransport,
    Checkpoint,
    PullPage,
    PushResult,
    Received,
    Transport,
)
from lakesync.client.transport.http import AsyncHttpTransport, HttpTransport
from lakesync.client.transport.websocket import AsyncWebSocketTransport, WebSocketTransport

__all__ = [
    "AsyncCheckpoint",
    "AsyncHttpTransport",
    "AsyncTransport",
    "AsyncWebSocketTransport",
    "Checkpoint",
    "HttpTransport",
    "PullPage",
    "PushResult",
    "Received",
    "Transport",
    "WebSocketTransport",
]
