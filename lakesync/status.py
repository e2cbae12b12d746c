"""What ``GET /v1/admin/status`` and ``lakesync status`` show, and what counts as failing (pure).

The gateway's status service (:mod:`lakesync.api.services.status`) reads the hot log, the
connectors, the hub and the declared destinations; this module holds the answer's typed shape,
the arithmetic on hot-log positions (a backlog after a position: how many deltas, how old the
oldest), the run history the gateway records in the hot log's documents (pipeline runs, landing
flushes, shipments per destination) and :func:`problems`, the one rule for "something is
failing" that the CLI's exit code follows. No I/O here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec

from lakesync.hlc import decode

__all__ = [
    "DEAD_LETTERS_HEADER",
    "HISTORY_GATEWAY",
    "HISTORY_KIND",
    "OUTBOX_HEADER",
    "RUNS_KEPT",
    "Backlog",
    "ClientActivity",
    "ClientStatus",
    "ConnectorStatus",
    "DestinationStatus",
    "DestinationTable",
    "GatewayStatus",
    "HotLogStatus",
    "LandingStatus",
    "PipelineRun",
    "PipelineStatus",
    "Refusals",
    "Shipment",
    "StatusResponse",
    "backlog",
    "connector_health",
    "freshness",
    "hlc_time",
    "problems",
    "record_flush",
    "record_run",
    "record_shipments",
    "reported_count",
    "runs_of",
    "shipment_fields",
]

HISTORY_GATEWAY = "*"
"""The gateway id the store-wide history documents are filed under: no gateway id can be it
(ids follow the identifier rule), so they never show up as a gateway's own documents."""
HISTORY_KIND = "status"
"""Their document kind: names ``landing``, ``pipeline`` and ``destinations``."""
RUNS_KEPT = 20
"""Pipeline runs kept in the history (newest first)."""
OUTBOX_HEADER = "X-LakeSync-Outbox"
"""A client may report its pending outbox (deltas not yet acknowledged) on push and pull."""
DEAD_LETTERS_HEADER = "X-LakeSync-Dead-Letters"
"""A client may report how many of its deltas the gateway refused for good (dead letters)."""


class Backlog(msgspec.Struct, frozen=True):
    """The deltas after a position: how many (at most the count read, ``capped`` when there
    were more) and the age in seconds of the oldest (None: none waiting)."""

    deltas: int = 0
    capped: bool = False
    oldest_age_s: float | None = None


class HotLogStatus(msgspec.Struct, frozen=True):
    """The gateway's entries in the hot log (``capped``: at least that many), the store's
    un-flushed bytes and head, and the age of the gateway's oldest un-flushed delta."""

    entries: int
    entries_capped: bool
    unflushed_bytes: int
    head: str
    oldest_unflushed_age_s: float | None


class LandingStatus(msgspec.Struct, frozen=True):
    """The landing flush: when it last landed deltas (None: not since this history began),
    through which position, and the gateway's deltas not landed yet."""

    last_flush_at: datetime | None
    flushed_position: str
    lag: Backlog


class PipelineRun(msgspec.Struct, frozen=True):
    """One recorded pipeline run (scheduled by a gateway): when, how long, its outcome, the
    deltas it merged and the landing position its models are complete through."""

    started_at: datetime
    elapsed_s: float
    ok: bool
    error: str = ""
    rows_merged: int = 0
    rows_shipped: int = 0
    position: str | None = None


class PipelineStatus(msgspec.Struct, frozen=True):
    """The scheduled pipeline: whether this gateway schedules one, its last runs (newest
    first), the age of the newest delta the models hold and the gateway's deltas they lack."""

    scheduled: bool
    runs: list[PipelineRun]
    freshness_s: float | None
    lag: Backlog


class Shipment(msgspec.Struct, frozen=True):
    """A run's shipping of one table to one destination (recorded per destination)."""

    destination: str
    table: str
    rows: int = 0
    error: str | None = None


class DestinationTable(msgspec.Struct, frozen=True):
    """One shipped table: its watermark (the lake position shipped; None: never) and the
    gateway's deltas of the table after it."""

    table: str
    watermark: str | None
    lag: Backlog


