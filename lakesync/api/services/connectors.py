"""The gateway's connectors: each declared (``lakesync.yaml``) or registered (admin API)
connector runs as a :class:`~lakesync.connectors.poller.Poller` feeding :class:`GatewaySink`, which
is the gateway's normal push path (:meth:`SyncService.push_from_connector`) plus a cursor kept in
the store (documents of kind ``connector-cursor``), so a restart resumes where the last stored chunk
left off.

Pollers start and stop with the app. With a store shared by several gateway processes only the
one leading the ``connectors`` role polls (the others stand by and take over when it goes).
Declarations are kept as written (``${VAR}`` references, not secrets); secrets are resolved when
a poller starts and appear in no route or log.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread
import msgspec
from msgspec import Struct
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from lakesync.api.services.sync import SyncService
from lakesync.connector_specs import (
    ConnectorSpec,
    connector_client_id,
    connector_kind,
    parse_connector,
    redact_declaration,
    resolve_secrets,
)
from lakesync.connectors import ActionHandler, Poller, Source, open_actions, open_source
from lakesync.delta import RowDelta
from lakesync.errors import LakeSyncError, NotFoundError, ValidationError
from lakesync.hotlog.ports import AdminStore
from lakesync.schema import TableSchema, widened

__all__ = ["CURSOR_KIND", "DOC_KIND", "ConnectorMetrics", "ConnectorService", "GatewaySink"]

_log = logging.getLogger("lakesync.connectors")

DOC_KIND = "connector"
CURSOR_KIND = "connector-cursor"


class GatewaySink:
    """A connector's view of its gateway (see :class:`lakesync.connectors.base.Sink`): pushes and
    schemas through the ``service``, rows and cursors read and kept in the ``store``."""

    def __init__(self, service: SyncService, store: AdminStore, gateway_id: str, name: str) -> None:
        self.service = service
        self.store = store
        self.gateway_id = gateway_id
        self.name = name
        self.client_id = connector_client_id(name)

    async def schemas(self) -> dict[str, TableSchema]:
        """The gateway's registered table schemas."""
        return await self.service.schemas(self.gateway_id)

    async def register(self, schemas: Sequence[TableSchema]) -> None:
        """Register the source's tables (additive evolution, as the admin route does): columns
        the store has and ``schemas`` does not name are kept (a source may add columns as it
        reads, and name only those it knows at the start of a poll)."""
        known = await self.service.schemas(self.gateway_id)
        for given in schemas:
            stored = known.get(given.table)
            schema = given if stored is None else widened(stored, given)
            if stored != schema:
                await self.service.put_schema(self.gateway_id, schema)

    async def current(self, table: str, row_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The visible columns of the live rows among ``row_ids``."""
        keys = [(table, r) for r in row_ids]
        rows = await anyio.to_thread.run_sync(self.store.read_rows, self.gateway_id, keys)
        out = {}
        for (_, row_id), record in rows.items():
            visible = record.state.visible()
            if visible is not None:
                out[row_id] = visible
        return out

    async def push(self, deltas: Sequence[RowDelta]) -> None:
        """Through the gateway's push path."""
        await self.service.push_from_connector(self.gateway_id, self.client_id, deltas)

    async def row_ids(self, table: str, after: str | None, limit: int) -> list[str]:
        """A page of ``table``'s stored row ids (see :meth:`HotLog.row_ids`)."""
        return await anyio.to_thread.run_sync(
            self.store.row_ids, self.gateway_id, table, after, limit
        )

    async def load_cursor(self) -> dict[str, Any]:
        """The cursor stored with the last chunk."""
        docs = await anyio.to_thread.run_sync(
            self.store.list_docs, self.gateway_id, CURSOR_KIND
        )
        cursor: dict[str, Any] = docs.get(self.name, {}).get("cursor", {})
        return cursor

    async def save_cursor(self, cursor: Mapping[str, Any]) -> None:
        """Store the cursor (a document, durable on return)."""
        await anyio.to_thread.run_sync(
            self.store.put_doc, self.gateway_id, CURSOR_KIND, self.name, {"cursor": cursor}
        )

    def next_hlc(self) -> int:
        """A fresh HLC of the gateway's clock."""
        return self.service.clock.now()


SourceFactory = Callable[[ConnectorSpec], Source]


class ConnectorService:
    """Every connector of the app: declared ones (``declared``, by name) and the documents
    registered through the admin API (documents in ``store``), which win over a declaration of
    the same name."""

    def __init__(
        self,
        service: SyncService,
        store: AdminStore,
        declared: Mapping[str, ConnectorSpec] | None = None,
        env: Mapping[str, str] | None = None,
        source_factory: SourceFactory = open_source,
        lead: Callable[[], bool] | None = None,
    ) -> None:
        self.service = service
        self.store = store
        self.declared = dict(declared or {})
        self.env = os.environ if env is None else env
        self.source_factory = source_factory
        self.lead = lead
        self.pollers: dict[tuple[str, str], Poller] = {}
        self.handlers: dict[tuple[str, str], ActionHandler] = {}

    async def start(self) -> None:
        """Start every declared and registered connector (a bad one is logged and skipped:
        it must not keep the gateway from serving)."""
        specs: dict[tuple[str, str], ConnectorSpec | Mapping[str, Any]] = {
            (spec.gateway, name): spec for name, spec in self.declared.items()
        }
        docs = await anyio.to_thread.run_sync(self.store.docs_of_kind, DOC_KIND)
        for gw, name, doc in docs:
            specs[(gw, name)] = doc
        for (gw, name), found in specs.items():
            try:
                spec = (
                    found
                    if isinstance(found, Struct)
                    else parse_connector(name, {**found, "gateway": gw})
                )
                await self._run(gw, name, spec)
            except LakeSyncError as exc:
                _log.error("connector %s on gateway %s not started: %s", name, gw, exc.message)

    def _poller(self, name: str, spec: ConnectorSpec) -> Poller:
        resolved = resolve_secrets(spec, self.env, lambda p: Path(p).read_text(encoding="utf-8"))
        return Poller(
            name,
            self.source_factory(resolved),
            GatewaySink(self.service, self.store, spec.gateway, name),
            connector_client_id(name),
            spec.interval,
            lead=self._lead,
            chunk_rows=spec.chunk_rows,
            contract=spec.contract,
        )

    async def _run(
        self, gw: str, name: str, spec: ConnectorSpec, poller: Poller | None = None
    ) -> None:
        poller = poller or self._poller(name, spec)
        await self._forget(gw, name)
        resolved = resolve_secrets(spec, self.env, lambda p: Path(p).read_text(encoding="utf-8"))
        handler = open_actions(resolved)
        if handler is not None:
            self.handlers[(gw, name)] = handler
        self.pollers[(gw, name)] = poller
        poller.start()

    async def _forget(self, gw: str, name: str) -> None:
        poller = self.pollers.pop((gw, name), None)
        if poller is not None:
            await poller.stop()
        handler = self.handlers.pop((gw, name), None)
        if handler is not None:
            await handler.aclose()

    def action_handlers(self, gw: str) -> dict[str, ActionHandler]:
        """The action handlers of ``gw``'s connectors, by connector name."""
        return {name: h for (g, name), h in self.handlers.items() if g == gw}

    async def _lead(self) -> bool:
        if self.lead is None:
            return True
        return await anyio.to_thread.run_sync(self.lead)

    async def stop(self) -> None:
        """Stop every poller (each resumes from its stored cursor on the next start)."""
        for gw, name in list({*self.pollers, *self.handlers}):
            await self._forget(gw, name)

    # -- admin ----------------------------------------------------------------------------------
    async def register(self, gw: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Validate, store and (re)start a connector (``name`` plus ``type`` or ``kind`` and
        the kind's keys; its gateway is the route's); returns its redacted document."""
        name = body.get("name")
        if not isinstance(name, str):
            raise ValidationError("connector.name must be a string")
        doc = {k: v for k, v in body.items() if k not in ("gateway", "kind")}
        doc["type"] = body.get("kind", body.get("type"))
        spec = parse_connector(name, {**doc, "gateway": gw})
        poller = self._poller(name, spec)  # a missing secret or driver: 400, nothing stored
        await anyio.to_thread.run_sync(self.store.put_doc, gw, DOC_KIND, name, doc)
        await self._run(gw, name, spec, poller)
        return redact_declaration(doc)

    async def unregister(self, gw: str, name: str) -> None:
        """Stop and forget a registered connector (its cursor too); 404 if unknown."""
        removed = await anyio.to_thread.run_sync(self.store.delete_doc, gw, DOC_KIND, name)
        if not removed:
            raise NotFoundError(f"no connector {name!r} on gateway {gw!r}")
        await self._forget(gw, name)
        await anyio.to_thread.run_sync(self.store.delete_doc, gw, CURSOR_KIND, name)

    async def documents(self, gw: str) -> list[dict[str, Any]]:
        """Every connector of a gateway as the admin routes show it (credentials redacted);
        :class:`NotFoundError` for a gateway nothing is declared or stored for."""
        docs = await anyio.to_thread.run_sync(self.store.list_docs, gw, DOC_KIND)
        out = {
            name: {"name": name, "type": connector_kind(spec)}
            | {k: v for k, v in msgspec.structs.asdict(spec).items() if k != "gateway"}
            for name, spec in self.declared.items()
            if spec.gateway == gw
        }
        out |= docs
        if not out and not await self.service.knows(gw):
            raise NotFoundError(
                f"gateway {gw!r} is not known here: nothing is declared or stored for it (no "
                "schemas, sync rules, connectors or data); check the gateway id"
            )
        return [redact_declaration(body) for body in out.values()]

    async def status(self, gw: str, name: str) -> dict[str, Any]:
        """A running connector's counters, last error and stored cursor; 404 if it does not
        run here."""
        poller = self.pollers.get((gw, name))
        if poller is None:
            raise NotFoundError(f"connector {name!r} does not run on gateway {gw!r}")
        cursor = await poller.sink.load_cursor()
        return {"name": name, **msgspec.structs.asdict(poller.status), "cursor": cursor}


_METRICS = (
    ("polls", "lakesync_connector_polls", "Connector polls finished or failed"),
    ("failed_polls", "lakesync_connector_failed_polls", "Connector polls that failed"),
    ("rows_read", "lakesync_connector_rows_read", "Rows read from outside systems"),
    ("deltas_pushed", "lakesync_connector_deltas", "Deltas connectors pushed"),
    ("backpressure_waits", "lakesync_connector_backpressure_waits", "Waits on a full hot log"),
    ("rows_refused", "lakesync_connector_rows_refused", "Source rows a schema contract refused"),
    (
        "values_discarded",
        "lakesync_connector_values_discarded",
        "Source values a schema contract discarded",
    ),
)


class ConnectorMetrics(Collector):
    """The connectors' counters for ``/metrics``, read from their statuses at scrape time:
    labelled by gateway and connector, or process totals when ``by_gateway`` is false (the
    unauthenticated ``/metrics`` then names no tenant)."""

    def __init__(self, connectors: ConnectorService, by_gateway: bool) -> None:
        self.connectors = connectors
        self.by_gateway = by_gateway

    def collect(self) -> Iterator[Metric]:
        """One counter family per status counter."""
        labels = ["gateway", "connector"] if self.by_gateway else []
        pollers = list(self.connectors.pollers.items())
        for field, name, doc in _METRICS:
            family = CounterMetricFamily(name, doc, labels=labels)
            if self.by_gateway:
                for (gw, conn), poller in pollers:
                    family.add_metric([gw, conn], getattr(poller.status, field))
            else:
                family.add_metric([], sum(getattr(p.status, field) for _, p in pollers))
            yield family
