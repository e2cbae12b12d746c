"""The gateway's edge to the lake: it starts and stops the lake's scheduled jobs.

``lakesync up`` runs :func:`lake_jobs` for its lifetime: the landing flusher, the scheduled
pipeline and compaction, checkpoints and hot-log trimming, all in
:mod:`lakesync.lakehouse.schedule` (which says when each runs). The gateway hands them its
store, its intervals (``flush_interval``, ``pipeline_interval``, ``compaction_interval``) and a
:class:`Lead` per role, so several gateway processes sharing one PostgreSQL hot log run each job
in one process only (:meth:`~lakesync.api.store.HotLog.lead`), and turns the landing flush into
the admin flush route's awaitable. Without the ``pipeline`` extra the gateway still serves; the
flush route then reports that nothing was flushed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import anyio.to_thread

from lakesync.api.settings import GatewaySettings
from lakesync.api.store import HotLog
from lakesync.api.store.ports import Coordination
from lakesync.config import Config
from lakesync.lakehouse.schedule import (
    HotLogMaintenance,
    LakeSchedule,
    SchemaPublisher,
    scheduled_lake_jobs,
)

if TYPE_CHECKING:
    from lakesync.destinations.metrics import DestinationMetrics

# HotLogMaintenance and SchemaPublisher live in lakesync.lakehouse.schedule; re-exported here.
__all__ = ["HotLogMaintenance", "Lead", "SchemaPublisher", "lake_jobs"]

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
        """Ask the store, taking the lead if nobody holds it."""
        held = self._store.lead(self._role)
        if held != self._held:
            if held:
                _log.info("%s: this gateway process (pid %d) runs it", self._job, os.getpid())
            else:
                _log.info("%s: another gateway process on this store runs it", self._job)
            self._held = held
        return held


@contextmanager
def lake_jobs(
    settings: GatewaySettings,
    store: HotLog,
    config: Config | None = None,
    shipping: DestinationMetrics | None = None,
) -> Iterator[Flusher | None]:
    """Run the lake's scheduled jobs (:func:`lakesync.lakehouse.schedule.scheduled_lake_jobs`)
    while the block runs; yield the admin flush callable (None without the ``pipeline`` extra).

    ``config`` is the gateway's resolved configuration (its ``lake:`` section and file reach the
    flusher and the scheduled pipeline); without it they read the environment's. Scheduled
    runs' failed writes to fan-out secondaries are counted in ``shipping``."""
    schedule = LakeSchedule(
        data_dir=settings.data_dir,
        flush_interval=settings.flush_interval,
        pipeline_interval=settings.pipeline_interval,
        compaction_interval=settings.compaction_interval,
    )
    with scheduled_lake_jobs(
        schedule, store, lambda role, job: Lead(store, role, job), config, shipping
    ) as flush:
        if flush is None:
            yield None
            return
        landing_flush = flush

        async def flusher(gw: str) -> None:
            await anyio.to_thread.run_sync(landing_flush)

        yield flusher
