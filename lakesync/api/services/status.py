"""The gateway's status (``GET /v1/admin/status``): reads the hot log, the recorded run history,
the connectors running here, the hub and each declared destination's watermarks; the shape and
the "failing" rule are :mod:`lakesync.status`'s.

Every string of an answer passes through one :class:`~lakesync.redaction.Redactor` of the
secrets the gateway knows (errors of destinations, connectors and runs may quote a DSN).

Backlogs are counted by reading the hot log after a position, at most :data:`COUNT_LIMIT`
entries per read (a status call stays cheap on a large log; more shows as ``capped``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import msgspec

from lakesync.api.services.connectors import ConnectorService
from lakesync.api.services.sync import SyncService
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.factory import destination_kind, open_destination
from lakesync.errors import LakeSyncError, NotFoundError
from lakesync.hotlog.ports import DocumentStore, StatusStore
from lakesync.redaction import Redactor, redact_strings
from lakesync.status import (
    HISTORY_GATEWAY,
    HISTORY_KIND,
    Backlog,
    DestinationStatus,
    DestinationTable,
    GatewayStatus,
    HotLogStatus,
    LandingStatus,
    PipelineStatus,
    Refusals,
    StatusResponse,
    backlog,
    connector_health,
    freshness,
    problems,
    record_flush,
    runs_of,
    shipment_fields,
)

__all__ = ["COUNT_LIMIT", "PROBE_TIMEOUT_S", "StatusService", "record_landing_flush"]

_log = logging.getLogger(__name__)

COUNT_LIMIT = 10_000
"""Hot-log entries read per backlog count."""
PROBE_TIMEOUT_S = 5.0
"""How long a destination may take to answer its watermarks before it counts as unreachable."""

Watermarks = dict[str, int | None]


def record_landing_flush(store: DocumentStore, position: int) -> None:
    """Note in the store that a landing flush landed deltas through ``position`` now (the
    flusher's ``mark_flushed`` hook calls it right after the store's own)."""
    store.put_doc(HISTORY_GATEWAY, HISTORY_KIND, "landing", record_flush(position, time.time()))


def _error_text(exc: Exception) -> str:
    return exc.message if isinstance(exc, LakeSyncError) else f"{type(exc).__name__}: {exc}"


def _read_watermarks(spec: DestinationSpec, tables: list[str]) -> Watermarks:
    """Each table's watermark in the destination (I/O: connects to it)."""
    with open_destination(spec) as dest:
        return {t: dest.watermark(t) for t in tables}


