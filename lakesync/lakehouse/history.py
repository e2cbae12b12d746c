"""The lake's runs in the status history (the hot-log store's documents that ``lakesync
status`` and the console read): a pipeline run and its shipments, whether the gateway's
scheduler or a command run without it made them."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from lakesync.hotlog.ports import DocumentStore
from lakesync.status import (
    HISTORY_GATEWAY,
    HISTORY_KIND,
    PipelineRun,
    Shipment,
    record_run,
    record_shipments,
)

if TYPE_CHECKING:
    from lakesync.lakehouse.shipping import ShipResult

__all__ = ["RunOutcome", "record_pipeline_run", "record_shipped", "shipments"]

_log = logging.getLogger(__name__)


class RunOutcome(Protocol):
    """What the history keeps of a run (the worker's ``RunReply`` is one)."""

    @property
    def ok(self) -> bool: ...
    @property
    def error(self) -> str: ...
    @property
    def elapsed_s(self) -> float: ...
    @property
    def rows_merged(self) -> int: ...
    @property
    def rows_shipped(self) -> int: ...
    @property
    def position(self) -> int | None: ...
    @property
    def shipments(self) -> list[Shipment]: ...


def shipments(shipped: list[ShipResult]) -> list[Shipment]:
    """What the status keeps of each table a run shipped."""
    return [Shipment(s.destination, s.table, s.rows, s.error) for s in shipped]


def record_pipeline_run(store: DocumentStore, started: float, reply: RunOutcome) -> None:
    """Record a pipeline run (started at ``started``, epoch seconds) and its shipments in the
    store's history. A failure to record is logged: it must not stop the schedule or fail a
    run that was done."""
    run = PipelineRun(
        datetime.fromtimestamp(started, UTC), round(reply.elapsed_s, 3), reply.ok, reply.error,
        reply.rows_merged, reply.rows_shipped,
        None if reply.position is None else str(reply.position),
    )
    try:
        store.update_doc(HISTORY_GATEWAY, HISTORY_KIND, "pipeline", lambda d: record_run(d, run))
    except Exception:
        _log.exception("could not record the pipeline run in the hot log")
        return
    record_shipped(store, reply.shipments)


def record_shipped(store: DocumentStore, shipped: list[Shipment]) -> None:
    """Record shipments (a pipeline run's, or ``lakesync materialise``'s) in the store's
    history, where the status reads each destination's last shipment (a failure to record is
    logged)."""
    if not shipped:
        return
    at = time.time()
    try:
        store.update_doc(
            HISTORY_GATEWAY, HISTORY_KIND, "destinations",
            lambda d: record_shipments(d, shipped, at),
        )
    except Exception:
        _log.exception("could not record the shipments in the hot log")
