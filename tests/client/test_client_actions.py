"""execute_action end to end: a client, a real gateway process whose lakesync.yaml declares a
Jira connector, and a fake Jira over HTTP. Actions survive being offline and a restart of the
client, retryable failures are retried until they pass, each runs once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lakesync.client import LakeSyncClient
from lakesync.client._backoff import Backoff
from lakesync.client._types import Event
from tests.connectors.fake_jira import FakeJira
from tests.gateway_process import ServerProcess

pytestmark = pytest.mark.slow

FAST = Backoff(base=0.01, cap=0.05, max_retries=6)


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
        "         email: bot@example.com, token: '${LAKESYNC_TEST_JIRA_TOKEN}', projects: false}\n"
    )
    env = {"LAKESYNC_TEST_JIRA_TOKEN": "jira-api-token"}
    with ServerProcess(tmp_path / "gw", env=env, config=config) as gw:
        yield gw


def client(gw: ServerProcess, path: Path) -> LakeSyncClient:
    return LakeSyncClient(
        str(path), url=gw.url, gateway_id="gw1", token=gw.token("alice", "gw1"), backoff=FAST
    )


def test_retryable_failures_are_retried_and_the_action_runs_once(
    gateway: ServerProcess, jira: FakeJira, tmp_path: Path
) -> None:
    events: list[Event] = []
    with client(gateway, tmp_path / "a.db") as c:
        c.on("action_complete", events.append)
        jira.fail_next(3, 503, {}, {"errorMessages": ["busy"]}, only="POST /rest/api/3/issue")
        first = c.execute_action("jira", "create_issue", {"projectKey": "OPS", "summary": "Hi"})
        assert first.state == "pending" and first.attempts == 1
        assert c.run_actions() == 0
        done = c.action(first.action_id)
        assert done is not None and done.state == "succeeded"
        assert done.result is not None and done.result["data"]["key"] == "OPS-1"
        assert [e.detail["action_id"] for e in events] == [first.action_id]
        assert [i["fields"]["summary"] for i in jira.issues.values()] == ["Hi"]
        # A refusal is final: reported, not retried.
        bad = c.execute_action("jira", "add_comment", {"issue": "NOPE-1", "body": "x"})
        assert bad.state == "failed" and bad.result is not None
        assert bad.result["code"] == "ACTION_FAILED" and len(events) == 2


def test_actions_wait_offline_durably_and_complete_on_the_next_sync(
    gateway: ServerProcess, jira: FakeJira, tmp_path: Path
) -> None:
    gateway.stop()
    path = tmp_path / "offline.db"
    with client(gateway, path) as c:
        queued = c.execute_action(
            "jira", "create_issue", {"projectKey": "OPS", "summary": "Offline"}, "order-42"
        )
        assert queued.state == "pending"
    gateway.start()
    with client(gateway, path) as c:  # a new process: the outbox is in the file
        c.sync()
        done = c.action(queued.action_id)
        assert done is not None and done.state == "succeeded"
        # The same idempotency key again (another action) does not create a second issue.
        again = c.execute_action(
            "jira", "create_issue", {"projectKey": "OPS", "summary": "Offline"}, "order-42"
        )
        assert again.result == {**done.result, "actionId": again.action_id}
    assert [i["fields"]["summary"] for i in jira.issues.values()] == ["Offline"]
