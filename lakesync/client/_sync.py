"""One sync cycle: pull every page (or a checkpoint first), push the whole outbox, then pull
again if the push stored anything.

The engine owns no I/O of its own: it moves deltas between a :class:`LocalStore` and a
:class:`Transport`, serialises cycles, retries transient failures with backoff and
dead-letters deltas the gateway refuses for good.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from lakesync.client._backoff import Backoff, is_retryable, rejects_entries
from lakesync.client._store import LocalStore, OutboxEntry
from lakesync.client._types import Change, Event
from lakesync.client.errors import (
    CursorExpiredError,
    LakeSyncError,
    RateLimitedError,
    SyncFailedError,
)
from lakesync.client.transport import Transport
from lakesync.delta import RowDelta
from lakesync.hlc import HLC

__all__ = ["SyncEngine", "SyncReport"]

# The gateway accepts at most 1 MiB per push body; stay well under it (JSON adds framing).
_PUSH_MAX_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one :meth:`SyncEngine.sync` did."""

    pulled: int
    pushed: int
    dead_lettered: int
    cursor: int


class SyncEngine:
    """Runs sync cycles between one replica and one gateway."""

    def __init__(
        self,
        store: LocalStore,
        transport: Transport,
        clock: HLC,
        client_id: str,
        gateway_id: str,
        *,
        notify: Callable[[list[Change]], None],
        emit: Callable[[Event], None],
        backoff: Backoff,
        pull_limit: int = 1000,
        push_batch: int = 1000,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.transport = transport
        self.clock = clock
        self.client_id = client_id
        self.gateway_id = gateway_id
        self._notify = notify
        self._emit = emit
        self.backoff = backoff
        self.pull_limit = pull_limit
        self.push_batch = push_batch
        self._sleep = sleep
        self._cycle = threading.Lock()
        self._checkpoint_absent = False

    # -- public -----------------------------------------------------------------------------

    def sync(self, retries: int | None = None) -> SyncReport:
        """Pull, push, and pull again after a push, retrying transient failures with backoff.

        Progress made before a failure (applied pages, acknowledged batches) is kept. Raises the
        gateway's error for a non-retryable failure (e.g. ``AuthError``) and
        :class:`SyncFailedError` once ``retries`` (default: the backoff's ``max_retries``) run out.
        """
        limit = self.backoff.max_retries if retries is None else retries
        attempt = 0
        while True:
            try:
                report = self.sync_once()
            except LakeSyncError as exc:
                self._emit(Event("sync_error", str(exc), {"code": exc.code}))
                if not is_retryable(exc):
                    raise
                if attempt >= limit:
                    raise SyncFailedError(
                        f"sync gave up after {attempt + 1} attempts: {exc}", exc
                    ) from exc
                delay = self.backoff.delay(attempt)
                if isinstance(exc, RateLimitedError):
                    delay = max(delay, exc.retry_after)
                self._sleep(delay)
                attempt += 1
                continue
            self._emit(
                Event(
                    "synced",
                    f"pulled {report.pulled}, pushed {report.pushed}",
                    {"pulled": report.pulled, "pushed": report.pushed, "cursor": report.cursor},
                )
            )
            return report

    def sync_once(self) -> SyncReport:
        """One pull-push-pull cycle without retries."""
        with self._cycle:
            pulled = self._pull_all()
            pushed, dead = self._push_all()
            if pushed:
                # What the push did to this replica's view comes back in a pull (a row it gave
                # away leaves it): take it in this cycle, not the next.
                pulled += self._pull_all()
            return SyncReport(pulled, pushed, dead, self.store.cursor(self.gateway_id))

    def pull(self) -> int:
        """Pull every page (one cycle's first half, no retries); returns deltas applied."""
        with self._cycle:
            return self._pull_all()

    def push(self) -> tuple[int, int]:
        """Push the whole outbox (no retries); returns ``(acknowledged, dead-lettered)``."""
        with self._cycle:
            return self._push_all()

    def apply_broadcast(self, deltas: list[RowDelta]) -> None:
        """Apply realtime deltas at once; the cursor stays, so the next pull re-checks them."""
        changes = self.store.apply_remote(deltas, "realtime", self.clock)
        self._notify(changes)

    # -- pull -------------------------------------------------------------------------------

    def _pull_all(self) -> int:
        cursor = self.store.cursor(self.gateway_id)
        applied = 0
        if cursor == 0 and not self._checkpoint_absent:
            applied, cursor = self._load_checkpoint()
        try:
            return applied + self._pull_pages(cursor)
        except CursorExpiredError as exc:
            # Offline for longer than the gateway keeps its hot log: start over from its
            # checkpoint (pending writes stay in the outbox and keep winning), then pull on.
            self._emit(Event("resync", str(exc), {"cursor": cursor}))
            applied, cursor = self._load_checkpoint(resync=True)
            if self._checkpoint_absent:
                raise
            return applied + self._pull_pages(cursor)

    def _pull_pages(self, cursor: int) -> int:
        applied = 0
        page = self.transport.pull(self.client_id, cursor, self.pull_limit)
        # While a page is applied the next one is already on its way (its cursor is known as
        # soon as the reply arrives), so network and SQLite work overlap on long pulls.
        with ThreadPoolExecutor(1, thread_name_prefix="lakesync-pull") as prefetch:
            while True:
                stalled = page.server_hlc <= cursor and not page.deltas
                more = page.has_more and not stalled
                following = (
                    prefetch.submit(
                        self.transport.pull, self.client_id, page.server_hlc, self.pull_limit
                    )
                    if more
                    else None
                )
                # Page and cursor commit together: a crash leaves both at the previous page.
                changes = self.store.apply_remote(
                    page.deltas, "remote", self.clock, cursor=(self.gateway_id, page.server_hlc)
                )
                applied += len(page.deltas)
                self._notify(changes)
                cursor = max(cursor, page.server_hlc)
                if following is None:
                    return applied
                page = following.result()

    def _load_checkpoint(self, resync: bool = False) -> tuple[int, int]:
        """Apply the gateway's checkpoint and move the cursor to its position. A ``resync``
        (the cursor expired) also forgets every row the checkpoint does not send."""
        checkpoint = self.transport.checkpoint()
        if checkpoint is None:
            self._checkpoint_absent = True
            return 0, 0
        self._checkpoint_absent = False
        if resync:
            self.store.begin_resync()
        applied = 0
        pages = checkpoint.pages
        # While a frame is applied the next one is downloaded and decoded (SQLite releases the
        # GIL while it writes), as pull pages are; the generator is only ever advanced by one
        # thread at a time.
        with ThreadPoolExecutor(1, thread_name_prefix="lakesync-checkpoint") as prefetch:
            following = prefetch.submit(next, pages, None)
            while (deltas := following.result()) is not None:
                following = prefetch.submit(next, pages, None)
                changes = self.store.apply_remote(deltas, "remote", self.clock, mark=resync)
                self._notify(changes)
                applied += len(deltas)
        # The cursor moves only once the whole snapshot is in: a broken download starts over.
        if resync:
            changes = self.store.finish_resync(self.gateway_id, checkpoint.server_hlc, self.clock)
        else:
            changes = self.store.apply_remote(
                [], "remote", self.clock, (self.gateway_id, checkpoint.server_hlc)
            )
        self._notify(changes)
        return applied, checkpoint.server_hlc

    # -- push -------------------------------------------------------------------------------

    def _push_all(self) -> tuple[int, int]:
        pushed = dead = 0
        while batch := self.store.outbox(self.push_batch, _PUSH_MAX_BYTES):
            ok, bad = self._push_batch(batch)
            pushed += ok
            dead += bad
        return pushed, dead

    def _push_batch(self, entries: Sequence[OutboxEntry]) -> tuple[int, int]:
        seqs = [e.seq for e in entries]
        try:
            result = self.transport.push(
                self.client_id, [e.delta for e in entries], self.store.cursor(self.gateway_id)
            )
        except LakeSyncError as exc:
            if not rejects_entries(exc):
                self.store.record_failure(seqs, str(exc))
                raise
            if len(entries) > 1:
                # A batch is atomic, so find the culprit by halving; the rest still goes through.
                mid = len(entries) // 2
                a = self._push_batch(entries[:mid])
                b = self._push_batch(entries[mid:])
                return a[0] + b[0], a[1] + b[1]
            entry = entries[0]
            self._notify(self.store.dead_letter(entry, exc.code, exc.message))
            self._emit(
                Event(
                    "dead_letter",
                    f"the gateway refused delta {entry.delta.delta_id}: {exc.message}",
                    {
                        "delta_id": entry.delta.delta_id,
                        "table": entry.delta.table,
                        "row_id": entry.delta.row_id,
                        "code": exc.code,
                        "error": exc.message,
                    },
                )
            )
            return 0, 1
        self.store.ack(seqs, result.server_hlc)
        return len(entries), 0
