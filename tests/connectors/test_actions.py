"""Jira and Salesforce actions through the gateway's routes, against the fake APIs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from lakesync.api.app import create_app
from tests.api.helpers import Gateway, auth, make_settings, token
from tests.connectors.fake_jira import FakeJira
from tests.connectors.fake_salesforce import FakeSalesforce

ALICE = token("alice")


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[Gateway, FakeJira, FakeSalesforce]]:
    with FakeJira() as jira, FakeSalesforce() as org:
        jira.add_project("OPS", "Operations")
        jira.add_issue("OPS", "existing")
        with TestClient(create_app(make_settings(tmp_path))) as client:
            g = Gateway(client)
            body = {"name": "jira", "type": "jira", "url": jira.url, "interval": 3600}
            body |= {"email": "bot@example.com", "token": "jira-api-token", "projects": False}
            assert g.admin("POST", "/v1/admin/connectors/gw1", json=body).status_code == 200
            body = {"name": "crm", "type": "salesforce", "login_url": org.url, "interval": 3600}
            body |= {k: v for k, v in org.login.items()}
            assert g.admin("POST", "/v1/admin/connectors/gw1", json=body).status_code == 200
            yield g, jira, org


def run(g: Gateway, *actions: dict[str, Any]) -> list[dict[str, Any]]:
    body = {"clientId": "alice", "actions": list(actions)}
    r = g.http.post("/v1/sync/gw1/action", json=body, headers=auth(ALICE))
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return results


def test_discovery_lists_every_handler_with_its_params_schema(
    gateway: tuple[Gateway, FakeJira, FakeSalesforce],
) -> None:
    g, _, _ = gateway
    r = g.http.get("/v1/sync/gw1/actions", headers=auth(ALICE))
    found = {c: [a["actionType"] for a in acts] for c, acts in r.json()["connectors"].items()}
    assert found == {"crm": ["update_record"], "jira": ["create_issue", "add_comment"]}
    create = r.json()["connectors"]["jira"][0]
    assert create["paramsSchema"]["required"] == ["projectKey", "summary"]


def test_the_same_idempotency_key_creates_one_issue_and_a_503_is_retryable(
    gateway: tuple[Gateway, FakeJira, FakeSalesforce],
) -> None:
    g, jira, _ = gateway
    create = {"connector": "jira", "actionType": "create_issue", "idempotencyKey": "new-1"}
    create |= {"params": {"projectKey": "OPS", "summary": "From the app"}}
    jira.fail_next(1, 503, {}, {"errorMessages": ["busy"]}, only="POST /rest/api/3/issue")
    [failed] = run(g, create | {"actionId": "a1"})
    assert failed["code"] == "ACTION_FAILED" and failed["retryable"] is True, failed
    [first] = run(g, create | {"actionId": "a2"})
    [second] = run(g, create | {"actionId": "a3"})
    assert first["data"]["key"] == second["data"]["key"] == "OPS-2"
    assert second["actionId"] == "a3"
    assert [i["fields"]["summary"] for i in jira.issues.values()] == ["existing", "From the app"]

    comment = {"actionId": "c1", "connector": "jira", "actionType": "add_comment"}
    comment |= {"params": {"issue": "OPS-2", "body": "looks good"}}
    [done] = run(g, comment)
    assert jira.comments[first["data"]["id"]][0]["id"] == done["data"]["id"]
    [missing] = run(g, comment | {"actionId": "c2", "params": {"issue": "OPS-99", "body": "x"}})
    assert missing["code"] == "ACTION_FAILED" and missing["retryable"] is False


def test_salesforce_update_record_and_bad_params(
    gateway: tuple[Gateway, FakeJira, FakeSalesforce],
) -> None:
    g, _, org = gateway
    rid = org.add("Account", Name="Acme")
    update = {"actionId": "u1", "connector": "crm", "actionType": "update_record"}
    update |= {"params": {"object": "Account", "id": rid, "fields": {"Name": "Acme Ltd"}}}
    [ok] = run(g, update)
    assert ok["data"] == {"id": rid} and org.records["Account"][rid]["Name"] == "Acme Ltd"
    [bad] = run(g, update | {"actionId": "u2", "params": {"object": "Planet", "id": rid}})
    assert bad["code"] == "VALIDATION_ERROR" and bad["retryable"] is False
    r = g.http.post(
        "/v1/sync/gw1/action",
        json={"clientId": "alice", "actions": [{"actionId": "x"}]},
        headers=auth(ALICE),
    )
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"
