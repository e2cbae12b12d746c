"""What both clients are made of: one replica, its sync driver, watches, events and status.

:class:`ClientSession` holds the local half (the :class:`LocalStore`, the HLC, watches, event
listeners, the action outbox) and the network half's asyncio code (the :class:`AsyncDriver`
over the sync core and the transport, actions, auto-sync). :class:`AsyncLakeSyncClient` awaits
that code on the caller's loop; :class:`LakeSyncClient` runs it on a loop thread it owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack

from lakesync.client._actions import ActionOutbox, ActionRecord, send_actions
from lakesync.client._auth import TokenProvider, TokenSource
from lakesync.client._backoff import Backoff, is_retryable
from lakesync.client._columns import encode_json
from lakesync.client._core import SyncCore, SyncProgressHandler, SyncReport
from lakesync.client._drive import AsyncDriver
from lakesync.client._store import LocalStore
from lakesync.client._types import Change, Event, SyncStatus
from lakesync.client._watch import Watchers
from lakesync.client.errors import (
    ChangesRejectedError,
    ClientClosedError,
    ConfigError,
    LakeSyncError,
    MissingExtraError,
)
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

__all__ = ["ClientOptions", "ClientSession", "Params", "TransportChoice"]

_log = logging.getLogger(__name__)
Params = Sequence[Any] | Mapping[str, Any]
TransportChoice = Literal["http", "websocket"] | Transport | AsyncTransport


class ClientOptions(TypedDict, total=False):
    """The clients' keyword arguments (:class:`LakeSyncClient` says what each does)."""

    url: str | None
    gateway_id: str | None
    token: TokenSource | None
    schemas: Sequence[Mapping[str, Any] | TableSchema]
    transport: TransportChoice
    client_id: str | None
    pull_limit: int
    push_batch: int
    backoff: Backoff | None
    timeout: float


