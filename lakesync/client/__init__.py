"""LakeSync Python client: an offline-first SQLite replica with a durable outbox.

``LakeSyncClient`` (and its asyncio twin ``AsyncLakeSyncClient``) keeps a local copy of a
gateway's tables, applies local writes at once and syncs them over HTTP or WebSocket with
column-level last-writer-wins merging (docs/protocol.md §4). Both run one sans-I/O sync core
(``_core``: effects out, outcomes in) through its asyncio driver (``_drive``), over one
transport per protocol (``AsyncHttpTransport``, ``AsyncWebSocketTransport``). Needs only the
``client`` extra.
"""

from lakesync.client._actions import ActionRecord
from lakesync.client._async import AsyncLakeSyncClient
from lakesync.client._backoff import Backoff
from lakesync.client._client import LakeSyncClient
from lakesync.client._core import Rejection, SyncProgress, SyncProgressHandler, SyncReport
from lakesync.client._store import DeadLetter
from lakesync.client._types import Change, Event, SyncStatus
from lakesync.client._watch import Watch
from lakesync.client.transport import (
    AsyncHttpTransport,
    AsyncTransport,
    AsyncWebSocketTransport,
    HttpTransport,
    Transport,
    WebSocketTransport,
)

__all__ = [
    "ActionRecord",
    "AsyncHttpTransport",
    "AsyncLakeSyncClient",
    "AsyncTransport",
    "AsyncWebSocketTransport",
    "Backoff",
    "Change",
    "DeadLetter",
    "Event",
    "HttpTransport",
    "LakeSyncClient",
    "Rejection",
    "SyncProgress",
    "SyncProgressHandler",
    "SyncReport",
    "SyncStatus",
    "Transport",
    "Watch",
    "WebSocketTransport",
]