class DestinationStatus(msgspec.Struct, frozen=True):
    """A declared destination: its watermarks as read just now (``error`` when it could not be
    read: unreachable, refused), the largest lag of its tables, and its last recorded
    shipment and shipping error."""

    name: str
    kind: str
    tables: list[DestinationTable]
    lag: Backlog
    error: str | None = None
    last_shipment_at: datetime | None = None
    last_rows: int = 0
    last_error: str | None = None
    last_error_at: datetime | None = None


class ConnectorStatus(msgspec.Struct, frozen=True):
    """A connector running in this process: state, last poll, rows read, last error (and when;
    ``failing`` when no poll succeeded since)."""

    name: str
    state: str
    last_poll_at: datetime | None
    rows_read: int
    last_error: str | None
    last_error_at: datetime | None
    failing: bool


class ClientStatus(msgspec.Struct, frozen=True):
    """A client this process served: its open WebSockets, when it was last seen, and what it
    last reported of its outbox and dead letters (None: never reported)."""

    client_id: str
    connections: int
    last_seen_at: datetime | None
    pending_outbox: int | None = None
    dead_letters: int | None = None


class Refusals(msgspec.Struct, frozen=True):
    """Requests this process refused since it started: bad input (``VALIDATION_ERROR``), write
    access (``FORBIDDEN``) and schema contracts (``SCHEMA_ERROR``)."""

    validation: int = 0
    write_access: int = 0
    contract: int = 0


class GatewayStatus(msgspec.Struct, frozen=True):
    """Everything about one gateway, and what is failing (empty: all is well)."""

    gateway: str
    hot_log: HotLogStatus
    landing: LandingStatus
    pipeline: PipelineStatus
    destinations: list[DestinationStatus]
    connectors: list[ConnectorStatus]
    clients: list[ClientStatus]
    failing: list[str]


class StatusResponse(msgspec.Struct, frozen=True):
    """``GET /v1/admin/status``: when it was taken, each gateway's status, this process's
    refusals and every failing thing, named (empty: all is well)."""

    generated_at: datetime
    gateways: list[GatewayStatus]
    refusals: Refusals
    failing: list[str]


def reported_count(value: str | None) -> int | None:
    """A count a client reported in a header (None: absent or not a small decimal integer;
    the figure is informational, so a malformed one is ignored, never refused)."""
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 12:
        return None
    return int(value)


def hlc_time(position: int) -> datetime | None:
    """The wall time of an HLC position (None for 0: no position)."""
    if position <= 0:
        return None
    return datetime.fromtimestamp(decode(position)[0] / 1000, UTC)


def _age(position: int, now: float) -> float:
    return max(0.0, now - decode(position)[0] / 1000)


def backlog(ingests: Iterable[int], after: int, limit: int, now: float) -> Backlog:
    """The backlog after ``after`` among the ascending ingest HLCs read (at most ``limit`` were
    asked for, so reading ``limit`` means there may be more)."""
    waiting = [h for h in ingests if h > after]
    if not waiting:
        return Backlog()
    return Backlog(len(waiting), len(waiting) >= limit, round(_age(waiting[0], now), 3))


def freshness(position: int | None, now: float) -> float | None:
    """The age in seconds of the newest delta the models hold (None: no run recorded one)."""
    return None if not position else round(_age(position, now), 3)


