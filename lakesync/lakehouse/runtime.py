"""The one scheduler of the lake's jobs (:mod:`lakesync.lakehouse.jobs`): leadership, intervals,
queued runs, cancellation and progress events.

A :class:`LakeRuntime` runs :class:`Lane` s, one thread each. A lane runs its jobs one at a time
through its :class:`Executor` (in this process, :class:`InProcess`, or on the warm worker,
:class:`lakesync.lakehouse.schedule.OnWorker`: the same interface): each scheduled job every
its interval (each after its previous run ended), and between them the runs asked for through
its :class:`WorkerJobs` queue, while its ``lead`` says this process is the one to (among the
gateway processes sharing one store; the others check every few seconds whether to take
over). Stopping the runtime cancels what runs (the executor is given the stop event) and fails
the runs still queued. Lanes run side by side: a landing flush never waits for a pipeline run.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from lakesync.errors import NotFoundError
from lakesync.lakehouse.jobs import JobName, JobSpec, job_of_kind
from lakesync.lakehouse.worker import JobKind, Queued, RunReply, WorkerEvent

__all__ = [
    "LEAD_POLL_S",
    "AskedJob",
    "Executor",
    "InProcess",
    "LakeRuntime",
    "Lane",
    "WorkerJobs",
    "describe",
]

_log = logging.getLogger(__name__)

LEAD_POLL_S = 5.0
"""How often a process that does not lead a lane's jobs checks whether it should take over."""

_OTHERS = "another gateway process on this store runs the lake's jobs"


@dataclass(slots=True)
class AskedJob:
    """A run asked for (:meth:`WorkerJobs.submit`): what to run, who gets its events, and its
    reply once it ended."""

    kind: JobKind
    full_refresh: bool = False
    tests: bool = True
    on_event: Callable[[WorkerEvent], None] | None = None
    reply: Future[RunReply] = field(default_factory=Future)


def describe(spec: JobSpec, asked: AskedJob | None) -> str:
    """How logs and the ``queued`` event name one run: ``scheduled pipeline run``,
    ``requested compaction``."""
    return f"{'scheduled' if asked is None else 'requested'} {spec.title}"


