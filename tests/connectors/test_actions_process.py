"""Actions at most once, only for the clients granted them, told nothing of the upstream: a real
gateway process (``lakesync.yaml`` declaring a Jira connector with ``actions:`` grants) and the
fake Jira over HTTP, which acts on a request and then answers late, or with a body that is not
JSON, or refuses it with a body of its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.helpers import auth
from tests.connectors.fake_jira import FakeJira
from tests.gateway_process import ServerProcess

pytestmark = pytest.mark.slow

SETTLE = 10.0  # the connector's reconcile_after (an early retry lands before it, under load too)


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        fake.add_project("OPS", "Operations")
        yield fake


@pytest.fixture
def gateway(tmp_path: Path, jira: FakeJira) -> Iterator[ServerProcess]:
    config = tmp_path / "lakesync.yaml"
    config.write_text(
        "connectors:\n"
        f"  jira: {{kind: jira, gateway: gw1, interval: 3600, url: '{jira.url}',\n"
        "         email: bot@example.com, token: jira-api-token, projects: false,\n"
        f"         timeout: 1, reconcile_after: {SETTLE},\n"
        "         actions: [{action: create_issue, claims: {team: support}}]}\n"
    )
    with ServerProcess(tmp_path / "gw", config=config) as gw:
        yield gw


def run(gw: ServerProcess, tok: str, sub: str, **action: Any) -> dict[str, Any]:
    body = {"clientId": sub, "actions": [{"connector": "jira", **action}]}
    r = httpx.post(f"{gw.url}/v1/sync/gw1/action", json=body, headers=auth(tok), timeout=30)
    assert r.status_code == 200, r.text
    [result] = r.json()["results"]
    assert isinstance(result, dict)
    return result


def create(key: str, action_id: str) -> dict[str, Any]:
    return {"actionId": action_id, "actionType": "create_issue", "idempotencyKey": key,
            "params": {"projectKey": "OPS", "summary": f"from {key}"}}


def posts(jira: FakeJira) -> int:
    return sum(1 for m, p, _ in jira.requests if (m, p) == ("POST", "/rest/api/3/issue"))


def records(gw: ServerProcess) -> list[dict[str, Any]]:
    r = httpx.get(f"{gw.url}/v1/admin/actions/gw1",
                  headers=auth(gw.token("root", "gw1", role="admin")))
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()["actions"]
    return found


def test_a_2xx_reply_that_is_not_json_is_a_success_and_runs_once(
    gateway: ServerProcess, jira: FakeJira
) -> None:
    alice = gateway.token("alice", "gw1", claims={"team": "support"})
    jira.garble_next(1, only="POST /rest/api/3/issue")
    first = run(gateway, alice, "alice", **create("k1", "a1"))
    [issue] = jira.issues.values()  # done; its ids read back by the label the action put on it
    assert first.get("data") == {"id": issue["id"], "key": issue["key"]}, first
    again = run(gateway, alice, "alice", **create("k1", "a2"))
    assert "code" not in again, again
    assert posts(jira) == 1 and [i["fields"]["summary"] for i in jira.issues.values()] == [
        "from k1"]


def test_a_timeout_is_an_unknown_outcome_looked_up_instead_of_posting_again(
    gateway: ServerProcess, jira: FakeJira
) -> None:
    alice = gateway.token("alice", "gw1", claims={"team": "support"})
    jira.slow_next(1, 4.0, only="POST /rest/api/3/issue")  # created at once, answered late
    first = run(gateway, alice, "alice", **create("k2", "a1"))
    assert (first["code"], first["retryable"]) == ("ACTION_OUTCOME_UNKNOWN", True), first
    assert jira.url not in first["message"] and first["requestId"], first
    [record] = records(gateway)
    assert record["state"] == "unknown" and "ReadTimeout" in record["detail"], record
    # Before it settles a retry neither posts nor looks up.
    early = run(gateway, alice, "alice", **create("k2", "a2"))
    assert early["code"] == "ACTION_OUTCOME_UNKNOWN" and posts(jira) == 1, early
    time.sleep(SETTLE + 0.5)
    found = run(gateway, alice, "alice", **create("k2", "a3"))
    [issue] = jira.issues.values()
    assert found.get("data") == {"id": issue["id"], "key": issue["key"]}, found
    assert posts(jira) == 1 and records(gateway)[0]["state"] == "done"


def test_only_granted_clients_list_and_run_actions(
    gateway: ServerProcess, jira: FakeJira
) -> None:
    bob = gateway.token("bob", "gw1")
    alice = gateway.token("alice", "gw1", claims={"team": "support"})
    admin = gateway.token("root", "gw1", role="admin")

    def listed(tok: str) -> dict[str, list[str]]:
        r = httpx.get(f"{gateway.url}/v1/sync/gw1/actions", headers=auth(tok))
        assert r.status_code == 200, r.text
        return {c: [a["actionType"] for a in acts] for c, acts in r.json()["connectors"].items()}

    assert listed(bob) == {}
    assert listed(alice) == {"jira": ["create_issue"]}
    assert listed(admin) == {"jira": ["create_issue", "add_comment"]}
    refused = run(gateway, bob, "bob", **create("k3", "b1"))
    assert (refused["code"], refused["retryable"]) == ("FORBIDDEN", False), refused
    comment = {"actionId": "c1", "actionType": "add_comment",
               "params": {"issue": "OPS-1", "body": "hi"}}
    assert run(gateway, alice, "alice", **comment)["code"] == "FORBIDDEN"
    assert posts(jira) == 0 and jira.issues == {}
    assert "data" in run(gateway, alice, "alice", **create("k3", "a1"))
    assert "data" in run(gateway, admin, "root", **comment)


def test_an_upstream_refusal_reaches_the_client_without_its_body(
    gateway: ServerProcess, jira: FakeJira
) -> None:
    alice = gateway.token("alice", "gw1", claims={"team": "support"})
    upstream = {"errorMessages": ["db-7.internal.acme:5432 rejected: tenant quota acct 99812"]}
    jira.fail_next(1, 400, {}, upstream, only="POST /rest/api/3/issue")
    refused = run(gateway, alice, "alice", **create("k4", "a1"))
    assert (refused["code"], refused["retryable"]) == ("ACTION_FAILED", False), refused
    assert "internal" not in str(refused) and "99812" not in str(refused), refused
    assert jira.url not in str(refused) and refused["message"] == "Jira refused the action (400)"
    [record] = records(gateway)
    assert "99812" in record["detail"], record  # the operator sees what Jira said
