"""The public blocking client: an offline-first SQLite replica that syncs with a LakeSync
gateway, its network work on one loop thread it owns."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Unpack

from lakesync.client._actions import ActionRecord
from lakesync.client._core import SyncProgressHandler, SyncReport
from lakesync.client._drive import BlockingDriver
from lakesync.client._loop import LoopThread
from lakesync.client._session import ClientOptions, ClientSession, Params
from lakesync.client._store import DeadLetter
from lakesync.client._types import Change, Event, SyncStatus
from lakesync.client._watch import Watch
from lakesync.delta import Op
from lakesync.schema import TableSchema

if TYPE_CHECKING:
    import pandas  # type: ignore[import-untyped]
    import pyarrow

__all__ = ["LakeSyncClient"]


class LakeSyncClient:
    """An offline-first replica of a gateway's tables in one SQLite file.

    ``path`` is the SQLite file (or ``":memory:"``); the other arguments are keywords. With ``url``,
    ``gateway_id`` and ``token`` (a JWT string, or a callable returning a fresh one, called again on
    401) the client syncs; without them it works purely locally. The client id is the token's
    ``sub`` claim (or ``client_id`` for a local-only replica). ``schemas`` declares the tables
    (docs/protocol.md §10 dicts or :class:`TableSchema`); declaring more columns later evolves the
    tables additively. ``transport`` is ``"http"``, ``"websocket"`` (realtime broadcasts), an
    :class:`AsyncTransport` or a :class:`Transport`. ``pull_limit`` (1000) caps a pulled page,
    ``push_batch`` (1000) a pushed batch; ``backoff`` (:class:`Backoff`) paces retries and
    reconnects; ``timeout`` (30 s) bounds each request.

    Every local write commits together with its outbox entry, so a crash never loses or duplicates
    an edit. The client is thread-safe. Network work runs on the sync core's asyncio driver and the
    asyncio transport, on one event loop thread the client owns (``lakesync-client``, started by the
    first network call); watch and event callbacks for local writes run on the writing thread, for
    remote changes on that loop thread (a callback must not call the client's blocking network
    methods: hand them to another thread).

    Raises :class:`ConfigError` for inconsistent settings and :class:`SchemaError` for invalid or
    incompatible schemas.
    """

    def __init__(self, path: str, **options: Unpack[ClientOptions]) -> None:
        self._session = ClientSession(path, **options)
        self.client_id = self._session.client_id
        self.gateway_id = self._session.gateway_id
        self._store = self._session.store
        self._clock = self._session.clock
        self._loop = LoopThread("lakesync-client")
        self._auto: concurrent.futures.Future[None] | None = None

    # -- writes -------------------------------------------------------------------------------

    def insert(self, table: str, row_id: str, values: Mapping[str, Any]) -> Change:
        """Insert a row locally and queue it for the gateway; returns the change.

        Typed columns take Python values (``int``; ``Decimal`` or ``int``; an aware
        ``datetime``; a ``date``; ``bytes``), encoded canonically before the deltaId is made.
        Raises :class:`SchemaError` (unknown table or column, a value its type cannot hold),
        :class:`RowExistsError` if the row is live (use :meth:`update`), :class:`ClientClosedError`.
        """
        change = self._write("INSERT", table, row_id, values)
        assert change is not None  # an insert always changes the row
        return change

    def update(self, table: str, row_id: str, values: Mapping[str, Any]) -> Change | None:
        """Change some columns of a live row; only columns whose value differs are synced.

        Returns None when nothing changed. Raises :class:`RowNotFoundError` if the row is not
        live locally, :class:`SchemaError` for unknown columns or wrong value types.
        """
        return self._write("UPDATE", table, row_id, values)

    def upsert(self, table: str, row_id: str, values: Mapping[str, Any]) -> Change | None:
        """Insert the row if it is absent locally, else update the given columns.

        Returns None when the row already holds these values. Raises like :meth:`insert`.
        """
        return self._write("UPSERT", table, row_id, values)

    def delete(self, table: str, row_id: str) -> Change:
        """Delete a live row (a tombstone that syncs). Raises :class:`RowNotFoundError`."""
        change = self._write("DELETE", table, row_id, {})
        assert change is not None  # a delete of a live row always changes it
        return change

    def _write(
        self, op: Op | Literal["UPSERT"], table: str, row_id: str, values: Mapping[str, Any]
    ) -> Change | None:
        return self._session.write(op, table, row_id, values)

    # -- reads --------------------------------------------------------------------------------

    def query(self, sql: str, params: Params = ()) -> list[dict[str, Any]]:
        """Run a read-only SQL query on the replica; rows as dicts of Python values.

        Booleans come back as ``bool``, json columns decoded, and typed columns as ``int``,
        ``decimal.Decimal``, aware ``datetime`` (UTC), ``datetime.date`` and ``bytes``;
        ``datetime``, ``date`` and ``Decimal`` parameters bind as those columns store them.
        Raises :class:`ValidationError` for invalid SQL or a statement that would write.
        """
        return self._session.store.query(sql, params)

    def get(self, table: str, row_id: str) -> dict[str, Any] | None:
        """One row's visible columns (without ``row_id``) as Python values, or None if it is
        absent."""
        return self._session.get(table, row_id)

    def to_arrow(self, sql: str, params: Params = ()) -> pyarrow.Table:
        """A query's result as a ``pyarrow.Table`` (json values as JSON text).

        A result column named like a typed column of the tables the query reads gets that
        column's Arrow type: ``int64``, ``decimal128(p, s)``, ``timestamp[us, tz=UTC]``,
        ``date32``, ``binary``; other columns' types are inferred from their values.
        Raises :class:`MissingExtraError` when pyarrow is not installed.
        """
        return self._session.to_arrow(sql, params)

    def to_pandas(self, sql: str, params: Params = ()) -> pandas.DataFrame:
        """A query's result as a ``pandas.DataFrame`` (json values decoded to Python objects).

        Raises :class:`MissingExtraError` when pandas is not installed.
        """
        return self._session.to_pandas(sql, params)

    # -- watching -----------------------------------------------------------------------------

    def watch(
        self, table: str | None = None, callback: Callable[[list[Change]], None] | None = None
    ) -> Watch[list[Change]]:
        """Be told about changed rows of ``table`` (None = all tables), local or remote.

        With ``callback`` each committed batch is passed to it; without, iterate the returned
        :class:`Watch` with ``async for``. Cancel with ``.cancel()`` or a ``with`` block.
        """
        return self._session.watchers.watch_table(table, callback)

    def watch_query(
        self,
        sql: str,
        params: Params = (),
        callback: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> Watch[list[dict[str, Any]]]:
        """Watch a query's rows: delivered at once, then again whenever a change alters them."""
        return self._session.watchers.watch_query(sql, params, callback)

    # -- actions ------------------------------------------------------------------------------

    def execute_action(
        self,
        connector: str,
        action_type: str,
        params: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> ActionRecord:
        """Ask the gateway to act on an outside system (``GET /actions`` lists what a
        gateway offers), e.g. ``execute_action("jira", "create_issue", {...})``.

        The action is committed to the replica's action outbox first, then sent once; one the
        gateway could not finish (offline, or a retryable failure) stays pending and is sent
        again by :meth:`run_actions` and every :meth:`sync`, under the same idempotency key
        (default: the action's id), so it runs at most once. Each final answer fires an
        ``action_complete`` event. Returns the action as it stands after the first send.
        """
        return self._loop.run(
            self._session.execute_action(connector, action_type, params, idempotency_key)
        )

    def run_actions(self, retries: int | None = None) -> int:
        """Send pending actions until each has a final answer, retrying retryable failures
        and an unreachable gateway with the client's backoff; returns how many are still
        pending when the retries (default: the backoff's ``max_retries``) run out. Raises
        ``AuthError`` / ``ForbiddenError`` like :meth:`sync`."""
        return self._loop.run(self._session.run_actions(retries))

    def action(self, action_id: str) -> ActionRecord | None:
        """An action from :meth:`execute_action` and where it stands, or None."""
        return self._session.actions.get(action_id)

    def on(self, kind: str, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Subscribe to sync events (``synced``, ``sync_error``, ``dead_letter``,
        ``value_error``, ``action_complete``, or ``*``).

        Returns a function that unsubscribes.
        """
        return self._session.on(kind, callback)

    # -- sync ---------------------------------------------------------------------------------

    @property
    def engine(self) -> BlockingDriver:
        """The sync driver, run on the client's loop thread; :class:`ConfigError` for a
        local-only client."""
        return BlockingDriver(self._session.driver(), self._loop)

    def sync(
        self,
        retries: int | None = None,
        on_progress: SyncProgressHandler | None = None,
        *,
        raise_on_rejected: bool = False,
    ) -> SyncReport:
        """One full cycle: pull every page, push the whole outbox, then pull what the push
        changed in this replica's view (a row it gave away leaves it now).

        Transient failures are retried with exponential backoff and jitter; deltas the gateway
        refuses for good are dead-lettered (event ``dead_letter``), listed in the returned
        report's ``rejected`` and logged as one warning (logger ``lakesync.client``); with
        ``raise_on_rejected=True`` the sync then raises :class:`ChangesRejectedError` (its
        ``report`` holds them) once the rest is done. Raises ``AuthError`` /
        ``ForbiddenError`` for credentials the gateway rejects, and :class:`SyncFailedError`
        when retries run out (e.g. the gateway is unreachable). ``on_progress`` receives a
        :class:`SyncProgress` (rows applied and checkpoint bytes received so far) after each
        checkpoint frame or pulled page, on the client's loop thread: a first sync of a large
        replica can show a progress bar.
        """
        return self._loop.run(self._session.sync(retries, on_progress, raise_on_rejected))

    def connect(self) -> None:
        """Open a WebSocket transport's connection now, to receive realtime changes."""
        self._loop.run(self._session.driver().transport.connect())

    def start_auto_sync(self, interval: float = 5.0) -> None:
        """Sync on the client's loop thread every ``interval`` seconds and soon after local
        writes.

        Failures are reported as ``sync_error`` events and retried on the next round.
        """
        if self._auto is None:
            self._session.start_auto_sync()
            self._auto = self._loop.submit(self._session.auto_sync(interval))

    def stop_auto_sync(self) -> None:
        """Stop background syncing (waits for a running cycle to finish)."""
        auto, self._auto = self._auto, None
        if auto is not None:
            self._session.stop_auto_sync()
            auto.result()

    @property
    def queue_depth(self) -> int:
        """How many local deltas wait to be pushed."""
        return self._session.store.queue_depth()

    @property
    def status(self) -> SyncStatus:
        """A snapshot of the sync state, queue depth and dead-letter count."""
        return self._session.status()

    def dead_letters(self) -> list[DeadLetter]:
        """Deltas the gateway refused for good (no longer shown in the replica's rows)."""
        return self._session.store.dead_letters()

    def requeue_dead_letters(self) -> int:
        """Move every dead letter back to the outbox (after fixing the cause), showing it in the
        replica again; returns count."""
        return self._session.requeue_dead_letters()

    def schemas(self) -> dict[str, TableSchema]:
        """The local tables' schemas (declared, plus columns learned from the gateway)."""
        return self._session.store.schemas()

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop syncing, close connections and the SQLite file (idempotent)."""
        self.stop_auto_sync()
        if not self._session.store.closed:
            self._loop.run(self._session.close_network())
        self._loop.close()
        self._session.store.close()

    def __enter__(self) -> LakeSyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
