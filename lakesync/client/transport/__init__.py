"""Transports between a client and a gateway, all behind the :class:`Transport` interface."""

from lakesync.client.transport._base import Checkpoint, PullPage, PushResult, Transport
from lakesync.client.transport.http import HttpTransport
from lakesync.client.transport.websocket import WebSocketTransport

__all__ = [
    "Checkpoint",
    "HttpTransport",
    "PullPage",
    "PushResult",
    "Transport",
    "WebSocketTransport",
]