def _at(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def connector_health(name: str, fields: Mapping[str, Any]) -> ConnectorStatus:
    """Shape a poller's :class:`lakesync.connectors.poller.ConnectorStatus` fields: it is
    failing when its last error is newer than its last successful poll."""
    error_at, success = fields.get("last_error_at"), fields.get("last_success")
    failing = fields.get("last_error") is not None and (success is None or error_at > success)
    return ConnectorStatus(
        name,
        str(fields.get("state", "")),
        _at(fields.get("last_poll_started")),
        int(fields.get("rows_read", 0)),
        fields.get("last_error"),
        _at(error_at),
        bool(failing),
    )


def record_run(doc: dict[str, Any] | None, run: PipelineRun) -> dict[str, Any]:
    """The pipeline history document with ``run`` added (newest first, :data:`RUNS_KEPT`)."""
    runs = [msgspec.to_builtins(run), *(doc or {}).get("runs", [])]
    return {"runs": runs[:RUNS_KEPT]}


def runs_of(doc: dict[str, Any] | None) -> list[PipelineRun]:
    """The recorded runs of a pipeline history document."""
    return msgspec.convert((doc or {}).get("runs", []), list[PipelineRun], strict=False)


def record_flush(position: int, at: float) -> dict[str, Any]:
    """The landing history document after a flush landed deltas through ``position``."""
    return {"last_flush_at": at, "position": str(position)}


def record_shipments(
    doc: dict[str, Any] | None, shipments: Iterable[Shipment], at: float
) -> dict[str, Any]:
    """The destinations history document after a run shipped ``shipments``: per destination
    the time and rows of its last shipment, and its last error (cleared by a clean one)."""
    out = dict(doc or {})
    by_destination: dict[str, list[Shipment]] = {}
    for s in shipments:
        by_destination.setdefault(s.destination, []).append(s)
    for name, done in by_destination.items():
        errors = [f"{s.table}: {s.error}" for s in done if s.error]
        entry = dict(out.get(name, {}))
        entry.update(last_shipment_at=at, last_rows=sum(s.rows for s in done))
        if errors:
            entry.update(last_error="; ".join(errors), last_error_at=at)
        else:
            entry.update(last_error=None)
        out[name] = entry
    return out


def shipment_fields(doc: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """A destination's recorded shipment fields, as :class:`DestinationStatus` takes them."""
    entry = (doc or {}).get(name, {})
    return {
        "last_shipment_at": _at(entry.get("last_shipment_at")),
        "last_rows": int(entry.get("last_rows", 0)),
        "last_error": entry.get("last_error"),
        "last_error_at": _at(entry.get("last_error_at")),
    }


def problems(gw: GatewayStatus) -> list[str]:
    """What is failing in a gateway, one line each naming it: a destination that cannot be
    read or whose last shipment failed, a connector whose last poll failed, a last pipeline
    run that failed."""
    out: list[str] = []
    for d in gw.destinations:
        if d.error is not None:
            out.append(f"{gw.gateway}: destination {d.name} unreachable: {d.error}")
        elif d.last_error is not None:
            out.append(f"{gw.gateway}: destination {d.name} last shipment failed: {d.last_error}")
    out += [
        f"{gw.gateway}: connector {c.name} failing: {c.last_error}"
        for c in gw.connectors
        if c.failing
    ]
    if gw.pipeline.runs and not gw.pipeline.runs[0].ok:
        out.append(f"{gw.gateway}: last pipeline run failed: {gw.pipeline.runs[0].error}")
    return out


class ClientActivity:
    """When each client was last seen by this process, and what it last reported of its outbox
    and dead letters; at most ``per_gateway`` clients per gateway (the least recent go)."""

    def __init__(self, per_gateway: int = 1000) -> None:
        self._per_gateway = per_gateway
        self._seen: dict[str, OrderedDict[str, tuple[float, int | None, int | None]]] = {}

    def seen(
        self, gateway: str, client: str, at: float,
        outbox: int | None = None, dead_letters: int | None = None,
    ) -> None:
        """Note a request of ``client``; figures it did not report keep their last value."""
        clients = self._seen.setdefault(gateway, OrderedDict())
        _, old_outbox, old_dead = clients.pop(client, (at, None, None))
        clients[client] = (
            at,
            old_outbox if outbox is None else outbox,
            old_dead if dead_letters is None else dead_letters,
        )
        while len(clients) > self._per_gateway:
            clients.popitem(last=False)

    def gateways(self) -> list[str]:
        """The gateways whose clients were seen."""
        return list(self._seen)

    def clients(self, gateway: str, connected: Mapping[str, int]) -> list[ClientStatus]:
        """Every client seen or connected, most recently seen first."""
        seen = self._seen.get(gateway, OrderedDict())
        out = [
            ClientStatus(client, connected.get(client, 0), _at(at), outbox, dead)
            for client, (at, outbox, dead) in reversed(seen.items())
        ]
        out += [ClientStatus(c, n, None) for c, n in sorted(connected.items()) if c not in seen]
        return out
