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
            body |= {"actions": [{"action": "*"}]}  # every client of the gateway
            assert g.admin("POST", "/v1/admin/connectors/gw1", json=body).status_code == 200
            body = {"name": "crm", "type": "salesforce", "login_url": org.url, "interval": 3600}
            body |= {k: v for k, v in org.login.items()} | {"actions": [{"action": "*"}]}
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


def register_fast(g: Gateway, body: dict[str, Any]) -> None:
    """A connector whose requests time out after 1 s and whose unknown outcomes are looked up
    at once (the fakes answer their look-ups at once)."""
    body |= {"interval": 3600, "timeout": 1, "actions": [{"action": "*"}]}
    assert g.admin("POST", "/v1/admin/connectors/gw1", json=body).status_code == 200


def test_a_comment_whose_reply_was_lost_is_found_not_posted_again(
    gateway: tuple[Gateway, FakeJira, FakeSalesforce],
) -> None:
    g, jira, _ = gateway
    body = {"name": "jira_fast", "type": "jira", "url": jira.url, "projects": False}
    register_fast(g, body | {"email": "bot@example.com", "token": "jira-api-token",
                             "reconcile_after": 0})
    [issue] = jira.issues
    for i in range(4):  # the look-up pages through comments that are not the action's
        jira.add_comment(issue, f"earlier {i}")
    comment = {"actionId": "c1", "connector": "jira_fast", "actionType": "add_comment"}
    comment |= {"params": {"issue": "OPS-1", "body": "once"}, "idempotencyKey": "note-1"}
    jira.slow_next(1, 3.0, only="POST /rest/api/3/issue/OPS-1/comment")
    [lost] = run(g, comment)
    assert (lost["code"], lost["retryable"]) == ("ACTION_OUTCOME_UNKNOWN", True), lost
    [found] = run(g, comment | {"actionId": "c2"})
    mine = [c for c in jira.comments[issue] if c["body"]["content"][0]["content"][0]["text"]
            == "once"]
    assert len(mine) == 1 and found.get("data") == {"id": mine[0]["id"]}, found


def test_a_salesforce_update_whose_reply_was_lost_is_sent_again(
    gateway: tuple[Gateway, FakeJira, FakeSalesforce],
) -> None:
    g, _, org = gateway
    register_fast(g, {"name": "crm_fast", "type": "salesforce", "login_url": org.url,
                      **org.login})
    rid = org.add("Account", Name="Acme")
    update = {"actionId": "u1", "connector": "crm_fast", "actionType": "update_record"}
    update |= {"params": {"object": "Account", "id": rid, "fields": {"Name": "Acme Ltd"}}}
    org.slow_next(1, 3.0, only="PATCH")
    [lost] = run(g, update)
    assert lost["code"] == "ACTION_OUTCOME_UNKNOWN" and lost["retryable"] is True, lost
    [done] = run(g, update | {"actionId": "u2"})  # an update is idempotent: it runs again
    assert done["data"] == {"id": rid} and org.records["Account"][rid]["Name"] == "Acme Ltd"