class StatusService:
    """Builds :class:`~lakesync.status.StatusResponse` for one gateway or every known one."""

    def __init__(
        self,
        service: SyncService,
        store: StatusStore,
        connectors: ConnectorService,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._service = service
        self._store = store
        self._connectors = connectors
        self._now = now
        self._redact = Redactor(
            service.settings.known_secrets(
                connectors.env, lambda p: Path(p).read_text(encoding="utf-8")
            )
        )

    async def known_gateways(self) -> list[str]:
        """Every gateway declared in the configuration, running a connector or served here, with
        schemas or connectors stored in the hot log, or with deltas not landed yet."""
        s = self._service.settings
        found = {*s.gateways, *(c.gateway for c in s.connectors.values())}
        found |= {d.gateway for d in s.destinations.values()}
        found |= {gw for gw, _ in self._connectors.pollers}
        found |= set(self._service.clients.gateways())
        found |= await anyio.to_thread.run_sync(self._stored_gateways)
        found.discard(HISTORY_GATEWAY)
        return sorted(found)

    def _stored_gateways(self) -> set[str]:
        store = self._store
        found = {gw for kind in ("schema", "connector") for gw, _, _ in store.docs_of_kind(kind)}
        return found | {gw for _, gw, _ in store.read_log(store.flushed_position(), COUNT_LIMIT)}

    async def gateway_status(self, gw: str) -> StatusResponse:
        """The status of one gateway; :class:`NotFoundError` for a gateway nothing is declared
        or stored for (a mistyped id would otherwise show all is well)."""
        if not await self._service.knows(gw):
            raise NotFoundError(
                f"gateway {gw!r} is not known here: nothing is declared or stored for it; "
                "check the gateway id"
            )
        return await self.status([gw])

    async def status(self, gateways: list[str]) -> StatusResponse:
        """The status of ``gateways`` and of this process."""
        out = [await self._gateway(gw) for gw in gateways]
        refusals = Refusals(
            *(
                self._service.metrics.errors_of(code)
                for code in ("VALIDATION_ERROR", "FORBIDDEN", "SCHEMA_ERROR")
            )
        )
        status = StatusResponse(
            datetime.fromtimestamp(self._now(), UTC),
            out,
            refusals,
            [line for g in out for line in g.failing],
        )
        shown = redact_strings(msgspec.to_builtins(status), self._redact)
        return msgspec.convert(shown, StatusResponse)

    async def _gateway(self, gw: str) -> GatewayStatus:
        specs = [d for d in self._service.settings.destinations.values() if d.gateway == gw]
        probed = {spec.name: await self._probe(gw, spec) for spec in specs}
        status = await anyio.to_thread.run_sync(self._read, gw, specs, probed)
        return msgspec.structs.replace(status, failing=problems(status))

    async def _probe(self, gw: str, spec: DestinationSpec) -> Watermarks | str | None:
        """A destination's watermarks, or why they could not be read (None: a destination in
        the lake, whose watermarks only the pipeline reads)."""
        if destination_kind(spec.kind).type.lives_in_lake:
            return None
        tables = spec.tables
        if tables is None:
            docs = await anyio.to_thread.run_sync(self._store.list_docs, gw, "schema")
            tables = sorted(docs)
        # A routed table's watermark lives in the destination it is routed to.
        tables = [t for t in tables if t not in spec.routes]
        try:
            with anyio.fail_after(PROBE_TIMEOUT_S):
                return await anyio.to_thread.run_sync(
                    _read_watermarks, spec, tables, abandon_on_cancel=True
                )
        except TimeoutError:
            return f"no answer within {PROBE_TIMEOUT_S:.0f} s"
        except Exception as exc:  # any failure to read it is what the status reports
            _log.info("status: destination %s unreadable: %s", spec.name, exc)
            return _error_text(exc)

    def _read(
        self,
        gw: str,
        specs: list[DestinationSpec],
        probed: Mapping[str, Watermarks | str | None],
    ) -> GatewayStatus:
        """Everything the store holds for the gateway's status (runs in a worker thread)."""
        store, now = self._store, self._now()
        reads: dict[int, list[tuple[int, str]]] = {}

        def after(position: int) -> Backlog:
            # One read per distinct position (most gateways: flushed, pipeline, a watermark).
            if position not in reads:
                reads[position] = [
                    (h, d.table) for h, _, d in store.read_log(position, COUNT_LIMIT, gw)
                ]
            return backlog((h for h, _ in reads[position]), position, COUNT_LIMIT, now)

        def after_table(position: int, table: str) -> Backlog:
            after(position)
            rows = [h for h, t in reads[position] if t == table]
            return backlog(rows, position, COUNT_LIMIT, now)

        docs = store.list_docs(HISTORY_GATEWAY, HISTORY_KIND)
        history = {name: docs.get(name) for name in ("landing", "pipeline", "destinations")}
        flushed = store.flushed_position()
        held = after(store.trimmed_through(gw))
        unflushed = after(flushed)
        hot_log = HotLogStatus(
            held.deltas, held.capped, store.unflushed_bytes(), str(store.head()),
            unflushed.oldest_age_s,
        )
        landing_doc = history["landing"] or {}
        landing = LandingStatus(
            datetime.fromtimestamp(landing_doc["last_flush_at"], UTC)
            if "last_flush_at" in landing_doc else None,
            str(flushed),
            unflushed,
        )
        runs = runs_of(history["pipeline"])
        position = next((int(r.position) for r in runs if r.position), None)
        pipeline = PipelineStatus(
            self._service.settings.pipeline_interval > 0,
            runs,
            freshness(position, now),
            after(position or 0),
        )
        destinations = [
            self._destination(spec, probed[spec.name], history["destinations"], after_table)
            for spec in specs
        ]
        connectors = [
            connector_health(name, msgspec.structs.asdict(poller.status))
            for (g, name), poller in sorted(self._connectors.pollers.items())
            if g == gw
        ]
        clients = self._service.clients.clients(gw, self._service.hub.clients_of(gw))
        return GatewayStatus(gw, hot_log, landing, pipeline, destinations, connectors, clients, [])

    @staticmethod
    def _destination(
        spec: DestinationSpec,
        probed: Watermarks | str | None,
        doc: dict[str, Any] | None,
        after_table: Callable[[int, str], Backlog],
    ) -> DestinationStatus:
        recorded = shipment_fields(doc, spec.name)
        if not isinstance(probed, dict):
            return DestinationStatus(spec.name, spec.kind, [], Backlog(), probed, **recorded)
        tables = [
            DestinationTable(
                t,
                None if mark is None else str(mark),
                after_table(mark or 0, t),
            )
            for t, mark in probed.items()
        ]
        worst = max(
            (t.lag for t in tables),
            key=lambda b: (b.oldest_age_s or 0.0, b.deltas),
            default=Backlog(),
        )
        return DestinationStatus(spec.name, spec.kind, tables, worst, None, **recorded)

