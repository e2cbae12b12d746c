"""The lake's scheduled jobs next to a gateway: landing flushes, pipeline runs, compaction,
checkpoints and hot-log trimming.

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
  (:class:`WorkerJobs`, ``POST /v1/admin/lake/run``): on the same warm worker, one at a time,
  each after the run going on;
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
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakesync.config import Config, ServerConfig
from lakesync.errors import NotFoundError
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
from lakesync.lakehouse.lake_position import covered_positions
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.settings import LANDING_NAMESPACE, LakeSettings
from lakesync.lakehouse.worker import (
    JobKind,
    PipelineWorker,
    Queued,
    RunReply,
    RunRequest,
    WorkerDiedError,
    WorkerEvent,
)
from lakesync.schema import parse_schema

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from lakesync.destinations.metrics import DestinationMetrics

__all__ = [
    "AskedJob",
    "HotLogMaintenance",
    "LakeSchedule",
    "LeadFor",
    "RunHook",
    "SchemaPublisher",
    "WorkerJobs",
    "scheduled_lake_jobs",
]

_TRIM_STEP = 10_000
"""Log entries deleted per store transaction while trimming (pushes wait for no longer)."""

_log = logging.getLogger(__name__)

LEAD_POLL_S = 5.0
"""How often a process that does not run the pipeline checks whether it should take over."""

RunHook = Callable[[float, RunReply], None]
"""Called after each scheduled pipeline run with its start (``time.time()``) and its reply (a
worker that died is a failed reply), e.g. to record it for the gateway's status."""

LeadFor = Callable[[str, str], Callable[[], bool]]
"""``lead_for(role, job)``: a callable that says whether this process leads ``role`` now (among
the processes sharing the store); ``job`` names it in the log."""


_JOB_NAMES = {"pipeline": "pipeline run", "compact": "compaction", "materialise": "materialise"}


@dataclass(slots=True)
class AskedJob:
    """A run handed to the gateway's worker (:meth:`WorkerJobs.submit`): what to run, who gets
    its events, and its reply once it ended."""

    kind: JobKind
    full_refresh: bool = False
    tests: bool = True
    on_event: Callable[[WorkerEvent], None] | None = None
    reply: Future[RunReply] = field(default_factory=Future)


