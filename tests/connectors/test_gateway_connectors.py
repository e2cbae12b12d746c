"""Connectors inside a running gateway app: registered through the admin API, polled in the
background, their rows pulled by clients, their status and credentials as the routes show them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from lakesync.api.app import create_app
from tests.api.helpers import Gateway, Replica, make_settings, token
from tests.connectors.fake_jira import FakeJira


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        fake.add_project("OPS", "Operations")
        for i in range(30):
            fake.add_issue("OPS", f"issue {i}")
        yield fake


def wait_for_poll(gateway: Gateway, name: str, polls: int = 1) -> dict[str, Any]:
    """The connector's status once it finished ``polls`` polls (the test's timeout bounds it)."""
    while True:
        status = gateway.admin("GET", f"/v1/admin/connectors/gw1/{name}/status").json()
        if status["polls"] >= polls and status["state"] != "polling":
            return status
        time.sleep(0.05)


def test_a_registered_connector_feeds_clients_and_reports_status(
    tmp_path: Path, jira: FakeJira, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKESYNC_TEST_JIRA_TOKEN", "jira-api-token")
    body = {"name": "jira1", "type": "jira", "url": jira.url, "email": "bot@example.com"}
    body |= {"token": "${LAKESYNC_TEST_JIRA_TOKEN}", "interval": 0.2}
    with TestClient(create_app(make_settings(tmp_path))) as client:
        gateway = Gateway(client)
        r = gateway.admin("POST", "/v1/admin/connectors/gw1", json=body)
        assert r.status_code == 200, r.text
        status = wait_for_poll(gateway, "jira1")
        assert status["last_error"] is None and status["deltas_pushed"] == 31
        replica = Replica()
        gateway.sync(token("alice", role="admin"), "alice", replica)
        summaries = {r["summary"] for (t, _), r in replica.rows().items() if t == "jira_issues"}
        assert summaries == {f"issue {i}" for i in range(30)}

        # An edit reaches clients on a later poll; a failing poll keeps its error.
        jira.edit_issue(next(iter(jira.issues)), summary="edited")
        status = wait_for_poll(gateway, "jira1", status["polls"] + 2)
        gateway.sync(token("alice", role="admin"), "alice", replica)
        assert "edited" in {r["summary"] for r in replica.rows().values() if "summary" in r}
        good = jira.credentials
        jira.credentials = "rotated"
        status = wait_for_poll(gateway, "jira1", status["polls"] + 2)
        assert status["failed_polls"] >= 1 and "401" in status["last_error"]
        listed = gateway.admin("GET", "/v1/admin/connectors/gw1").json()["connectors"]
        assert listed == [body]  # a ${VAR} reference is shown as written
        stored = len(gateway.http.app.state.service.store.read_log(0, 10_000))

    # A restart starts the registered connector again from its stored cursor: nothing new.
    jira.credentials = good
    with TestClient(create_app(make_settings(tmp_path))) as client:
        gateway = Gateway(client)
        status = wait_for_poll(gateway, "jira1")
        assert status["last_error"] is None and status["deltas_pushed"] == 0
        assert len(client.app.state.service.store.read_log(0, 10_000)) == stored
        assert gateway.admin("DELETE", "/v1/admin/connectors/gw1/jira1").status_code == 204
        assert gateway.admin("GET", "/v1/admin/connectors/gw1").json() == {"connectors": []}


def test_a_declared_connector_runs_with_the_app_and_its_secret_stays_hidden(
    tmp_path: Path, jira: FakeJira, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakesync.connector_specs import parse_connector

    secret = tmp_path / "jira-token"
    secret.write_text("jira-api-token\n")
    declared = parse_connector(
        "jira1",
        {
            "kind": "jira",
            "gateway": "gw1",
            "url": jira.url,
            "email": "bot@example.com",
            "token": f"${{file:{secret}}}",
            "interval": 30,
        },
    )
    settings = make_settings(tmp_path, connectors={"jira1": declared})
    with TestClient(create_app(settings)) as client:
        gateway = Gateway(client)
        status = wait_for_poll(gateway, "jira1")
        assert status["last_error"] is None and status["deltas_pushed"] == 31
        listed = gateway.admin("GET", "/v1/admin/connectors/gw1").json()["connectors"]
        assert [(c["name"], c["type"], c["token"]) for c in listed] == [
            ("jira1", "jira", f"${{file:{secret}}}")
        ]
        text = client.get("/metrics").text
        assert 'lakesync_connector_deltas_total{connector="jira1",gateway="gw1"} 31.0' in text
        assert 'lakesync_connector_failed_polls_total{connector="jira1",gateway="gw1"} 0.0' in text
        assert (
            "jira-api-token"
            not in client.get(
                "/v1/admin/connectors/gw1",
                headers={"Authorization": f"Bearer {token('root', role='admin')}"},
            ).text
        )


def test_metrics_without_gateway_labels_show_connector_totals(
    tmp_path: Path, jira: FakeJira
) -> None:
    from lakesync.connector_specs import parse_connector

    declared = parse_connector(
        "jira1",
        {
            "kind": "jira",
            "gateway": "gw1",
            "url": jira.url,
            "email": "bot@example.com",
            "token": "jira-api-token",
            "interval": 30,
        },
    )
    settings = make_settings(tmp_path, connectors={"jira1": declared}, metrics_gateway_labels=False)
    with TestClient(create_app(settings)) as client:
        wait_for_poll(Gateway(client), "jira1")
        lines = [x for x in client.get("/metrics").text.splitlines() if "connector" in x]
        assert "lakesync_connector_deltas_total 31.0" in lines
        assert not [x for x in lines if "gw1" in x or "jira1" in x]
