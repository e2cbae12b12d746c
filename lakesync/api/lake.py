"""The gateway's edge to the lake: it starts and stops the lake's scheduled jobs.

``lakesync up`` runs :func:`lake_jobs` for its lifetime: the landing flusher, the scheduled
pipeline and compaction, checkpoints and hot-log trimming, all in
:mod:`lakesync.lakehouse.schedule` (which says when each runs). The gateway hands them its
store (its port :class:`~lakesync.hotlog.ports.LakeStore`), its intervals (``flush_interval``,
``pipeline_interval``, ``compaction_interval``) and a :class:`Lead` per role, so several gateway
processes sharing one PostgreSQL hot log run each job in one process only
(:meth:`~lakesync.hotlog.ports.Coordination.lead`), and turns the landing flush into the admin
flush route's awaitable. Without the ``pipeline`` extra the gateway still serves; the
flush route then reports that nothing was flushed. Each landing flush and each scheduled
pipeline run (with its shipments) is recorded in the store's status history
(:mod:`lakesync.status`, read by ``GET /v1/admin/status``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import anyio.to_thread

from lakesync.api.services.status import record_landing_flush
from lakesync.api.settings import GatewaySettings
from lakesync.config import Config
from lakesync.errors import is_store_outage
from lakesync.hotlog.ports import Coordination, LakeStore
from lakesync.lakehouse.history import record_pipeline_run, record_shipped
from lakesync.lakehouse.runtime import WorkerJobs
from lakesync.lakehouse.schedule import (
    HotLogMaintenance,
    LakeSchedule,
    SchemaPublisher,
    scheduled_lake_jobs,
)

if TYPE_CHECKING:
    from lakesync.destinations.metrics import DestinationMetrics

# HotLogMaintenance and SchemaPublisher live in lakesync.lakehouse.schedule, the recorders in
# lakesync.lakehouse.history; re-exported here.
__all__ = [
    "HotLogMaintenance", "Lead", "SchemaPublisher", "lake_jobs", "record_pipeline_run",
    "record_shipped",
]

_log = logging.getLogger(__name__)

Flusher = Callable[[str], Awaitable[None]]


class Lead:
    """Whether this process leads ``role`` on the store (see :meth:`Coordination.lead`); logs each
    change, so an operator sees which gateway process runs which lake job."""

    def __init__(self, store: Coordination, role: str, job: str) -> None:
        self._store = store
        self._role = role
        self._job = job
        self._held: bool | None = None

    def __call__(self) -> bool:
        """Ask the store, taking the lead if nobody holds it; False while the store cannot be
        reached (the job waits, logged once)."""
        down = ""
        try:
            held: bool | None = self._store.lead(self._role)
        except Exception as exc:
            if not is_store_outage(exc):
                raise
            held, down = None, type(exc).__name__
        if held != self._held:
            if held:
                _log.info("%s: this gateway process (pid %d) runs it", self._job, os.getpid())
            elif held is None:
                _log.warning("%s: waits, the hot-log store cannot be reached (%s)", self._job,
                             down)
            else:
                _log.info("%s: another gateway process on this store runs it", self._job)
            self._held = held
        return bool(held)


@contextmanager
def lake_jobs(
    settings: GatewaySettings,
    store: LakeStore,
    config: Config | None = None,
    shipping: DestinationMetrics | None = None,
    asked: WorkerJobs | None = None,
) -> Iterator[Flusher | None]:
    """Run the lake's scheduled jobs (:func:`lakesync.lakehouse.schedule.scheduled_lake_jobs`)
    while the block runs; yield the admin flush callable (None without the ``pipeline`` extra).

    ``config`` is the gateway's resolved configuration (its ``lake:`` section and file reach the
    flusher and the scheduled pipeline); without it they read the environment's. Scheduled
    runs' failed writes to fan-out secondaries are counted in ``shipping``; ``asked`` takes the
    runs the command line hands to the worker (``POST /v1/admin/lake/run``), recorded like the
    scheduled ones."""
    schedule = LakeSchedule(
        data_dir=settings.data_dir,
        flush_interval=settings.flush_interval,
        pipeline_interval=settings.pipeline_interval,
        compaction_interval=settings.compaction_interval,
    )
    with scheduled_lake_jobs(
        schedule,
        store,
        lambda role, job: Lead(store, role, job),
        config,
        shipping,
        on_flushed=lambda position: record_landing_flush(store, position),
        on_run=lambda started, reply: record_pipeline_run(store, started, reply),
        asked=asked,
    ) as flush:
        if flush is None:
            yield None
            return
        landing_flush = flush

        async def flusher(gw: str) -> None:
            await anyio.to_thread.run_sync(landing_flush)

        yield flusher