class WorkerJobs:
    """The runs ``lakesync pipeline run``, ``materialise`` and ``compact`` hand to the gateway's
    warm worker instead of starting a JVM of their own (``POST /v1/admin/lake/run``).

    The loop that owns the worker (:func:`scheduled_lake_jobs`) takes them between its
    scheduled runs: a run asked for while another runs (scheduled or asked) is queued behind it
    and told so (a :class:`~lakesync.lakehouse.worker.Queued` event), and starts after it, so it
    sees every row landed before it was asked for and runs with its own options (joining the
    run going on would give neither). One run at a time: the worker holds one Spark session."""

    def __init__(self) -> None:
        self._queue: queue.Queue[AskedJob] = queue.Queue()
        self._lock = threading.Lock()
        self._serving = False
        self._running: str | None = None

    def submit(
        self,
        kind: JobKind,
        *,
        full_refresh: bool = False,
        tests: bool = True,
        on_event: Callable[[WorkerEvent], None] | None = None,
    ) -> Future[RunReply]:
        """Queue one run; its reply comes in the future (a failed reply if the gateway stops
        first). ``on_event`` gets its events, from the worker loop's thread. Raises
        :class:`~lakesync.errors.NotFoundError` when this process runs no worker (another
        gateway process on the store leads the lake's jobs)."""
        job = AskedJob(kind, full_refresh, tests, on_event)
        with self._lock:
            if not self._serving:
                raise NotFoundError(
                    "this gateway process runs no pipeline worker (another gateway process on "
                    "its store runs the lake's jobs); run the command with --in-process"
                )
            busy = self._running or ("an earlier request" if not self._queue.empty() else None)
            self._queue.put(job)
        if busy is not None and on_event is not None:
            on_event(Queued(busy))
        return job.reply

    def _serve(self, serving: bool, why: str = "") -> None:
        """Take requests or not; not: the queued ones fail saying ``why``."""
        with self._lock:
            self._serving = serving
            waiting: list[AskedJob] = []
            while not serving and not self._queue.empty():
                waiting.append(self._queue.get_nowait())
        for job in waiting:
            job.reply.set_result(RunReply(ok=False, error=why, error_code=NotFoundError.code))

    def _next(self, stop: threading.Event, until: float) -> AskedJob | None:
        """The next asked run, or None once ``until`` (monotonic) passed or ``stop`` is set."""
        while not stop.is_set():
            left = until - time.monotonic()
            if left <= 0:
                return None
            try:
                return self._queue.get(timeout=min(left, 0.25))  # stop is checked each 1/4 s
            except queue.Empty:
                continue
        return None

    def _mark(self, running: str | None) -> None:
        with self._lock:
            self._running = running


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
        """One round; returns the log entries trimmed."""
        catalog = self._catalog()
        covered = covered_positions(catalog)
        if covered != self._covered:
            self._gateways = build_checkpoints(self._lake, self._store).gateways
            self._covered = covered
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

    def run(self, stop: threading.Event, interval_s: float, lead: Callable[[], bool]) -> None:
        """Run a round every ``interval_s`` seconds until ``stop`` while ``lead()`` holds."""
        while not stop.wait(interval_s):
            if not lead():
                continue
            try:
                self()
            except CatalogUnavailableError:
                continue  # the landing flusher says why, once a flush
            except Exception as exc:
                if catalog_failure(exc, self._catalog()) is not None:
                    continue  # the same: the REST catalog stopped answering
                _log.exception("checkpoint/trim round failed; retrying in %.0f s", interval_s)


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


def _lake_worker_loop(
    schedule: LakeSchedule,
    config: Config | None,
    stop: threading.Event,
    lead: Callable[[], bool],
    shipping: DestinationMetrics | None = None,
    on_run: RunHook | None = None,
    asked: WorkerJobs | None = None,
) -> None:
    """Run the pipeline every ``pipeline_interval`` seconds and the compaction every
    ``compaction_interval`` seconds (each after its previous run ended; 0 = off) until ``stop``,
    while ``lead()`` says this process is the scheduler (the others check every few seconds
    whether to take over), so two gateway processes never run or compact together. Both go to
    one warm worker process, one at a time (:class:`~lakesync.lakehouse.worker.PipelineWorker`:
    Spark stays out of the gateway process, and its session and dbt stay loaded between runs); a
    run still going at shutdown is terminated (its Iceberg commits are atomic, so the next run picks
    up where the last commit left off). Output goes to ``<data dir>/pipeline.log``; a failed run
    is logged with its error and the log's tail, and a worker that died is started again for the
    next run. A run's failed writes to fan-out secondaries are added to ``shipping`` (the
    gateway's ``/metrics``), and each pipeline run is handed to ``on_run``. Between them it runs
    what the command line hands over through ``asked`` (a pipeline run asked for moves the next
    scheduled one an interval on)."""
    env = dict(os.environ)
    if config is not None and config.source is not None:
        env["LAKESYNC_CONFIG"] = str(config.source.resolve())  # the gateway's own file
    worker = PipelineWorker(schedule.data_dir, schedule.data_dir / "pipeline.log", env)
    intervals = {
        job: interval
        for job, interval in (
            ("pipeline", schedule.pipeline_interval),
            ("compaction", schedule.compaction_interval),
        )
        if interval > 0
    }
    due: dict[str, float] = {}
    others = "another gateway process on this store runs the lake's jobs"
    try:
        while True:
            if not lead():
                due = {}
                if asked is not None:
                    asked._serve(False, others)
                worker.close()  # another process runs the lake jobs: free the JVM's memory
                if stop.wait(LEAD_POLL_S):
                    return
                continue
            if asked is not None:
                asked._serve(True)
            if not due:  # just took the lead: each job waits its interval first
                due = {job: time.monotonic() + interval for job, interval in intervals.items()}
            job = min(due, key=due.__getitem__) if due else None
            until = due[job] if job is not None else time.monotonic() + LEAD_POLL_S
            request = None
            if asked is None:
                if stop.wait(max(0.0, until - time.monotonic())):
                    return
            else:
                request = asked._next(stop, until)
                if stop.is_set():
                    if request is not None:
                        request.reply.set_result(RunReply(ok=False, error="the gateway stopped"))
                    return
            if request is not None:
                reply = _lake_job(worker, request.kind, stop, shipping, on_run, request, asked)
                if reply is None:
                    request.reply.set_result(
                        RunReply(ok=False, error="the gateway stopped during the run")
                    )
                    return
                request.reply.set_result(reply)
                if request.kind == "pipeline" and "pipeline" in due:
                    due["pipeline"] = time.monotonic() + intervals["pipeline"]
                continue
            if job is None or not lead():
                continue
            if _lake_job(worker, "compact" if job == "compaction" else "pipeline", stop,
                         shipping, on_run, None, asked) is None:
                return
            due[job] = time.monotonic() + intervals[job]
    finally:
        if asked is not None:
            asked._serve(False, "the gateway stopped")
        worker.close()


