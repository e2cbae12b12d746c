"""The public client: an offline-first SQLite replica that syncs with a LakeSync gateway."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from lakesync.client._actions import ActionOutbox, ActionRecord, send_actions
from lakesync.client._auth import TokenProvider, TokenSource
from lakesync.client._backoff import Backoff, is_retryable
from lakesync.client._columns import encode_json
from lakesync.client._loop import LoopThread
from lakesync.client._store import DeadLetter, LocalStore
from lakesync.client._sync import BlockingEngine, SyncEngine, SyncProgressHandler, SyncReport
from lakesync.client._types import Change, Event, SyncStatus
from lakesync.client._watch import Watch, Watchers
from lakesync.client.errors import ClientClosedError, ConfigError, LakeSyncError, MissingExtraError
from lakesync.client.transport import (
    AsyncHttpTransport,
    AsyncTransport,
    AsyncWebSocketTransport,
    Transport,
)
from lakesync.client.transport._bridge import as_async
from lakesync.column_types import decimal_params
from lakesync.delta import Op
from lakesync.hlc import HLC
from lakesync.schema import ColumnSpec, TableSchema, parse_schema

if TYPE_CHECKING:
    import pandas  # type: ignore[import-untyped]
    import pyarrow

__all__ = ["LakeSyncClient"]

_log = logging.getLogger(__name__)
Params = Sequence[Any] | Mapping[str, Any]
TransportChoice = Literal["http", "websocket"] | Transport | AsyncTransport
#: A running auto-sync loop: a task of the caller's loop, or of the client's loop thread.
AutoSync = asyncio.Task[None] | concurrent.futures.Future[None]


class LakeSyncClient:
    """An offline-first replica of a gateway's tables in one SQLite file.

    ``path`` is the SQLite file (or ``":memory:"``). With ``url``, ``gateway_id`` and ``token``
    (a JWT string, or a callable returning a fresh one, called again on 401) the client syncs;
    without them it works purely locally. The client id is the token's ``sub`` claim (or
    ``client_id`` for a local-only replica). ``schemas`` declares the tables (docs/protocol.md §10
    dicts or :class:`TableSchema`); declaring more columns later evolves the tables additively.
    ``transport`` is ``"http"``, ``"websocket"`` (realtime broadcasts), an
    :class:`AsyncTransport` or a :class:`Transport`.

    Every local write commits together with its outbox entry, so a crash never loses or
    duplicates an edit. The client is thread-safe. Network work runs on the asyncio transport
    core and sync engine, on one event loop thread the client owns (``lakesync-client``,
    started by the first network call); watch and event callbacks for local writes run on the
    writing thread, for remote changes on that loop thread (a callback must not call the
    client's blocking network methods: hand them to another thread).

    Raises :class:`ConfigError` for inconsistent settings and :class:`SchemaError` for invalid
    or incompatible schemas.
    """

    def __init__(
        self,
        path: str,
        *,
        url: str | None = None,
        gateway_id: str | None = None,
        token: TokenSource | None = None,
        schemas: Sequence[Mapping[str, Any] | TableSchema] = (),
        transport: TransportChoice = "http",
        client_id: str | None = None,
        pull_limit: int = 1000,
        push_batch: int = 1000,
        backoff: Backoff | None = None,
        timeout: float = 30.0,
    ) -> None:
        parsed = [s if isinstance(s, TableSchema) else parse_schema(s) for s in schemas]
        self._tokens = TokenProvider(token) if token is not None else None
        self._store = LocalStore(str(path), parsed)
        try:
            self._setup(
                client_id, gateway_id, url, transport, pull_limit, push_batch, backoff, timeout
            )
        except BaseException:
            self._store.close()
            raise

    def _setup(
        self,
        client_id: str | None,
        gateway_id: str | None,
        url: str | None,
        transport: TransportChoice,
        pull_limit: int,
        push_batch: int,
        backoff: Backoff | None,
        timeout: float,
    ) -> None:
        self.client_id = self._resolve_client_id(client_id)
        self.gateway_id = gateway_id
        self._clock = HLC(last=int(self._store.get_meta("hlc") or 0))
        self._watchers = Watchers(self._store.query_tables, self._store.lock)
        self._listeners: list[tuple[str, Callable[[Event], None]]] = []
        self._listeners_lock = threading.Lock()
        self._backoff = backoff or Backoff()
        self._engine: SyncEngine | None = None
        self._syncing = False
        self._last_synced_at: float | None = None
        self._last_error: str | None = None
        self._auto: AutoSync | None = None
        self._auto_stop = False
        self._auto_wake: Callable[[], None] | None = None
        self._loop = LoopThread("lakesync-client")
        self._actions = ActionOutbox(self._store)
        if url is not None or not isinstance(transport, str):
            self._engine = self._make_engine(url, transport, pull_limit, push_batch, timeout)

    def _resolve_client_id(self, explicit: str | None) -> str:
        stored = self._store.get_meta("client_id")
        cid = self._tokens.client_id if self._tokens is not None else explicit
        if explicit is not None and cid != explicit:
            raise ConfigError(
                f"client_id {explicit!r} differs from the token's sub {cid!r}; the gateway binds "
                "pushes to the token, so leave client_id out"
            )
        if cid is None:
            cid = stored or f"local-{uuid.uuid4().hex}"
        if stored is not None and stored != cid and self._store.queue_depth() > 0:
            raise ConfigError(
                f"this replica has unsent edits of client {stored!r} but the token is for "
                f"{cid!r}; push them with the old token first"
            )
        if stored != cid:
            self._store.set_meta("client_id", cid)
        return cid

    def _make_engine(
        self,
        url: str | None,
        transport: TransportChoice,
        pull_limit: int,
        push_batch: int,
        timeout: float,
    ) -> SyncEngine:
        if self.gateway_id is None:
            raise ConfigError("gateway_id is required to sync")
        if isinstance(transport, Transport | AsyncTransport):
            tr: AsyncTransport = as_async(transport)
        else:
            if url is None or self._tokens is None:
                raise ConfigError("syncing needs both url and token")
            if transport == "http":
                tr = AsyncHttpTransport(url, self.gateway_id, self._tokens, timeout)
            elif transport == "websocket":
                tr = AsyncWebSocketTransport(
                    url, self.gateway_id, self._tokens, timeout, self._backoff
                )
            else:
                raise ConfigError(f"transport must be 'http' or 'websocket', got {transport!r}")
        engine = SyncEngine(
            self._store,
            tr,
            self._clock,
            self.client_id,
            self.gateway_id,
            notify=self._watchers.dispatch,
            watching=self._watchers.watching,
            emit=self._emit,
            backoff=self._backoff,
            pull_limit=pull_limit,
            push_batch=push_batch,
        )
        tr.set_broadcast_handler(engine.apply_broadcast)
        tr.set_reconnect_handler(self._catch_up)
        tr.set_event_handler(self._emit)
        tr.set_backlog_source(self._backlog)  # the gateway's status shows what waits here
        return engine

    def _backlog(self) -> tuple[int, int]:
        """The pending outbox and the dead letters (reported to the gateway)."""
        return self._store.queue_depth(), self._store.dead_letter_count()

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
        result = self._store.write(op, table, row_id, values, self._clock, self.client_id)
        if result is None:
            return None
        change = result[1]
        self._watchers.dispatch([change])
        self._wake_auto_sync()
        return change

    # -- reads --------------------------------------------------------------------------------

    def query(self, sql: str, params: Params = ()) -> list[dict[str, Any]]:
        """Run a read-only SQL query on the replica; rows as dicts of Python values.

        Booleans come back as ``bool``, json columns decoded, and typed columns as ``int``,
        ``decimal.Decimal``, aware ``datetime`` (UTC), ``datetime.date`` and ``bytes``;
        ``datetime``, ``date`` and ``Decimal`` parameters bind as those columns store them.
        Raises :class:`ValidationError` for invalid SQL or a statement that would write.
        """
        return self._store.query(sql, params)

    def get(self, table: str, row_id: str) -> dict[str, Any] | None:
        """One row's visible columns (without ``row_id``) as Python values, or None if it is
        absent."""
        self._store.schema(table)
        return self._store.get(table, row_id)

    def to_arrow(self, sql: str, params: Params = ()) -> pyarrow.Table:
        """A query's result as a ``pyarrow.Table`` (json values as JSON text).

        A result column named like a typed column of the tables the query reads gets that
        column's Arrow type: ``int64``, ``decimal128(p, s)``, ``timestamp[us, tz=UTC]``,
        ``date32``, ``binary``; other columns' types are inferred from their values.
        Raises :class:`MissingExtraError` when pyarrow is not installed.
        """
        try:
            # heavy, optional (extra "pipeline")
            import pyarrow as pa  # noqa: PLC0415
        except ImportError:
            raise MissingExtraError("pyarrow", "pipeline") from None

        rows, tables = self._store.query_tables(sql, params)
        if not rows:
            return pa.table({})
        specs: dict[str, ColumnSpec | None] = {}
        for schema in self._store.schemas().values():
            if schema.table.lower() in tables:
                for spec in schema.columns:
                    # A name two tables type differently keeps its inferred type.
                    seen = specs.setdefault(spec.name, spec)
                    if seen is not None and seen != spec:
                        specs[spec.name] = None
        arrays = {}
        for name in rows[0]:
            values = [
                encode_json(r[name]) if isinstance(r[name], dict | list) else r[name] for r in rows
            ]
            typed = specs.get(name)
            typ = None if typed is None else _arrow_type(pa, typed)
            arrays[name] = pa.array(values, typ)
        return pa.table(arrays)

    def to_pandas(self, sql: str, params: Params = ()) -> pandas.DataFrame:
        """A query's result as a ``pandas.DataFrame`` (json values decoded to Python objects).

        Raises :class:`MissingExtraError` when pandas is not installed.
        """
        try:
            # heavy, optional (not in the client extra)
            import pandas as pd  # noqa: PLC0415
        except ImportError:
            raise MissingExtraError("pandas", "pipeline") from None
        return pd.DataFrame.from_records(self._store.query(sql, params))

    # -- watching -----------------------------------------------------------------------------

    def watch(
        self, table: str | None = None, callback: Callable[[list[Change]], None] | None = None
    ) -> Watch[list[Change]]:
        """Be told about changed rows of ``table`` (None = all tables), local or remote.

        With ``callback`` each committed batch is passed to it; without, iterate the returned
        :class:`Watch` with ``async for``. Cancel with ``.cancel()`` or a ``with`` block.
        """
        return self._watchers.watch_table(table, callback)

    def watch_query(
        self,
        sql: str,
        params: Params = (),
        callback: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> Watch[list[dict[str, Any]]]:
        """Watch a query's rows: delivered at once, then again whenever a change alters them."""
        return self._watchers.watch_query(sql, params, callback)

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
            self._execute_action(connector, action_type, params, idempotency_key)
        )

    async def _execute_action(
        self,
        connector: str,
        action_type: str,
        params: Mapping[str, Any] | None,
        idempotency_key: str | None,
    ) -> ActionRecord:
        action_id = self._actions.enqueue(connector, action_type, params or {}, idempotency_key)
        if self._engine is not None:
            await self._run_actions(retries=0)
        record = self._actions.get(action_id)
        assert record is not None
        return record

    def run_actions(self, retries: int | None = None) -> int:
        """Send pending actions until each has a final answer, retrying retryable failures
        and an unreachable gateway with the client's backoff; returns how many are still
        pending when the retries (default: the backoff's ``max_retries``) run out. Raises
        ``AuthError`` / ``ForbiddenError`` like :meth:`sync`."""
        return self._loop.run(self._run_actions(retries))

    async def _run_actions(self, retries: int | None) -> int:
        engine = self._core()
        limit = self._backoff.max_retries if retries is None else retries
        attempt = 0
        while True:
            try:
                await send_actions(self._actions, engine.transport, self.client_id, self._emit)
            except LakeSyncError as exc:
                if not is_retryable(exc):
                    raise
                self._emit(Event("sync_error", str(exc), {"code": exc.code}))
            waiting = len(self._actions.pending())
            if waiting == 0 or attempt >= limit:
                return waiting
            await asyncio.sleep(self._backoff.delay(attempt))
            attempt += 1

    def action(self, action_id: str) -> ActionRecord | None:
        """An action from :meth:`execute_action` and where it stands, or None."""
        return self._actions.get(action_id)

    def on(self, kind: str, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Subscribe to sync events (``synced``, ``sync_error``, ``dead_letter``,
        ``value_error``, ``action_complete``, or ``*``).

        Returns a function that unsubscribes.
        """
        entry = (kind, callback)
        with self._listeners_lock:
            self._listeners.append(entry)

        def unsubscribe() -> None:
            with self._listeners_lock:
                if entry in self._listeners:
                    self._listeners.remove(entry)

        return unsubscribe

    def _emit(self, event: Event) -> None:
        if event.kind == "sync_error":
            self._last_error = event.message
        with self._listeners_lock:
            targets = [cb for k, cb in self._listeners if k in (event.kind, "*")]
        for cb in targets:
            try:
                cb(event)
            except Exception:
                _log.exception("an event listener raised")

    # -- sync ---------------------------------------------------------------------------------

    def _core(self) -> SyncEngine:
        """The asyncio sync engine; :class:`ConfigError` for a local-only client."""
        if self._store.closed:
            raise ClientClosedError("the client is closed")
        if self._engine is None:
            raise ConfigError("this client has no gateway: pass url, gateway_id and token")
        return self._engine

    @property
    def engine(self) -> BlockingEngine:
        """The sync engine, driven from the client's loop thread; :class:`ConfigError` for a
        local-only client."""
        return BlockingEngine(self._core(), self._loop)

    def sync(
        self, retries: int | None = None, on_progress: SyncProgressHandler | None = None
    ) -> SyncReport:
        """One full cycle: pull every page, push the whole outbox, then pull what the push
        changed in this replica's view (a row it gave away leaves it now).

        Transient failures are retried with exponential backoff and jitter; deltas the gateway
        refuses for good are dead-lettered (event ``dead_letter``). Raises ``AuthError`` /
        ``ForbiddenError`` for credentials the gateway rejects, and :class:`SyncFailedError`
        when retries run out (e.g. the gateway is unreachable). ``on_progress`` receives a
        :class:`SyncProgress` (rows applied and checkpoint bytes received so far) after each
        checkpoint frame or pulled page, on the client's loop thread: a first sync of a large
        replica can show a progress bar.
        """
        return self._loop.run(self._sync(retries, on_progress))

    async def _sync(
        self, retries: int | None, on_progress: SyncProgressHandler | None = None
    ) -> SyncReport:
        engine = self._core()
        self._syncing = True
        try:
            report = await engine.sync(retries, on_progress)
            await self._run_actions(retries=0)
        finally:
            self._syncing = False
        self._last_synced_at = time.time()
        self._last_error = None
        return report

    def connect(self) -> None:
        """Open a WebSocket transport's connection now, to receive realtime changes."""
        self._loop.run(self._core().transport.connect())

    async def _catch_up(self) -> None:
        # Run by the WebSocket transport after a reconnect: pull what broadcasts missed.
        try:
            await self._core().sync(retries=0)
        except LakeSyncError as exc:
            _log.info("catch-up sync after reconnect failed: %s", exc)

    def start_auto_sync(self, interval: float = 5.0) -> None:
        """Sync on the client's loop thread every ``interval`` seconds and soon after local
        writes.

        Failures are reported as ``sync_error`` events and retried on the next round.
        """
        self._start_auto_sync(interval, self._loop.submit)

    def _start_auto_sync(
        self, interval: float, run: Callable[[Coroutine[Any, Any, None]], AutoSync]
    ) -> None:
        """Start the auto-sync loop with ``run`` (on a loop), unless it runs already."""
        self._core()
        if self._auto is None:
            self._auto_stop = False
            self._auto = run(self._auto_sync(interval))

    async def _auto_sync(self, interval: float) -> None:
        """Sync every ``interval`` seconds, and at once when a local write wakes the wait."""
        engine = self._core()
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def poke() -> None:
            loop.call_soon_threadsafe(wake.set)

        self._auto_wake = poke
        try:
            while not self._auto_stop:
                try:
                    self._syncing = True
                    await engine.sync(retries=0)
                    self._last_synced_at = time.time()
                    self._last_error = None
                except LakeSyncError as exc:
                    self._last_error = str(exc)
                finally:
                    self._syncing = False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), interval)
                wake.clear()
        finally:
            self._auto_wake = None

    def _wake_auto_sync(self) -> None:
        wake = self._auto_wake
        if wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                wake()

    def _end_auto_sync(self) -> AutoSync | None:
        """Tell the auto-sync loop to stop after its running cycle; the loop, to wait for."""
        auto, self._auto = self._auto, None
        if auto is not None:
            self._auto_stop = True
            self._wake_auto_sync()
        return auto

    def stop_auto_sync(self) -> None:
        """Stop background syncing (waits for a running cycle to finish)."""
        auto = self._end_auto_sync()
        if isinstance(auto, concurrent.futures.Future):
            auto.result()

    @property
    def queue_depth(self) -> int:
        """How many local deltas wait to be pushed."""
        return self._store.queue_depth()

    @property
    def status(self) -> SyncStatus:
        """A snapshot of the sync state, queue depth and dead-letter count."""
        if self._store.closed:
            return SyncStatus(
                "closed", 0, 0, 0, self._last_synced_at, self._last_error, False, False
            )
        connected = self._engine is not None and self._engine.transport.connected
        if self._syncing:
            state: Literal["idle", "syncing", "offline", "error"] = "syncing"
        elif self._last_error is not None:
            state = "offline" if not connected else "error"
        else:
            state = "idle"
        return SyncStatus(
            state,
            self._store.queue_depth(),
            self._store.dead_letter_count(),
            self._store.cursor(self.gateway_id) if self.gateway_id else 0,
            self._last_synced_at,
            self._last_error,
            self._auto is not None,
            connected,
        )

    def dead_letters(self) -> list[DeadLetter]:
        """Deltas the gateway refused for good (no longer shown in the replica's rows)."""
        return self._store.dead_letters()

    def requeue_dead_letters(self) -> int:
        """Move every dead letter back to the outbox (after fixing the cause), showing it in the
        replica again; returns count."""
        n, changes = self._store.requeue_dead_letters()
        self._watchers.dispatch(changes)
        return n

    def schemas(self) -> dict[str, TableSchema]:
        """The local tables' schemas (declared, plus columns learned from the gateway)."""
        return self._store.schemas()

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop syncing, close connections and the SQLite file (idempotent)."""
        self.stop_auto_sync()
        self._watchers.cancel_all()
        if self._engine is not None and not self._store.closed:
            self._loop.run(self._engine.transport.aclose())
        self._close_replica()

    async def _aclose(self) -> None:
        """:meth:`close` on the caller's loop (the asyncio client's)."""
        auto = self._end_auto_sync()
        if auto is not None:
            await asyncio.wrap_future(auto)
        self._watchers.cancel_all()
        if self._engine is not None and not self._store.closed:
            await self._engine.transport.aclose()
        self._close_replica()

    def _close_replica(self) -> None:
        """Stop the loop thread and close the SQLite file (after the transport)."""
        self._loop.close()
        self._store.close()

    def __enter__(self) -> LakeSyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _arrow_type(pa: Any, spec: ColumnSpec) -> Any:
    """The Arrow type of a typed column (None: inferred from the values)."""
    match spec.type:
        case "integer":
            return pa.int64()
        case "decimal":
            return pa.decimal128(*decimal_params(spec))
        case "timestamp":
            return pa.timestamp("us", tz="UTC")
        case "date":
            return pa.date32()
        case "bytes":
            return pa.binary()
        case _:
            return None
