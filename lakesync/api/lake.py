"""The gateway's edge to the lake: the landing flusher and the scheduled pipeline.

``lakesync up`` runs the :class:`~lakesync.lakehouse.landing.LandingFlusher` next to the gateway
(the landing table's single writer) every ``flush_interval`` seconds and on
``POST /v1/admin/flush/{gw}`` (each flush first publishes the registered table schemas to
``lakesync.table_schemas`` for the pipeline), and, if ``pipeline_interval`` is set, a
``lakesync pipeline run`` on that schedule, and every ``compaction_interval`` seconds (default
daily) a ``lakesync compact``, both in one warm worker subprocess (Spark stays out of the
gateway process).
Several gateway processes may share one PostgreSQL hot log: the store elects one of them to run
the scheduled flushes and one to run the pipeline and the compaction
(:meth:`~lakesync.api.store.HotLog.lead`), and every flush
(scheduled or admin) runs under the store's ``landing`` mutex, so landing stays exactly once.
Without the ``pipeline`` extra the gateway still serves; the flush route then reports that nothing
was flushed.

After each pipeline run (scheduled here or run by hand) :class:`HotLogMaintenance` publishes the
gateways' new checkpoints from the lake's merged models into the store
(:mod:`lakesync.lakehouse.checkpoints`), then trims the hot log: a gateway's entries that are in the
landing table and its checkpoint leave it once older than ``hot_log_retention``. It runs every
``flush_interval`` seconds (every few seconds with scheduled flushes off) in one process of
those sharing the store.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from lakesync.api.services.status import record_landing_flush
from lakesync.api.settings import GatewaySettings
from lakesync.api.store import HotLog
from lakesync.api.store.ports import CheckpointStore, Coordination, DocumentStore
from lakesync.config import Config, ServerConfig
from lakesync.hlc import encode
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import landing_state, open_catalog
from lakesync.lakehouse.checkpoints import build_checkpoints, covered_positions
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.settings import LANDING_NAMESPACE, LakeSettings
from lakesync.lakehouse.worker import PipelineWorker, RunReply, WorkerDiedError
from lakesync.schema import parse_schema
from lakesync.status import (
    HISTORY_GATEWAY,
    HISTORY_KIND,
    PipelineRun,
    record_run,
    record_shipments,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from lakesync.destinations.metrics import DestinationMetrics

__all__ = ["HotLogMaintenance", "Lead", "SchemaPublisher", "lake_jobs"]

_TRIM_STEP = 10_000
"""Log entries deleted per store transaction while trimming (pushes wait for no longer)."""

_log = logging.getLogger(__name__)

Flusher = Callable[[str], Awaitable[None]]

_LEAD_POLL_S = 5.0
"""How often a process that does not run the pipeline checks whether it should take over."""


def _landing_flusher(
    settings: GatewaySettings, store: HotLog, config: Config | None
) -> tuple[LandingFlusher, HotLogMaintenance] | None:
    try:
        lake = (
            LakeSettings.from_env(settings.data_dir)
            if config is None
            else LakeSettings.from_config(config, settings.data_dir)
        )
        init_catalog_tables(lake)
        catalog = open_catalog(lake)
        def mark_flushed(position: int) -> None:
            store.mark_flushed(position)
            record_landing_flush(store, position)  # the status's "last flush"

        flusher = LandingFlusher(
            catalog,
            store,
            mark_flushed=mark_flushed,
            before_flush=SchemaPublisher(catalog, store),
            exclusive=lambda: store.exclusive("landing"),
        )
    except ModuleNotFoundError as exc:
        _log.warning("landing flusher off: missing %s (pip install 'lakesync[pipeline]')", exc.name)
        return None
    server = ServerConfig() if config is None else config.server
    return flusher, HotLogMaintenance(lake, catalog, store, server.hot_log_retention)


class HotLogMaintenance:
    """Publish new checkpoints from the lake (when a pipeline run moved the covered position),
    then trim each gateway's hot log through ``min(its landed position, now - retention)``; the
    store never trims past a gateway's checkpoint (see :meth:`CheckpointStore.trim_log`)."""

    def __init__(
        self,
        lake: LakeSettings,
        catalog: Catalog,
        store: CheckpointStore,
        retention_s: float,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._lake = lake
        self._catalog = catalog
        self._store = store
        self._retention_s = retention_s
        self._now = now
        self._covered: object = None
        self._gateways: list[str] = []

    def __call__(self) -> int:
        """One round; returns the log entries trimmed."""
        covered = covered_positions(self._catalog)
        if covered != self._covered:
            self._gateways = build_checkpoints(self._lake, self._store).gateways
            self._covered = covered
        position, held = landing_state(self._catalog.load_table(f"{LANDING_NAMESPACE}.landing"))
        if position is None:
            return 0
        cutoff = encode(max(0, int((self._now() - self._retention_s) * 1000)), 0)
        trimmed = 0
        for gw in self._gateways:
            bound = min(cutoff, held.get(gw, position))
            while (n := self._store.trim_log(gw, bound, _TRIM_STEP)) > 0:
                trimmed += n
                if n < _TRIM_STEP:
                    break
        return trimmed

    def run(self, stop: threading.Event, interval_s: float, lead: Lead) -> None:
        """Run a round every ``interval_s`` seconds until ``stop`` while ``lead()`` holds."""
        while not stop.wait(interval_s):
            if not lead():
                continue
            try:
                self()
            except Exception:
                _log.exception("checkpoint/trim round failed; retrying in %.0f s", interval_s)


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


class SchemaPublisher:
    """Publish every gateway's registered schemas to the lake's ``lakesync.table_schemas``
    (called before each flush; reads the lake again only when the store's schemas changed)."""

    def __init__(self, catalog: Catalog, store: DocumentStore) -> None:
        self._catalog = catalog
        self._store = store
        self._last: list[tuple[str, str, dict[str, Any]]] | None = None

    def __call__(self) -> bool:
        """True when the registry needed a commit."""
        docs = self._store.docs_of_kind("schema")
        if docs == self._last:
            return False
        changed = publish_schemas(
            self._catalog, [(gw, parse_schema(body, stored=True)) for gw, _, body in docs]
        )
        self._last = docs
        return changed


def _lake_worker_loop(
    settings: GatewaySettings,
    config: Config | None,
    stop: threading.Event,
    lead: Lead,
    shipping: DestinationMetrics | None = None,
    store: DocumentStore | None = None,
) -> None:
    """Run the pipeline every ``pipeline_interval`` seconds and the compaction every
    ``compaction_interval`` seconds (each after its previous run ended; 0 = off) until ``stop``,
    while ``lead()`` says this process is the scheduler (the others check every few seconds
    whether to take over), so two gateway processes never run or compact together. Both go to
    one warm worker process, one at a time (:class:`~lakesync.lakehouse.worker.PipelineWorker`:
    Spark stays out of the gateway process, and its session and dbt stay loaded between runs); a run
    still going at shutdown is terminated (its Iceberg commits are atomic, so the next run picks
    up where the last commit left off). Output goes to ``<data dir>/pipeline.log``; a failed run
    is logged with its error and the log's tail, and a worker that died is started again for the
    next run. A run's failed writes to fan-out secondaries are added to ``shipping`` (the
    gateway's ``/metrics``); each pipeline run and its shipments are recorded in ``store``
    (the status's history)."""
    env = dict(os.environ)
    if config is not None and config.source is not None:
        env["LAKESYNC_CONFIG"] = str(config.source.resolve())  # the gateway's own file
    worker = PipelineWorker(settings.data_dir, settings.data_dir / "pipeline.log", env)
    intervals = {
        job: interval
        for job, interval in (
            ("pipeline", settings.pipeline_interval),
            ("compaction", settings.compaction_interval),
        )
        if interval > 0
    }
    due: dict[str, float] = {}
    try:
        while True:
            if not lead():
                due = {}
                worker.close()  # another process runs the lake jobs: free the JVM's memory
                if stop.wait(_LEAD_POLL_S):
                    return
                continue
            if not due:  # just took the lead: each job waits its interval first
                due = {job: time.monotonic() + interval for job, interval in intervals.items()}
            job = min(due, key=due.__getitem__)
            if stop.wait(max(0.0, due[job] - time.monotonic())):
                return
            if not lead():
                continue
            if not _lake_job(worker, job, stop, shipping, store):
                return
            due[job] = time.monotonic() + intervals[job]
    finally:
        worker.close()


def _lake_job(
    worker: PipelineWorker,
    job: str,
    stop: threading.Event,
    shipping: DestinationMetrics | None = None,
    store: DocumentStore | None = None,
) -> bool:
    """Run one scheduled ``job`` (pipeline or compaction) on ``worker``, log its outcome, count
    its failed writes to fan-out secondaries in ``shipping`` and record a pipeline run in
    ``store``; False when ``stop`` was set meanwhile."""
    log_size = worker.log_path.stat().st_size if worker.log_path.exists() else 0
    started = time.time()
    try:
        reply = worker.compact(stop) if job == "compaction" else worker.run(stop)
    except WorkerDiedError as exc:
        error = str(exc)
        reply = RunReply(ok=False, error=error, elapsed_s=time.time() - started)
        if store is not None and job == "pipeline":
            _record_run(store, started, reply)
    else:
        if reply is None:
            return False
        if store is not None and job == "pipeline":
            _record_run(store, started, reply)
        if shipping is not None:
            for failed in reply.secondary_failures:
                shipping.secondary_failed(failed.destination, failed.secondary, failed.count)
        if reply.ok and job == "compaction":
            _log.info(
                "scheduled compaction done in %.1f s: %s (log: %s)", reply.elapsed_s,
                ", ".join(f"{t.table} {t.files_before} → {t.files_after} files"
                          for t in reply.compacted),
                worker.log_path,
            )
            return True
        if reply.ok:
            _log.info(
                "scheduled pipeline run done: %d deltas merged in %.1f s (log: %s)",
                reply.rows_merged, reply.elapsed_s, worker.log_path,
            )
            return True
        error = reply.error
    with worker.log_path.open("rb") as log:
        log.seek(max(log_size, worker.log_path.stat().st_size - 4000))
        tail = log.read().decode(errors="replace")
    _log.error("scheduled %s failed: %s\n%s", "run" if job == "pipeline" else job, error, tail)
    return True


def _record_run(store: DocumentStore, started: float, reply: RunReply) -> None:
    """Record a pipeline run and its shipments in the store's history (a failure to record is
    logged: it must not stop the schedule)."""
    run = PipelineRun(
        datetime.fromtimestamp(started, UTC), round(reply.elapsed_s, 3), reply.ok, reply.error,
        reply.rows_merged, reply.rows_shipped,
        None if reply.position is None else str(reply.position),
    )
    try:
        store.update_doc(HISTORY_GATEWAY, HISTORY_KIND, "pipeline", lambda d: record_run(d, run))
        if reply.shipments:
            at = time.time()
            store.update_doc(
                HISTORY_GATEWAY, HISTORY_KIND, "destinations",
                lambda d: record_shipments(d, reply.shipments, at),
            )
    except Exception:
        _log.exception("could not record the pipeline run in the hot log")


@contextmanager
def lake_jobs(
    settings: GatewaySettings,
    store: HotLog,
    config: Config | None = None,
    shipping: DestinationMetrics | None = None,
) -> Iterator[Flusher | None]:
    """Run the lake's background jobs while the block runs; yield the admin flush callable.

    ``config`` is the gateway's resolved configuration (its ``lake:`` section and file reach the
    flusher and the scheduled pipeline); without it they read the environment's. Scheduled
    runs' failed writes to fan-out secondaries are counted in ``shipping``."""
    jobs = _landing_flusher(settings, store, config)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    flusher: Flusher | None = None
    if jobs is not None:
        landing, maintenance = jobs
        flush = landing.flush

        async def flusher(gw: str) -> None:
            await anyio.to_thread.run_sync(flush)

        if settings.flush_interval > 0:
            threads.append(
                threading.Thread(
                    target=landing.run,
                    args=(stop,),
                    kwargs={
                        "interval_s": settings.flush_interval,
                        "lead": Lead(store, "landing", "scheduled landing flush"),
                    },
                    name="landing-flusher",
                    daemon=True,
                )
            )
        if settings.pipeline_interval > 0 or settings.compaction_interval > 0:
            lead = Lead(store, "pipeline", "scheduled pipeline and compaction")
            threads.append(
                threading.Thread(
                    target=_lake_worker_loop,
                    args=(settings, config, stop, lead, shipping, store),
                    name="pipeline",
                    daemon=True,
                )
            )
        threads.append(
            threading.Thread(
                target=maintenance.run,
                args=(
                    stop,
                    settings.flush_interval or _LEAD_POLL_S,
                    Lead(store, "checkpoint", "checkpoints and hot-log trimming"),
                ),
                name="checkpoints",
                daemon=True,
            )
        )
    for t in threads:
        t.start()
    try:
        yield flusher
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
