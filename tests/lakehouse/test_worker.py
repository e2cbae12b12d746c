"""The warm pipeline worker: one process, one Spark session, many runs; a killed worker restarts.

Real parts: the gateway's SQLite hot log, the landing flusher, Spark + dbt in the worker process,
DuckDB reading the models back.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lakesync.delta import RowDelta
from lakesync.hlc import HLC, encode
from lakesync.hotlog.factory import open_store
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.query import run_query
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.worker import (
    PipelineWorker,
    RunReply,
    WorkerDiedError,
    _serve,
    decode_line,
)
from lakesync.schema import parse_schema
from lakesync.status import Shipment
from tests.gateway_process import process_running
from tests.netns import wait_for

NOTES = parse_schema({"table": "notes", "columns": [{"name": "body", "type": "string"}]})


def _note(row: str, hlc_ms: int, body: str) -> RowDelta:
    return RowDelta.create(
        op="INSERT", table="notes", row_id=row, client_id="alice",
        columns={"body": body}, hlc=encode(hlc_ms, 0),
    )


def test_a_bad_request_gets_an_error_reply_and_the_worker_reads_on() -> None:
    replies = io.StringIO()
    _serve(None, io.StringIO('not json\n{"full_refresh": "yes"}\n\n'), replies)
    got = [decode_line(line) for line in replies.getvalue().splitlines()]
    assert all(isinstance(r, RunReply) for r in got)
    assert [(r.ok, r.error_code) for r in got if isinstance(r, RunReply)] == [
        (False, "VALIDATION_ERROR"), (False, "VALIDATION_ERROR")
    ]
    assert all(r.error.startswith("bad request") for r in got if isinstance(r, RunReply))


@pytest.mark.spark
@pytest.mark.slow
def test_runs_share_one_warm_process_and_a_killed_worker_is_replaced(tmp_path: Path) -> None:
    settings = LakeSettings.from_env(tmp_path, env={})
    bootstrap(settings)
    catalog = open_catalog(settings)
    publish_schemas(catalog, [("gw1", NOTES)])
    store = open_store("sqlite", tmp_path, HLC())
    flusher = LandingFlusher(catalog, store, mark_flushed=store.mark_flushed)

    def land(*deltas: RowDelta) -> None:
        store.append("gw1", list(deltas))
        flusher.flush()

    def notes() -> list[tuple[Any, ...]]:
        return run_query(settings, "select row_id, body from analytics.notes order by 1").rows

    worker = PipelineWorker(tmp_path, tmp_path / "pipeline.log")
    try:
        land(_note("n1", 1_000, "one"), _note("n2", 1_001, "two"))
        first = worker.run()
        assert first is not None and first.ok, first
        assert first.rows_merged == 2
        assert notes() == [("n1", "one"), ("n2", "two")]
        pid = worker.pid

        land(_note("n3", 2_000, "three"))
        second = worker.run()
        assert second is not None and second.ok, second
        assert (second.rows_merged, worker.pid) == (1, pid)  # the same warm process
        assert notes()[-1] == ("n3", "three")

        # kill -9 the worker during a run: that run fails, the next one starts a fresh worker.
        land(_note("n4", 3_000, "four"))
        outcome: list[BaseException | RunReply | None] = []

        def run() -> None:
            try:
                outcome.append(worker.run())
            except WorkerDiedError as exc:
                outcome.append(exc)

        size = (tmp_path / "pipeline.log").stat().st_size
        runner = threading.Thread(target=run)
        runner.start()
        deadline = time.monotonic() + 120
        while b"pipeline run started" not in (tmp_path / "pipeline.log").read_bytes()[size:]:
            assert time.monotonic() < deadline, "the worker never started the run"
            time.sleep(0.05)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        runner.join(120)
        assert len(outcome) == 1 and isinstance(outcome[0], WorkerDiedError), outcome

        third = worker.run()
        assert third is not None and third.ok, third
        assert worker.pid not in (None, pid)
        assert notes() == [("n1", "one"), ("n2", "two"), ("n3", "three"), ("n4", "four")]
    finally:
        worker.close()
        store.close()
    assert worker.pid is None


@pytest.mark.spark
@pytest.mark.slow
def test_stop_during_a_run_terminates_the_worker(tmp_path: Path) -> None:
    settings = LakeSettings.from_env(tmp_path, env={})
    bootstrap(settings)
    worker = PipelineWorker(tmp_path, tmp_path / "pipeline.log")
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    assert worker.run(stop) is None  # returns once stopped, the run terminated, not awaited
    assert worker.pid is None


@pytest.mark.spark
@pytest.mark.slow
def test_a_scheduled_run_ships_to_the_declared_destinations(tmp_path: Path) -> None:
    """The worker does what `lakesync pipeline run --config` does: dbt, then shipping."""
    import psycopg

    from tests.conftest import drop_pg_database, fresh_pg_database

    url = fresh_pg_database()
    config = tmp_path / "lakesync.yaml"
    config.write_text(
        "destinations:\n  pg:\n    kind: postgres\n    url: ${LAKESYNC_TEST_DEST_URL}\n"
        "    gateway: gw1\n    tables: [notes]\n    delete: soft\n"
    )
    settings = LakeSettings.from_env(tmp_path, env={})
    bootstrap(settings)
    catalog = open_catalog(settings)
    publish_schemas(catalog, [("gw1", NOTES)])
    store = open_store("sqlite", tmp_path, HLC())
    env = {**os.environ, "LAKESYNC_CONFIG": str(config), "LAKESYNC_TEST_DEST_URL": url}
    worker = PipelineWorker(tmp_path, tmp_path / "pipeline.log", env)
    try:
        store.append("gw1", [_note("n1", 1_000, "one"), _note("n2", 1_001, "two")])
        LandingFlusher(catalog, store, mark_flushed=store.mark_flushed).flush()
        reply = worker.run()
        assert reply is not None and reply.ok, reply
        assert reply.rows_shipped == 2
        # What the gateway records for `lakesync status` (the destination's last shipment).
        assert reply.shipments == [Shipment("pg", "notes", 2, None)]
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "select row_id, body from notes where deleted_at is null order by row_id"
            ).fetchall()
        assert rows == [("n1", "one"), ("n2", "two")]
    finally:
        worker.close()
        store.close()
        drop_pg_database(url)


def test_a_worker_whose_gateway_was_killed_stops_though_its_stdin_stays_open() -> None:
    """A gateway SIGKILLed mid-run cannot close its worker: the worker notices its parent is
    gone and stops (its stdin, held open here by the test, would keep it reading for ever)."""
    # The stand-in gateway: a shell that starts the worker on its own stdin and stdout, prints
    # its pid and waits; the test keeps the write end of that stdin.
    parent = subprocess.Popen(
        ["bash", "-c", f"{sys.executable} -m lakesync.lakehouse.worker <&0 & echo $!; wait"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert parent.stdin is not None and parent.stdout is not None
    worker = int(parent.stdout.readline())
    try:
        parent.stdin.write("not a request\n")
        parent.stdin.flush()
        assert decode_line(parent.stdout.readline()).ok is False  # type: ignore[union-attr]
        parent.kill()  # the worker serves: it would read its stdin for ever
        parent.wait()
        wait_for("the worker to stop after its gateway was killed",
                 lambda: not process_running(worker))
    finally:
        if process_running(worker):
            os.kill(worker, signal.SIGKILL)
        parent.stdin.close()
