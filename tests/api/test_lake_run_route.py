"""``POST /v1/admin/lake/run``: the runs ``lakesync pipeline run``, ``materialise`` and
``compact`` hand to the gateway's warm worker. Bad input is a 4xx with the protocol's error body;
a gateway with no worker says so (404, and the command line runs in its own process); the run's
events stream as NDJSON in order, ``queued`` first when the worker is busy, the reply last.

The worker loop's side (:class:`WorkerJobs` taken between scheduled runs, on a real Spark
worker) is tested end to end in ``tests/lakehouse/test_cli_handover.py``; here a thread takes
the queued runs as the loop does, so the route is tested without a JVM.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.lakehouse.pipeline import NodeProgress, NodesPlanned
from lakesync.lakehouse.runtime import WorkerJobs
from lakesync.lakehouse.worker import Queued, RunReply, decode_line
from tests.api.helpers import auth, make_settings, token

ADMIN = auth(token("ops", role="admin"))
ROUTE = "/v1/admin/lake/run"


@pytest.fixture
def jobs() -> WorkerJobs:
    return WorkerJobs()


@pytest.fixture
def client(tmp_path: Path, jobs: WorkerJobs) -> Iterator[TestClient[Any]]:
    with TestClient(create_app(make_settings(tmp_path), worker_jobs=jobs)) as http:
        yield http


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"not json", "not valid JSON"),
        (b"[]", "object"),
        (b'{"fullRefresh": true}', "job"),
        (b'{"job": "vacuum"}', "job"),
        (b'{"job": "pipeline", "fullRefresh": "yes"}', "fullRefresh"),
        (b'{"job": "pipeline", "cores": 8}', "cores"),
    ],
)
def test_a_bad_run_is_a_400_naming_the_problem(
    client: TestClient[Any], body: bytes, says: str
) -> None:
    r = client.post(ROUTE, content=body, headers=ADMIN | {"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["code"] == "VALIDATION_ERROR"
    assert says in r.json()["error"]


def test_only_an_admin_token_may_hand_a_run_over(client: TestClient[Any]) -> None:
    for headers, status in [({}, 401), (auth(token("alice")), 403)]:
        r = client.post(ROUTE, json={"job": "pipeline"}, headers=headers)
        assert r.status_code == status, r.text
        assert r.json()["code"] in {"AUTH_ERROR", "FORBIDDEN"}


def test_a_gateway_without_a_worker_answers_404(tmp_path: Path, client: TestClient[Any]) -> None:
    # The worker loop does not take runs (another process on the store leads the lake's jobs).
    r = client.post(ROUTE, json={"job": "compact"}, headers=ADMIN)
    assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND"), r.text
    assert "--in-process" in r.json()["error"]
    # No pipeline extra: no worker at all.
    with TestClient(create_app(make_settings(tmp_path / "bare"))) as bare:
        r = bare.post(ROUTE, json={"job": "pipeline"}, headers=ADMIN)
    assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND"), r.text


def test_a_run_streams_its_events_then_its_reply_queued_behind_the_run_going_on(
    client: TestClient[Any], jobs: WorkerJobs
) -> None:
    jobs.serve(True)
    jobs.mark_running("scheduled pipeline run")  # the worker is busy: the run asked for waits
    taken: list[Any] = []

    def loop() -> None:  # what the worker loop does with a run asked for
        stop = threading.Event()
        asked = None
        while asked is None:
            asked = jobs.take(stop, until=float("inf"))
        taken.append((asked.kind, asked.full_refresh, asked.tests))
        assert asked.on_event is not None
        asked.on_event(NodesPlanned("build", 1))
        asked.on_event(NodeProgress("build", "analytics__notes", "success"))
        asked.reply.set_result(RunReply(ok=True, rows_merged=3))

    worker = threading.Thread(target=loop, daemon=True)
    worker.start()
    r = client.post(ROUTE, json={"job": "pipeline", "fullRefresh": True, "tests": False},
                    headers=ADMIN)
    worker.join(10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    assert [decode_line(line) for line in r.text.splitlines()] == [
        Queued("scheduled pipeline run"),
        NodesPlanned("build", 1),
        NodeProgress("build", "analytics__notes", "success"),
        RunReply(ok=True, rows_merged=3),
    ]
    assert taken == [("pipeline", True, False)]


def test_runs_waiting_when_the_worker_stops_get_a_failed_reply(jobs: WorkerJobs) -> None:
    jobs.serve(True)
    reply = jobs.submit("materialise")
    jobs.serve(False, "the gateway stopped")
    got = reply.result(timeout=5)
    assert (got.ok, got.error, got.error_code) == (False, "the gateway stopped", "NOT_FOUND")
