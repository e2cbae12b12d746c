"""The one scheduler of the lake's jobs (:mod:`lakesync.lakehouse.runtime`) and their
declarations (:mod:`lakesync.lakehouse.jobs`).

Real threads: a lane runs on its own thread as in the gateway, with an executor that records
what it was asked to run; each test waits on a condition (generous deadlines), never for a
duration.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import get_args

import pytest

from lakesync.errors import NotFoundError
from lakesync.lakehouse.jobs import JOBS, JobName, JobSpec, job_of_kind
from lakesync.lakehouse.pipeline import NodeProgress, NodesPlanned
from lakesync.lakehouse.runtime import AskedJob, InProcess, LakeRuntime, Lane, WorkerJobs
from lakesync.lakehouse.schedule import LakeSchedule
from lakesync.lakehouse.worker import Queued, RunReply, WorkerEvent

DEADLINE_S = 60.0
"""Not a speed bound: how long a condition may take on a loaded machine before the test fails."""


class Recorder:
    """What an executor was asked to run, and the lead's answers, under one condition."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.runs: list[tuple[JobName, bool]] = []
        self.leads = 0
        self.released = 0

    def note(self, change: Callable[[], None]) -> None:
        with self.cond:
            change()
            self.cond.notify_all()

    def wait(self, what: str, check: Callable[[], bool]) -> None:
        """Until ``check()`` holds (woken by each note, and re-checked every 0.1 s for state
        the lane changes without a note)."""
        deadline = time.monotonic() + DEADLINE_S
        with self.cond:
            while not check():
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                self.cond.wait(0.1)


class RecordingExecutor:
    """Records each run; ``block`` (if set) holds a run until the lane's stop event is set, as
    the warm worker's run does until it is cancelled."""

    def __init__(self, rec: Recorder, block: bool = False,
                 events: tuple[WorkerEvent, ...] = ()) -> None:
        self.rec = rec
        self.block = block
        self.events = events

    def run(self, spec: JobSpec, asked: AskedJob | None, stop: threading.Event) -> RunReply | None:
        self.rec.note(lambda: self.rec.runs.append((spec.name, asked is not None)))
        if asked is not None and asked.on_event is not None:
            for event in self.events:
                asked.on_event(event)
        if self.block:
            stop.wait()
            return None
        return RunReply(ok=True, rows_merged=len(self.rec.runs))

    def release(self) -> None:
        self.rec.note(lambda: setattr(self.rec, "released", self.rec.released + 1))


def lead(rec: Recorder, answer: threading.Event) -> Callable[[], bool]:
    def ask() -> bool:
        rec.note(lambda: setattr(rec, "leads", rec.leads + 1))
        return answer.is_set()

    return ask


def test_every_job_is_declared_once_with_what_it_needs() -> None:
    assert set(JOBS) == set(get_args(JobName))
    assert all(name == spec.name for name, spec in JOBS.items())
    schedule_fields = {f.name for f in dataclasses.fields(LakeSchedule)}
    for spec in JOBS.values():
        assert spec.needs, spec.name
        assert spec.interval is None or spec.interval in schedule_fields
        assert spec.interval is None or spec.leader is not None, "a scheduled job needs a leader"
        if spec.on_worker:
            assert "spark" in spec.needs
            assert job_of_kind(spec.worker_kind or "") is spec
    assert {JOBS[n].worker_kind for n in ("build", "ship", "compact")} == {
        "pipeline", "materialise", "compact"}
    assert not JOBS["tier"].on_worker and JOBS["tier"].leader is None
    with pytest.raises(KeyError):
        job_of_kind("vacuum")


def test_without_the_lead_no_job_runs_and_no_run_is_taken() -> None:
    rec, leading = Recorder(), threading.Event()
    asked = WorkerJobs()
    lane = Lane("pipeline", lead(rec, leading), [(JOBS["build"], 0.01)],
                RecordingExecutor(rec), asked)
    with LakeRuntime([lane]).running():
        # Several lead checks (one per poll of the interval) and not one run.
        rec.wait("the lane to ask for the lead three times", lambda: rec.leads >= 3)
        with rec.cond:
            assert rec.runs == []
            assert rec.released >= 1  # a process that does not lead frees the worker
        with pytest.raises(NotFoundError, match="another gateway process"):
            asked.submit("pipeline")
        leading.set()  # it takes the lead: the scheduled job runs
        rec.wait("the scheduled run", lambda: ("build", False) in rec.runs)


def test_a_submitted_job_runs_with_its_options_and_its_events_arrive_in_order() -> None:
    rec = Recorder()
    asked = WorkerJobs()
    events = (NodesPlanned("build", 1), NodeProgress("build", "analytics__notes", "success"))
    lane = Lane("pipeline", lambda: True, [], RecordingExecutor(rec, events=events), asked)
    got: list[WorkerEvent] = []
    with LakeRuntime([lane]).running():
        rec.wait("the lane to take runs", lambda: asked.serving)
        reply = asked.submit("compact", on_event=got.append).result(timeout=DEADLINE_S)
    assert reply == RunReply(ok=True, rows_merged=1)
    assert rec.runs == [("compact", True)]
    assert got == list(events)


def test_a_run_asked_while_another_runs_is_queued_behind_it() -> None:
    asked = WorkerJobs()
    asked.serve(True)
    asked.mark_running("scheduled pipeline run")  # what the lane says while a run goes on
    got: list[WorkerEvent] = []
    future = asked.submit("pipeline", full_refresh=True, tests=False, on_event=got.append)
    assert got == [Queued("scheduled pipeline run")]
    taken = asked.take(threading.Event(), until=float("inf"))
    assert taken is not None and (taken.kind, taken.full_refresh, taken.tests) == (
        "pipeline", True, False)
    assert not future.done()


def test_stop_cancels_the_run_going_on_and_fails_the_queued_ones() -> None:
    rec = Recorder()
    asked = WorkerJobs()
    lane = Lane("pipeline", lambda: True, [], RecordingExecutor(rec, block=True), asked)
    with LakeRuntime([lane]).running():
        rec.wait("the lane to take runs", lambda: asked.serving)
        first = asked.submit("pipeline")
        rec.wait("the first run to start", lambda: rec.runs == [("build", True)])
        second = asked.submit("materialise")
    cancelled = first.result(timeout=DEADLINE_S)
    assert (cancelled.ok, cancelled.error) == (False, "the gateway stopped during the run")
    queued = second.result(timeout=DEADLINE_S)
    assert (queued.ok, queued.error) == (False, "the gateway stopped")
    assert rec.runs == [("build", True)]
    with pytest.raises(NotFoundError):
        asked.submit("pipeline")  # a stopped runtime takes no runs


def test_scheduled_jobs_of_a_lane_run_in_turn_and_the_first_runs_at_start() -> None:
    rec = Recorder()
    calls: list[str] = []

    def call(name: str) -> Callable[[], None]:
        def job() -> None:
            rec.note(lambda: calls.append(name))
            if name == "boom":
                raise RuntimeError("a job's own failure")  # logged; the lane goes on

        return job

    lane = Lane(
        "checkpoints", lambda: True,
        [(JOBS["flush"], 0.01), (JOBS["trim"], 0.01)],
        InProcess({"flush": call("flush"), "trim": call("boom")}),
    )
    with LakeRuntime([lane]).running():
        rec.wait("each job three times", lambda: calls.count("flush") >= 3
                 and calls.count("boom") >= 3)
    assert calls[0] == "flush"  # at_start: no interval waited first