class WorkerJobs:
    """The runs asked of a lane (``lakesync pipeline run``, ``materialise`` and ``compact``
    hand theirs to the gateway's warm worker, ``POST /v1/admin/lake/run``).

    The lane takes them between its scheduled runs: a run asked for while another runs
    (scheduled or asked) is queued behind it and told so (a
    :class:`~lakesync.lakehouse.worker.Queued` event), and starts after it, so it sees every
    row landed before it was asked for and runs with its own options (joining the run going on
    would give neither). One run at a time: the worker holds one Spark session."""

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
        first). ``on_event`` gets its events, from the lane's thread. Raises
        :class:`~lakesync.errors.NotFoundError` when no lane takes runs now (another gateway
        process on the store leads the lake's jobs)."""
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

    @property
    def serving(self) -> bool:
        """Whether a lane takes runs now (a :meth:`submit` is queued, not refused)."""
        with self._lock:
            return self._serving

    def serve(self, serving: bool, why: str = "") -> None:
        """Take runs or not; not: the queued ones fail saying ``why``."""
        with self._lock:
            self._serving = serving
            waiting: list[AskedJob] = []
            while not serving and not self._queue.empty():
                waiting.append(self._queue.get_nowait())
        for job in waiting:
            job.reply.set_result(RunReply(ok=False, error=why, error_code=NotFoundError.code))

    def take(self, stop: threading.Event, until: float) -> AskedJob | None:
        """The next run asked for, or None once ``until`` (monotonic) passed or ``stop`` is
        set."""
        while not stop.is_set():
            left = until - time.monotonic()
            if left <= 0:
                return None
            try:
                return self._queue.get(timeout=min(left, 0.25))  # stop is checked each 1/4 s
            except queue.Empty:
                continue
        return None

    def mark_running(self, running: str | None) -> None:
        """Say what runs now (named in the ``queued`` event of a run asked for meanwhile), or
        None once it ended."""
        with self._lock:
            self._running = running


class Executor(Protocol):
    """Where a lane's jobs run: in this process (:class:`InProcess`) or on the warm worker."""

    def run(self, spec: JobSpec, asked: AskedJob | None, stop: threading.Event) -> RunReply | None:
        """Run one job (scheduled, or ``asked``: its options, its events to its ``on_event``);
        its reply (a failure is a failed reply, never an exception), None when ``stop`` was set
        meanwhile (the run was cancelled)."""
        ...

    def release(self) -> None:
        """This process stopped leading (or the runtime stops): free what the jobs hold."""
        ...


class InProcess:
    """Jobs run in this process: one callable per job name (each logs its own failures)."""

    def __init__(self, jobs: Mapping[JobName, Callable[[], object]]) -> None:
        self._jobs = dict(jobs)

    def run(self, spec: JobSpec, asked: AskedJob | None, stop: threading.Event) -> RunReply | None:
        """Call the job's callable; an exception it lets through is logged (the lane goes on)."""
        started = time.monotonic()
        try:
            self._jobs[spec.name]()
        except Exception as exc:
            _log.exception("%s failed", describe(spec, asked))
            return RunReply(ok=False, error=str(exc), error_code="INTERNAL_ERROR",
                            elapsed_s=time.monotonic() - started)
        return RunReply(ok=True, elapsed_s=time.monotonic() - started)

    def release(self) -> None:
        """Nothing to free."""


@dataclass(frozen=True, slots=True)
class Lane:
    """Jobs that run one at a time in one thread (``name``): each of ``scheduled`` every its
    interval in seconds, and the runs asked through ``asked``, all through ``executor``, while
    ``lead()`` holds."""

    name: str
    lead: Callable[[], bool]
    scheduled: Sequence[tuple[JobSpec, float]]
    executor: Executor
    asked: WorkerJobs | None = None

    def run(self, stop: threading.Event) -> None:
        """Run the lane's jobs until ``stop``; then release the executor and fail the runs
        still queued."""
        intervals = {spec.name: interval for spec, interval in self.scheduled}
        specs = {spec.name: spec for spec, _ in self.scheduled}
        poll = min([LEAD_POLL_S, *intervals.values()])
        due: dict[JobName, float] = {}
        try:
            while True:
                if not self.lead():
                    due = {}
                    if self.asked is not None:
                        self.asked.serve(False, _OTHERS)
                    self.executor.release()  # another process runs these jobs: free memory
                    if stop.wait(poll):
                        return
                    continue
                if self.asked is not None:
                    self.asked.serve(True)
                if not due:  # just took the lead: each job waits its interval (or not) first
                    now = time.monotonic()
                    due = {name: now + (0.0 if specs[name].at_start else interval)
                           for name, interval in intervals.items()}
                name = min(due, key=due.__getitem__) if due else None
                until = due[name] if name is not None else time.monotonic() + poll
                request = None
                if self.asked is None:
                    if stop.wait(max(0.0, until - time.monotonic())):
                        return
                else:
                    request = self.asked.take(stop, until)
                    if stop.is_set():
                        if request is not None:
                            request.reply.set_result(
                                RunReply(ok=False, error="the gateway stopped"))
                        return
                if request is not None:
                    spec = job_of_kind(request.kind)
                    reply = self._run(spec, request, stop)
                    if reply is None:
                        request.reply.set_result(
                            RunReply(ok=False, error="the gateway stopped during the run"))
                        return
                    request.reply.set_result(reply)
                    if spec.name in due:  # asked for: the next scheduled one an interval on
                        due[spec.name] = time.monotonic() + intervals[spec.name]
                    continue
                if name is None or not self.lead():
                    continue
                if self._run(specs[name], None, stop) is None:
                    return
                due[name] = time.monotonic() + intervals[name]
        finally:
            if self.asked is not None:
                self.asked.serve(False, "the gateway stopped")
            self.executor.release()

    def _run(self, spec: JobSpec, asked: AskedJob | None, stop: threading.Event) -> RunReply | None:
        if self.asked is not None:
            self.asked.mark_running(describe(spec, asked))
        try:
            return self.executor.run(spec, asked, stop)
        finally:
            if self.asked is not None:
                self.asked.mark_running(None)


class LakeRuntime:
    """The lake's lanes, each on a thread of its own while :meth:`running`."""

    def __init__(self, lanes: Sequence[Lane]) -> None:
        self._lanes = list(lanes)

    @property
    def lanes(self) -> list[Lane]:
        """The lanes it runs."""
        return list(self._lanes)

    @contextmanager
    def running(self, join_timeout: float = 60.0) -> Iterator[None]:
        """Run every lane while the block runs; at its end stop them (a run going on is
        cancelled, queued runs fail) and wait up to ``join_timeout`` seconds for each."""
        stop = threading.Event()
        threads = [threading.Thread(target=lane.run, args=(stop,), name=lane.name, daemon=True)
                   for lane in self._lanes]
        for t in threads:
            t.start()
        try:
            yield
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=join_timeout)