def _lake_job(
    worker: PipelineWorker,
    kind: JobKind,
    stop: threading.Event,
    shipping: DestinationMetrics | None = None,
    on_run: RunHook | None = None,
    asked: AskedJob | None = None,
    jobs: WorkerJobs | None = None,
) -> RunReply | None:
    """Run one ``kind`` of job on ``worker`` (scheduled, or ``asked`` by the command line: its
    options, its events), log its outcome, count its failed writes to fan-out secondaries in
    ``shipping`` and hand a pipeline run to ``on_run``; returns its reply (a worker that died is
    a failed one), None when ``stop`` was set meanwhile."""
    log_size = worker.log_path.stat().st_size if worker.log_path.exists() else 0
    started = time.time()
    what = f"{'scheduled' if asked is None else 'requested'} {_JOB_NAMES[kind]}"
    if jobs is not None:
        jobs._mark(what)
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
    finally:
        if jobs is not None:
            jobs._mark(None)
    if reply is None:
        return None
    if on_run is not None and kind == "pipeline":
        on_run(started, reply)
    if shipping is not None:
        for failed in reply.secondary_failures:
            shipping.secondary_failed(failed.destination, failed.secondary, failed.count)
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
    command line hands over (:class:`WorkerJobs`; the worker's loop then runs even with no
    interval set). At the end of the block every job stops (a pipeline run still going is
    terminated)."""
    jobs = _landing_jobs(schedule, store, config, on_flushed)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    flush: Callable[[], object] | None = None
    if jobs is not None:
        landing, maintenance = jobs
        flush = landing.flush
        if schedule.flush_interval > 0:
            threads.append(
                threading.Thread(
                    target=landing.run,
                    args=(stop,),
                    kwargs={
                        "interval_s": schedule.flush_interval,
                        "lead": lead_for("landing", "scheduled landing flush"),
                    },
                    name="landing-flusher",
                    daemon=True,
                )
            )
        if schedule.pipeline_interval > 0 or schedule.compaction_interval > 0 \
                or asked is not None:
            lead = lead_for("pipeline", "scheduled pipeline and compaction")
            threads.append(
                threading.Thread(
                    target=_lake_worker_loop,
                    args=(schedule, config, stop, lead, shipping, on_run, asked),
                    name="pipeline",
                    daemon=True,
                )
            )
        threads.append(
            threading.Thread(
                target=maintenance.run,
                args=(
                    stop,
                    schedule.flush_interval or LEAD_POLL_S,
                    lead_for("checkpoint", "checkpoints and hot-log trimming"),
                ),
                name="checkpoints",
                daemon=True,
            )
        )
    for t in threads:
        t.start()
    try:
        yield flush
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
