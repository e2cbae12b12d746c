"""Small public value types of the client: row changes, sync events, sync status and what a
sync did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from lakesync.delta import RowDelta

__all__ = ["Change", "Event", "EventKind", "Origin", "Rejection", "SyncReport", "SyncStatus"]

Origin = Literal["local", "remote", "realtime"]
EventKind = Literal[
    "synced", "sync_error", "dead_letter", "value_error", "resync", "action_complete"
]


@dataclass(frozen=True, slots=True)
class Change:
    """How one row of the replica changed: visible values before and after (None = absent).

    ``origin`` says where the change came from: a local write, a pulled page, or a realtime
    WebSocket broadcast.
    """

    table: str
    row_id: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    origin: Origin

    @property
    def kind(self) -> Literal["insert", "update", "delete"]:
        """``insert`` when the row appeared, ``delete`` when it vanished, else ``update``."""
        if self.before is None:
            return "insert"
        if self.after is None:
            return "delete"
        return "update"


@dataclass(frozen=True, slots=True)
class Event:
    """Something the sync machinery reports: a finished cycle, an error, a dead-lettered delta,
    a value from the gateway this replica cannot hold (that cell reads null; syncing goes on).

    ``detail`` holds event-specific facts (for ``dead_letter``: ``delta_id``, ``table``,
    ``row_id``, ``code`` and ``error``; for ``value_error``: ``table``, ``row_id``, ``column``,
    ``delta_id`` and ``error``; for ``action_complete``: ``action_id``, ``connector``,
    ``action_type`` and the gateway's ``result``).
    """

    kind: EventKind
    message: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SyncStatus:
    """A snapshot of the client's sync state (see :attr:`LakeSyncClient.status`)."""

    state: Literal["idle", "syncing", "offline", "error", "closed"]
    queue_depth: int
    dead_letters: int
    cursor: int
    last_synced_at: float | None
    last_error: str | None
    auto_sync: bool
    connected: bool


@dataclass(frozen=True, slots=True)
class Rejection:
    """A local change the gateway refused for good during a sync: it was moved to the dead
    letters (``dead_letters()``; ``requeue_dead_letters()`` after fixing the cause)."""

    delta: RowDelta
    """The refused delta (its ``table``, ``row_id`` and ``columns``)."""
    code: str
    """The gateway's error code, e.g. ``FORBIDDEN`` (outside this client's view)."""
    error: str
    """The gateway's message."""

    def __str__(self) -> str:
        return f"{self.delta.table}/{self.delta.row_id}: {self.code} {self.error}"


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one :meth:`LakeSyncClient.sync` did: deltas pulled, pushed and dead-lettered, the
    cursor it ended at, and the changes the gateway refused (``rejected``, oldest first; each
    is one of the ``dead_lettered``)."""

    pulled: int
    pushed: int
    dead_lettered: int
    cursor: int
    rejected: tuple[Rejection, ...] = ()
