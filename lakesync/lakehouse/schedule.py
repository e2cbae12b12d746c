"""The lake's scheduled jobs next to a gateway: landing flushes, pipeline runs, compaction,
checkpoints and hot-log trimming (declared in :mod:`lakesync.lakehouse.jobs`, run by the one
scheduler :class:`~lakesync.lakehouse.runtime.LakeRuntime`, three lanes: ``landing-flusher``,
``pipeline`` and ``checkpoints``).

``lakesync up`` starts them with :func:`scheduled_lake_jobs` and stops them at shutdown (the
gateway's edge is :mod:`lakesync.api.lake`); they reach the gateway's hot-log store through its
port :class:`~lakesync.hotlog.ports.LakeStore` only:

- the :class:`~lakesync.lakehouse.landing.LandingFlusher` (the landing table's single writer)
  every ``flush_interval`` seconds and on ``POST /v1/admin/flush/{gw}`` (each flush first
  publishes the registered table schemas to ``lakesync.table_schemas`` for the pipeline,
  :class:`SchemaPublisher`);
- if ``pipeline_interval`` is set, a ``lakesync pipeline run`` on that schedule, and every
  ``compaction_interval`` seconds (default daily) a ``lakesync compact``, both in one warm
  worker subprocess (:mod:`lakesync.lakehouse.worker`: Spark stays out of the gateway process);
- the runs ``lakesync pipeline run``, ``materialise`` and ``compact`` hand over
  (:class:`~lakesync.lakehouse.runtime.WorkerJobs`, ``POST /v1/admin/lake/run``): on the same
  warm worker, one at a time, each after the run going on;
- :class:`HotLogMaintenance`: after each pipeline run (scheduled here or run by hand) it
  publishes the gateways' new checkpoints from the lake's merged models into the store
  (:mod:`lakesync.lakehouse.checkpoint_builder`), then trims the hot log: a gateway's entries
  that are in the landing table and its checkpoint leave it once older than
  ``hot_log_retention``. It runs every ``flush_interval`` seconds (every few seconds with
  scheduled flushes off).

Several gateway processes may share one PostgreSQL hot log: each job runs while its ``lead``
(given by the caller, one per role: ``landing``, ``pipeline``, ``checkpoint``) says this process
is the one to, and every flush (scheduled or admin) runs under the store's ``landing`` mutex, so
landing stays exactly once. Without the ``pipeline`` extra nothing is scheduled and
:func:`scheduled_lake_jobs` yields no flush.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakesync.config import Config, ServerConfig
from lakesync.hlc import encode
from lakesync.hotlog.ports import DocumentStore, LakeStore
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import (
    CatalogUnavailableError,
    catalog_failure,
    catalog_opener,
    deferred_catalog,
    landing_state,
)
from lakesync.lakehouse.checkpoint_builder import build_checkpoints
from lakesync.lakehouse.jobs import JOBS, JobName, JobSpec
from lakesync.lakehouse.lake_position import covered_positions
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.runtime import (
    LEAD_POLL_S,
    AskedJob,
    InProcess,
    LakeRuntime,
    Lane,
    WorkerJobs,
    describe,
)
from lakesync.lakehouse.settings import LANDING_NAMESPACE, LakeSettings
from lakesync.lakehouse.worker import (
    PipelineWorker,
    RunReply,
    RunRequest,
    WorkerDiedError,
)
from lakesync.schema import parse_schema

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from lakesync.destinations.metrics import DestinationMetrics

__all__ = [
    "LEAD_POLL_S",
    "AskedJob",
    "HotLogMaintenance",
    "LakeSchedule",
    "LeadFor",
    "OnWorker",
    "RunHook",
    "SchemaPublisher",
    "WorkerJobs",
    "scheduled_lake_jobs",
]

_TRIM_STEP = 10_000
"""Log entries deleted per store transaction while trimming (pushes wait for no longer)."""

_log = logging.getLogger(__name__)

RunHook = Callable[[float, RunReply], None]
"""Called after each scheduled pipeline run with its start (``time.time()``) and its reply (a
worker that died is a failed reply), e.g. to record it for the gateway's status."""