class ClientSession:
    """One replica and, with a gateway, its sync driver (the clients' shared state; see the
    module's docstring). Arguments are :class:`LakeSyncClient`'s; an unknown keyword is a
    ``TypeError``."""

    def __init__(self, path: str, **options: Unpack[ClientOptions]) -> None:
        unknown = options.keys() - ClientOptions.__annotations__.keys()
        if unknown:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        url, gateway_id = options.get("url"), options.get("gateway_id")
        token, schemas = options.get("token"), options.get("schemas", ())
        transport, client_id = options.get("transport", "http"), options.get("client_id")
        parsed = [s if isinstance(s, TableSchema) else parse_schema(s) for s in schemas]
        self._tokens = TokenProvider(token) if token is not None else None
        self.store = LocalStore(str(path), parsed)
        try:
            self.client_id = self._resolve_client_id(client_id)
            self.gateway_id = gateway_id
            self.clock = HLC(last=int(self.store.get_meta("hlc") or 0))
            self.watchers = Watchers(self.store.query_tables, self.store.lock)
            self._listeners: list[tuple[str, Callable[[Event], None]]] = []
            self._listeners_lock = threading.Lock()
            self.backoff = options.get("backoff") or Backoff()
            self.syncing = False
            self.last_synced_at: float | None = None
            self.last_error: str | None = None
            self.auto_running = False
            self._auto_stop = False
            self._auto_wake: Callable[[], None] | None = None
            self.actions = ActionOutbox(self.store)
            self._driver: AsyncDriver | None = None
            if url is not None or not isinstance(transport, str):
                self._driver = self._make_driver(
                    url,
                    transport,
                    options.get("pull_limit", 1000),
                    options.get("push_batch", 1000),
                    options.get("timeout", 30.0),
                )
        except BaseException:
            self.store.close()
            raise

    def _resolve_client_id(self, explicit: str | None) -> str:
        stored = self.store.get_meta("client_id")
        cid = self._tokens.client_id if self._tokens is not None else explicit
        if explicit is not None and cid != explicit:
            raise ConfigError(
                f"client_id {explicit!r} differs from the token's sub {cid!r}; the gateway binds "
                "pushes to the token, so leave client_id out"
            )
        if cid is None:
            cid = stored or f"local-{uuid.uuid4().hex}"
        if stored is not None and stored != cid and self.store.queue_depth() > 0:
            raise ConfigError(
                f"this replica has unsent edits of client {stored!r} but the token is for "
                f"{cid!r}; push them with the old token first"
            )
        if stored != cid:
            self.store.set_meta("client_id", cid)
        return cid

    def _make_driver(
        self,
        url: str | None,
        transport: TransportChoice,
        pull_limit: int,
        push_batch: int,
        timeout: float,
    ) -> AsyncDriver:
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
                    url, self.gateway_id, self._tokens, timeout, self.backoff
                )
            else:
                raise ConfigError(f"transport must be 'http' or 'websocket', got {transport!r}")
        driver = AsyncDriver(
            SyncCore(self.backoff, pull_limit=pull_limit, push_batch=push_batch),
            self.store,
            tr,
            self.clock,
            self.client_id,
            self.gateway_id,
            notify=self.watchers.dispatch,
            watching=self.watchers.watching,
            emit=self.emit,
        )
        tr.set_broadcast_handler(driver.apply_broadcast)
        tr.set_reconnect_handler(self._catch_up)
        tr.set_event_handler(self.emit)
        tr.set_backlog_source(self._backlog)  # the gateway's status shows what waits here
        return driver

    def _backlog(self) -> tuple[int, int]:
        """The pending outbox and the dead letters (reported to the gateway)."""
        return self.store.queue_depth(), self.store.dead_letter_count()

    # -- the replica --------------------------------------------------------------------------

    def write(
        self, op: Op | Literal["UPSERT"], table: str, row_id: str, values: Mapping[str, Any]
    ) -> Change | None:
        """A local write, told to the watchers; wakes the auto-sync."""
        result = self.store.write(op, table, row_id, values, self.clock, self.client_id)
        if result is None:
            return None
        change = result[1]
        self.watchers.dispatch([change])
        self._wake_auto_sync()
        return change

    def get(self, table: str, row_id: str) -> dict[str, Any] | None:
        """See :meth:`LakeSyncClient.get`."""
        self.store.schema(table)
        return self.store.get(table, row_id)

    def to_arrow(self, sql: str, params: Params) -> pyarrow.Table:
        """See :meth:`LakeSyncClient.to_arrow`."""
        try:
            # heavy, optional (extra "pipeline")
            import pyarrow as pa  # noqa: PLC0415
        except ImportError:
            raise MissingExtraError("pyarrow", "pipeline") from None

        rows, tables = self.store.query_tables(sql, params)
        if not rows:
            return pa.table({})
        specs: dict[str, ColumnSpec | None] = {}
        for schema in self.store.schemas().values():
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

    def to_pandas(self, sql: str, params: Params) -> pandas.DataFrame:
        """See :meth:`LakeSyncClient.to_pandas`."""
        try:
            # heavy, optional (not in the client extra)
            import pandas as pd  # noqa: PLC0415
        except ImportError:
            raise MissingExtraError("pandas", "pipeline") from None
        return pd.DataFrame.from_records(self.store.query(sql, params))

    def requeue_dead_letters(self) -> int:
        """See :meth:`LakeSyncClient.requeue_dead_letters`."""
        n, changes = self.store.requeue_dead_letters()
        self.watchers.dispatch(changes)
        return n

    def on(self, kind: str, callback: Callable[[Event], None]) -> Callable[[], None]:
        """See :meth:`LakeSyncClient.on`."""
        entry = (kind, callback)
        with self._listeners_lock:
            self._listeners.append(entry)

        def unsubscribe() -> None:
            with self._listeners_lock:
                if entry in self._listeners:
                    self._listeners.remove(entry)

        return unsubscribe

    def emit(self, event: Event) -> None:
        """Tell ``event`` to its listeners (a listener's failure is logged)."""
        if event.kind == "sync_error":
            self.last_error = event.message
        with self._listeners_lock:
            targets = [cb for k, cb in self._listeners if k in (event.kind, "*")]
        for cb in targets:
            try:
                cb(event)
            except Exception:
                _log.exception("an event listener raised")

    def status(self) -> SyncStatus:
        """See :attr:`LakeSyncClient.status`."""
        if self.store.closed:
            return SyncStatus("closed", 0, 0, 0, self.last_synced_at, self.last_error, False, False)
        connected = self._driver is not None and self._driver.transport.connected
        if self.syncing:
            state: Literal["idle", "syncing", "offline", "error"] = "syncing"
        elif self.last_error is not None:
            state = "offline" if not connected else "error"
        else:
            state = "idle"
        return SyncStatus(
            state,
            self.store.queue_depth(),
            self.store.dead_letter_count(),
            self.store.cursor(self.gateway_id) if self.gateway_id else 0,
            self.last_synced_at,
            self.last_error,
            self.auto_running,
            connected,
        )

    # -- the network (asyncio, on the loop the client's network work runs on) -----------------

    def driver(self) -> AsyncDriver:
        """The sync driver; :class:`ConfigError` for a local-only client."""
        if self.store.closed:
            raise ClientClosedError("the client is closed")
        if self._driver is None:
            raise ConfigError("this client has no gateway: pass url, gateway_id and token")
        return self._driver

    async def sync(
        self,
        retries: int | None,
        on_progress: SyncProgressHandler | None = None,
        raise_on_rejected: bool = False,
    ) -> SyncReport:
        """See :meth:`LakeSyncClient.sync`."""
        driver = self.driver()
        self.syncing = True
        try:
            report = await driver.sync(retries, on_progress)
            await self.run_actions(retries=0)
        finally:
            self.syncing = False
        self.last_synced_at = time.time()
        self.last_error = None
        if report.rejected:
            message = rejected_message(report)
            _log.warning("%s", message)
            if raise_on_rejected:
                raise ChangesRejectedError(message, report)
        return report

    async def execute_action(
        self,
        connector: str,
        action_type: str,
        params: Mapping[str, Any] | None,
        idempotency_key: str | None,
    ) -> ActionRecord:
        """See :meth:`LakeSyncClient.execute_action`."""
        action_id = self.actions.enqueue(connector, action_type, params or {}, idempotency_key)
        if self._driver is not None:
            await self.run_actions(retries=0)
        record = self.actions.get(action_id)
        assert record is not None
        return record

    async def run_actions(self, retries: int | None) -> int:
        """See :meth:`LakeSyncClient.run_actions`."""
        driver = self.driver()
        limit = self.backoff.max_retries if retries is None else retries
        attempt = 0
        while True:
            try:
                await send_actions(self.actions, driver.transport, self.client_id, self.emit)
            except LakeSyncError as exc:
                if not is_retryable(exc):
                    raise
                self.emit(Event("sync_error", str(exc), {"code": exc.code}))
            waiting = len(self.actions.pending())
            if waiting == 0 or attempt >= limit:
                return waiting
            await asyncio.sleep(self.backoff.delay(attempt))
            attempt += 1

    async def _catch_up(self) -> None:
        # Run by the WebSocket transport after a reconnect: pull what broadcasts missed.
        try:
            await self.driver().sync(retries=0)
        except LakeSyncError as exc:
            _log.info("catch-up sync after reconnect failed: %s", exc)

    def start_auto_sync(self) -> None:
        """Mark the auto-sync loop as started (:meth:`auto_sync` is to run next)."""
        self.driver()
        self.auto_running = True
        self._auto_stop = False

    async def auto_sync(self, interval: float) -> None:
        """Sync every ``interval`` seconds, and at once when a local write wakes the wait."""
        driver = self.driver()
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def poke() -> None:
            loop.call_soon_threadsafe(wake.set)

        self._auto_wake = poke
        try:
            while not self._auto_stop:
                try:
                    self.syncing = True
                    report = await driver.sync(retries=0)
                    if report.rejected:
                        _log.warning("%s", rejected_message(report))
                    self.last_synced_at = time.time()
                    self.last_error = None
                except LakeSyncError as exc:
                    self.last_error = str(exc)
                finally:
                    self.syncing = False
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

    def stop_auto_sync(self) -> None:
        """Tell the auto-sync loop to stop after its running cycle."""
        self.auto_running = False
        self._auto_stop = True
        self._wake_auto_sync()

    async def close_network(self) -> None:
        """Cancel the watches and close the transport (before the replica)."""
        self.watchers.cancel_all()
        if self._driver is not None and not self.store.closed:
            await self._driver.transport.aclose()


def rejected_message(report: SyncReport) -> str:
    """One line for a sync whose changes the gateway refused: how many, the first reason, and
    where they went."""
    n = len(report.rejected)
    return (
        f"the gateway refused {n} local change{'s' if n != 1 else ''} in this sync, moved to "
        f"the dead letters (first: {report.rejected[0]}); see dead_letters(), and "
        "requeue_dead_letters() once the cause is fixed"
    )


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
