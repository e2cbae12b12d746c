"""A real gateway process, killed (SIGKILL) in the middle of a Jira poll and started again:
the issues land exactly once, none is missed."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.connectors.fake_http import Reply, Request
from tests.connectors.fake_jira import FakeJira
from tests.gateway_process import ServerProcess

pytestmark = pytest.mark.slow

ISSUES = 600


class SlowJira(FakeJira):
    """Each search page takes a moment, so a poll is long enough to be killed in."""

    def _search(self, req: Request) -> Reply:
        time.sleep(0.15)
        return super()._search(req)


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with SlowJira() as fake:
        fake.add_project("OPS", "Operations")
        for i in range(ISSUES):
            iid = fake.add_issue("OPS", f"issue {i}")
            if i % 50 == 0:
                fake.add_comment(iid, "first!")
        yield fake


def status(gw: ServerProcess, name: str = "jira") -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {gw.token('root', 'gw1', role='admin')}"}
    r = httpx.get(f"{gw.url}/v1/admin/connectors/gw1/{name}/status", headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def settled(gw: ServerProcess, name: str) -> dict[str, Any]:
    """The connector's status once its first poll in this process has ended."""
    deadline = time.monotonic() + 120
    while (s := status(gw, name))["polls"] < 1 or s["state"] == "polling":
        assert time.monotonic() < deadline, s
        time.sleep(0.1)
    return s


def kill_mid_poll_and_restart(gw: ServerProcess, name: str, at: int, total: int) -> None:
    """SIGKILL the gateway once connector ``name`` pushed ``at`` deltas (of the ``total`` its
    poll has to push), start it again and wait for the poll that finishes the job."""
    while (before := status(gw, name))["deltas_pushed"] < at:
        assert before["polls"] == 0, f"the poll ended before the kill: {before}"
        time.sleep(0.02)
    gw.kill()
    assert before["deltas_pushed"] < total  # killed mid-poll
    gw.start()
    s = settled(gw, name)
    assert s["last_error"] is None and s["deltas_pushed"] > 0  # the rest, after the restart


def every_delta(gw: ServerProcess) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {gw.token('root', 'gw1', role='admin')}"}
    out: list[dict[str, Any]] = []
    since = "0"
    while True:
        r = httpx.get(
            f"{gw.url}/v1/sync/gw1/pull",
            params={"since": since, "clientId": "root", "limit": "1000"},
            headers=headers,
            timeout=30,
        )
        body = r.json()
        out += body["deltas"]
        since = body["serverHlc"]
        if not body["hasMore"]:
            return out


def test_a_gateway_killed_mid_poll_resumes_without_duplicates_or_gaps(
    tmp_path: Path, jira: FakeJira
) -> None:
    config = tmp_path / "lakesync.yaml"
    config.write_text(
        "connectors:\n"
        f"  jira: {{kind: jira, gateway: gw1, interval: 3600, url: '{jira.url}', page_size: 50,\n"
        "         chunk_rows: 25, email: bot@example.com, token: jira-api-token}\n"
    )
    gw = ServerProcess(tmp_path / "gw", config=config).start()
    try:
        kill_mid_poll_and_restart(gw, "jira", 100, ISSUES)
        deltas = every_delta(gw)
    finally:
        gw.stop()
    inserts = Counter((d["table"], d["rowId"]) for d in deltas if d["op"] == "INSERT")
    issues = {r for t, r in inserts if t == "jira_issues"}
    assert issues == set(jira.issues)  # none missed
    assert set(inserts.values()) == {1}  # none stored twice
    assert len(deltas) == ISSUES + len(jira.expected_comments()) + len(jira.projects)