LeadFor = Callable[[str, str], Callable[[], bool]]
"""``lead_for(role, job)``: a callable that says whether this process leads ``role`` now (among
the processes sharing the store); ``job`` names it in the log."""


@dataclass(frozen=True, slots=True)
class LakeSchedule:
    """When the lake's jobs run, in seconds (0: that job is off), and the data dir they use."""

    data_dir: Path
    flush_interval: float
    pipeline_interval: float
    compaction_interval: float


def _landing_jobs(
    schedule: LakeSchedule,
    store: LakeStore,
    config: Config | None,
    on_flushed: Callable[[int], None] | None,
) -> tuple[LandingFlusher, HotLogMaintenance] | None:
    try:
        lake = (
            LakeSettings.from_env(schedule.data_dir)
            if config is None
            else LakeSettings.from_config(config, schedule.data_dir)
        )
        init_catalog_tables(lake)
        # Opened on first use: a gateway starts while its REST catalog is unreachable (the
        # flusher logs why; each flush tries again).
        catalog = deferred_catalog(lake)

        def mark_flushed(position: int) -> None:
            store.mark_flushed(position)
            if on_flushed is not None:
                on_flushed(position)

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
    store never trims past a gateway's checkpoint (its ``trim_log``)."""

    def __init__(
        self,
        lake: LakeSettings,
        catalog: Catalog | Callable[[], Catalog],
        store: LakeStore,
        retention_s: float,
        now: Callable[[], float] = time.time,
    ) -> None:
        self._lake = lake
        self._catalog = catalog_opener(catalog)
        self._store = store
        self._retention_s = retention_s
        self._now = now
        self._covered: object = None
        self._gateways: list[str] = []

    def __call__(self) -> int:
        """One round: :meth:`publish_checkpoints`, then :meth:`trim`; returns the log entries
        trimmed."""
        self.publish_checkpoints()
        return self.trim()

    def publish_checkpoints(self) -> None:
        """Publish the gateways' checkpoints when a pipeline run moved the lake's covered
        position since the last call (the ``checkpoint`` job)."""
        covered = covered_positions(self._catalog())
        if covered != self._covered:
            self._gateways = build_checkpoints(self._lake, self._store).gateways
            self._covered = covered

    def trim(self) -> int:
        """Trim the hot log of each gateway the last checkpoints named (the ``trim`` job);
        returns the log entries trimmed."""
        catalog = self._catalog()
        # heavy, optional (extra "pipeline"): pyiceberg
        from pyiceberg.exceptions import NoSuchTableError  # noqa: PLC0415

        try:
            landing = catalog.load_table(f"{LANDING_NAMESPACE}.landing")
        except NoSuchTableError:  # the flusher has not created it yet (its catalog was down)
            return 0
        position, held = landing_state(landing)
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

    def scheduled(self, step: Callable[[], object], retry_s: float) -> None:
        """Run ``step`` (:meth:`publish_checkpoints` or :meth:`trim`) as the scheduler does:
        a catalog that does not answer is the landing flusher's to report (it says why, once
        an outage); any other failure is logged, and the next round retries."""
        try:
            step()
        except CatalogUnavailableError:
            return
        except Exception as exc:
            if catalog_failure(exc, self._catalog()) is not None:
                return  # the same: the REST catalog stopped answering
            _log.exception("checkpoint/trim round failed; retrying in %.0f s", retry_s)


class SchemaPublisher:
    """Publish every gateway's registered schemas to the lake's ``lakesync.table_schemas``
    (called before each flush; reads the lake again only when the store's schemas changed)."""

    def __init__(self, catalog: Catalog | Callable[[], Catalog], store: DocumentStore) -> None:
        self._catalog = catalog_opener(catalog)
        self._store = store
        self._last: list[tuple[str, str, dict[str, Any]]] | None = None

    def __call__(self) -> bool:
        """True when the registry needed a commit."""
        docs = self._store.docs_of_kind("schema")
        if docs == self._last:
            return False
        changed = publish_schemas(
            self._catalog(), [(gw, parse_schema(body, stored=True)) for gw, _, body in docs]
        )
        self._last = docs
        return changed


