"""``lakesync demo``, ``lakesync pipeline run`` and the warm worker's scheduled run all go through
one orchestration, :func:`lakesync.lakehouse.pipeline.run_and_ship`, and a run leaves the
process environment as it found it.

Real parts: the demo's gateway subprocess and clients, Spark, dbt and the Iceberg catalog of one
data dir, the CLI (typer's runner) and the worker's request handler, all in this process after
the demo. ``run_and_ship``, where each caller imported it, is wrapped by a recorder that calls
the real function with an observer teeing its events, so the test sees which callers went
through it and what each saw.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from lakesync.cli import demo, lake
from lakesync.cli.demo import run_demo
from lakesync.cli.main import app
from lakesync.lakehouse import pipeline, worker
from lakesync.lakehouse.pipeline import (
    Built,
    NodeProgress,
    NodesPlanned,
    PipelineEvent,
    PipelineOutcome,
)
from lakesync.lakehouse.runner import DbtInvoker

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

PYSPARK_OWN = ("SPARK_AUTH_SOCKET_TIMEOUT", "SPARK_BUFFER_SIZE")
"""What PySpark's ``SparkContext`` itself writes into ``os.environ`` when it starts (read by its
socket helpers for the session's lifetime): not the lakehouse's settings."""


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in PYSPARK_OWN}


def test_the_demo_the_cli_and_the_worker_share_one_run_and_leave_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESYNC_JWT_SECRET", "one-orchestration-secret-0123456789abcdef")
    monkeypatch.delenv("LAKESYNC_CONFIG", raising=False)
    real = pipeline.run_and_ship
    runs: list[list[PipelineEvent]] = []

    def recorded(*args: Any, **kwargs: Any) -> PipelineOutcome:
        events: list[PipelineEvent] = []
        runs.append(events)
        observer = kwargs.pop("observer", None)

        def tee(event: PipelineEvent) -> None:
            events.append(event)
            if observer is not None:
                observer(event)

        return real(*args, observer=tee, **kwargs)

    # Each caller imports the one function by name: record it where each of them calls it.
    for caller in (demo, lake, worker):
        assert caller.run_and_ship is real
        monkeypatch.setattr(caller, "run_and_ship", recorded)
    data_dir = tmp_path / "d"
    # Before any Spark session or dbt run in this process: nothing they need may stay set.
    environment = _environment()

    run_demo(data_dir)
    assert _environment() == environment
    assert len(runs) == 1

    config = data_dir / "demo.yaml"
    cli = CliRunner().invoke(
        app, ["pipeline", "run", "--data-dir", str(data_dir), "--config", str(config)]
    )
    assert cli.exit_code == 0, cli.output
    assert "pipeline run" in cli.output and "rows merged" in cli.output
    assert _environment() == environment
    assert len(runs) == 2

    monkeypatch.setenv("LAKESYNC_CONFIG", str(config))  # the gateway hands the worker its file
    environment = _environment()
    reply = worker.handle(data_dir, worker.RunRequest(), DbtInvoker())
    assert reply.ok, reply.error
    assert _environment() == environment
    assert len(runs) == 3

    demo_run, cli_run, worker_run = runs
    # The demo merged the clients' deltas; the later runs found nothing new.
    built = [next(e.result for e in run if isinstance(e, Built)) for run in runs]
    assert built[0].rows_merged > 0 and "todos" in built[0].tables_updated
    assert [b.rows_merged for b in built[1:]] == [0, 0]
    # Each saw the same run: every dbt node of the build started and finished, then the build
    # ended (no destinations declared: nothing shipped).
    for run in runs:
        assert isinstance(run[-1], Built)
        assert all(isinstance(e, NodeProgress | NodesPlanned) and e.stage == "build"
                   for e in run[:-1])
    nodes = [
        sorted((e.node, e.status == "started") for e in run if isinstance(e, NodeProgress))
        for run in runs
    ]
    assert nodes[0] == nodes[1] == nodes[2]
    assert ("analytics__todos", True) in nodes[0]
    assert len(demo_run) == len(cli_run) == len(worker_run)
