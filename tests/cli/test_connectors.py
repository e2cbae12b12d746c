"""``lakesync connectors`` against a real gateway process: its connectors with their last
poll, cursor and last error; one clear line when the gateway is down or refuses the token."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakesync.cli.connectors import cursor_summary
from tests.api.helpers import SECRET
from tests.cli.test_main import run_cli
from tests.connectors.fake_jira import FakeJira
from tests.gateway_process import ServerProcess


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[ServerProcess]:
    with FakeJira() as jira:
        jira.add_project("OPS", "Operations")
        for i in range(3):
            jira.add_issue("OPS", f"issue {i}")
        config = tmp_path / "lakesync.yaml"
        common = f"kind: jira, gateway: gw1, interval: 3600, url: '{jira.url}'"
        config.write_text(
            "connectors:\n"
            f"  tracker: {{{common}, email: bot@example.com, token: jira-api-token}}\n"
            f"  broken: {{{common}, email: bot@example.com, token: not-the-token}}\n"
        )
        with ServerProcess(tmp_path / "gw", config=config) as gw:
            yield gw


def wait_polled(gw: ServerProcess) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = run_cli("connectors", "--gw", "gw1", "--url", gw.url, secret=SECRET)
        assert out.returncode == 0, out.stderr
        if out.stdout.count("idle") == 2:
            return out.stdout
        time.sleep(0.2)
    raise AssertionError(f"connectors did not poll: {out.stdout}")


def test_lists_the_connectors_with_last_poll_cursor_and_last_error(
    gateway: ServerProcess,
) -> None:
    shown = wait_polled(gateway)
    lines = {line.split()[1]: line for line in shown.splitlines() if "│ " in line}
    tracker, broken = lines["tracker"], lines["broken"]
    assert "jira" in tracker and "1 (0 failed)" in tracker
    assert '"updated":"2026-01-01T00:00:' in tracker  # the stored cursor's mark
    assert "SourceHTTPError: 401" in broken and "1 (1 failed)" in broken
    assert "not-the-token" not in shown and "jira-api-token" not in shown
    assert "never" not in tracker  # a last poll time is shown


def test_a_refused_token_and_a_stopped_gateway_are_one_line_errors(
    gateway: ServerProcess,
) -> None:
    client = gateway.token("alice", "gw1")  # a client token: not an admin
    out = run_cli("connectors", "--gw", "gw1", "--url", gateway.url, "--token", client, secret=None)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("error: the gateway refused the token (403")
    assert len(out.stderr.strip().splitlines()) == 1
    wrong = run_cli("connectors", "--gw", "gw1", "--url", gateway.url, secret="x" * 40)
    assert wrong.returncode == 1 and "refused the token (401" in wrong.stderr
    gateway.stop()
    down = run_cli("connectors", "--gw", "gw1", "--url", gateway.url, secret=SECRET)
    assert down.returncode == 1 and len(down.stderr.strip().splitlines()) == 1
    assert down.stderr.startswith("error: cannot reach the gateway at http://127.0.0.1:")
    assert "is it running" in down.stderr


def test_cursor_summary_shows_marks_and_counts_id_lists() -> None:
    assert cursor_summary({}) == "-"
    cursor = {"updated": "2026-01-01T00:00:03.000+0000", "projects": ["1"], "keys": list("abcd")}
    assert cursor_summary(cursor) == (
        '{"updated":"2026-01-01T00:00:03.000+0000","projects":["1"],"keys":"<4 ids>"}'
    )