class OnWorker:
    """The lake runtime's executor of the jobs that need Spark (``build``, ``ship``,
    ``compact``): one warm worker process runs them one at a time
    (:class:`~lakesync.lakehouse.worker.PipelineWorker`: Spark stays out of the gateway
    process, and its session and dbt stay loaded between runs); a run still going when the
    runtime stops is terminated (its Iceberg commits are atomic, so the next run picks up where
    the last commit left off). Output goes to ``<data dir>/pipeline.log``; a failed run is
    logged with its error and the log's tail, and a worker that died is started again for the
    next run. A run's failed writes to fan-out secondaries are added to ``shipping`` (the
    gateway's ``/metrics``), and each pipeline run is handed to ``on_run``."""

    def __init__(
        self,
        worker: PipelineWorker,
        shipping: DestinationMetrics | None = None,
        on_run: RunHook | None = None,
    ) -> None:
        self._worker = worker
        self._shipping = shipping
        self._on_run = on_run

    def release(self) -> None:
        """Stop the worker process (freeing the JVM's memory); the next run starts it again."""
        self._worker.close()

    def run(self, spec: JobSpec, asked: AskedJob | None, stop: threading.Event) -> RunReply | None:
        """Run one job on the worker (scheduled, or ``asked`` by the command line: its options,
        its events), log its outcome, count its failed writes to fan-out secondaries and hand a
        pipeline run to ``on_run``; returns its reply (a worker that died is a failed one),
        None when ``stop`` was set meanwhile."""
        worker = self._worker
        kind = spec.worker_kind
        assert kind is not None, f"{spec.name} does not run on the worker"
        log_size = worker.log_path.stat().st_size if worker.log_path.exists() else 0
        started = time.time()
        what = describe(spec, asked)
        on_event = None if asked is None else asked.on_event
        try:
            if kind == "pipeline":
                reply = worker.run(stop, full_refresh=asked is not None and asked.full_refresh,
                                   tests=asked is None or asked.tests, on_event=on_event)
            else:
                reply = worker.ask(RunRequest(kind=kind), stop, on_event)
        except WorkerDiedError as exc:
            reply = RunReply(ok=False, error=str(exc), elapsed_s=time.time() - started,
                             error_code="INTERNAL_ERROR")
        if reply is None:
            return None
        if self._on_run is not None and kind == "pipeline":
            self._on_run(started, reply)
        if self._shipping is not None:
            for failed in reply.secondary_failures:
                self._shipping.secondary_failed(failed.destination, failed.secondary,
                                                failed.count)
        if reply.ok and kind == "compact":
            _log.info(
                "%s done in %.1f s: %s (log: %s)", what, reply.elapsed_s,
                ", ".join(f"{t.table} {t.files_before} → {t.files_after} files"
                          for t in reply.compacted),
                worker.log_path,
            )
        elif reply.ok:
            _log.info(
                "%s done: %d deltas merged, %d rows shipped in %.1f s (log: %s)", what,
                reply.rows_merged, reply.rows_shipped, reply.elapsed_s, worker.log_path,
            )
        else:
            with worker.log_path.open("rb") as log:
                log.seek(max(log_size, worker.log_path.stat().st_size - 4000))
                tail = log.read().decode(errors="replace")
            _log.error("%s failed: %s\n%s", what, reply.error, tail)
        return reply


@contextmanager
def scheduled_lake_jobs(
    schedule: LakeSchedule,
    store: LakeStore,
    lead_for: LeadFor,
    config: Config | None = None,
    shipping: DestinationMetrics | None = None,
    on_flushed: Callable[[int], None] | None = None,
    on_run: RunHook | None = None,
    asked: WorkerJobs | None = None,
) -> Iterator[Callable[[], object] | None]:
    """Run the lake's scheduled jobs while the block runs; yield the landing flush (a blocking
    callable, for the admin flush route), or None without the ``pipeline`` extra.

    ``config`` is the gateway's resolved configuration (its ``lake:`` section and file reach the
    flusher and the scheduled pipeline); without it they read the environment's. Scheduled
    runs' failed writes to fan-out secondaries are counted in ``shipping``; ``on_flushed`` is
    called with the landing position after each flush marked it in the store, ``on_run`` after
    each pipeline run (the gateway records both for its status). ``asked`` takes the runs the
    command line hands over (:class:`~lakesync.lakehouse.runtime.WorkerJobs`; the worker's lane
    then runs even with no interval set, and a pipeline run asked for moves the next scheduled
    one an interval on). At the end of the block every job stops (a pipeline run still going is
    terminated)."""
    jobs = _landing_jobs(schedule, store, config, on_flushed)
    if jobs is None:
        yield None
        return
    landing, maintenance = jobs
    with lake_runtime(schedule, config, lead_for, landing, maintenance, shipping, on_run,
                      asked).running():
        yield landing.flush


def lake_runtime(
    schedule: LakeSchedule,
    config: Config | None,
    lead_for: LeadFor,
    landing: LandingFlusher,
    maintenance: HotLogMaintenance,
    shipping: DestinationMetrics | None = None,
    on_run: RunHook | None = None,
    asked: WorkerJobs | None = None,
) -> LakeRuntime:
    """The runtime of a gateway's lake jobs (:data:`~lakesync.lakehouse.jobs.JOBS`), each
    scheduled by its interval setting in ``schedule`` (0: off), in three lanes: the landing
    flush; checkpoints and trimming (every ``flush_interval``, or every few seconds with
    scheduled flushes off); and the warm worker's jobs (pipeline runs, compaction, and the runs
    ``asked`` for), each lane while ``lead_for`` its jobs' leader role says so."""
    intervals = {
        "flush_interval": schedule.flush_interval,
        "pipeline_interval": schedule.pipeline_interval,
        "compaction_interval": schedule.compaction_interval,
    }

    def every(*names: JobName) -> list[tuple[JobSpec, float]]:
        specs = [JOBS[name] for name in names]
        return [(spec, intervals[spec.interval]) for spec in specs
                if spec.interval is not None and intervals[spec.interval] > 0]

    def lead(spec: JobSpec, job: str) -> Callable[[], bool]:
        assert spec.leader is not None
        return lead_for(spec.leader, job)

    retry_s = schedule.flush_interval or LEAD_POLL_S
    lanes: list[Lane] = []
    if schedule.flush_interval > 0:
        lanes.append(Lane(
            "landing-flusher", lead(JOBS["flush"], "scheduled landing flush"), every("flush"),
            InProcess({"flush": lambda: landing.scheduled_flush(schedule.flush_interval)}),
        ))
    worker_jobs = every("build", "compact")
    if worker_jobs or asked is not None:
        env = dict(os.environ)
        if config is not None and config.source is not None:
            env["LAKESYNC_CONFIG"] = str(config.source.resolve())  # the gateway's own file
        worker = PipelineWorker(schedule.data_dir, schedule.data_dir / "pipeline.log", env)
        lanes.append(Lane(
            "pipeline", lead(JOBS["build"], "scheduled pipeline and compaction"), worker_jobs,
            OnWorker(worker, shipping, on_run), asked,
        ))
    lanes.append(Lane(
        "checkpoints", lead(JOBS["checkpoint"], "checkpoints and hot-log trimming"),
        [(JOBS["checkpoint"], retry_s), (JOBS["trim"], retry_s)],
        InProcess({
            "checkpoint": lambda: maintenance.scheduled(maintenance.publish_checkpoints, retry_s),
            "trim": lambda: maintenance.scheduled(maintenance.trim, retry_s),
        }),
    ))
    return LakeRuntime(lanes)
