"""Acceptance: a fake Jira polled into a gateway, landed and run through the pipeline, gives
``analytics.jira_issues`` (and comments, projects) equal to the fake's data: typed columns (the
date-times as timestamps), and
issues deleted between polls gone."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from lakesync.canonical import canonical_json
from lakesync.connectors.jira import SCHEMAS, JiraSource
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.runner import run_pipeline
from tests.connectors.conftest import GatewayUnderTest
from tests.connectors.fake_jira import FakeJira
from tests.connectors.test_jira import seed, spec

from .conftest import Lake

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        yield fake


def analytics(lake: Lake, table: str, columns: str) -> dict[str, dict[str, Any]]:
    rows = lake.rows(f"select row_id, {columns} from analytics.{table} where gateway_id = 'gw1'")
    return {r.pop("row_id"): r for r in rows}


def test_jira_issues_in_the_lake_equal_the_fake_after_edits_and_deletions(
    lake: Lake, jira: FakeJira, tmp_path: Path
) -> None:
    ids = seed(jira, 1000)
    gateway = GatewayUnderTest(tmp_path)
    try:
        gateway.poll(JiraSource(spec(jira)))
        jira.edit_issue(ids[5], summary="renamed", labels=["hot", "new"])
        jira.delete_issue(ids[1])  # it had a comment: both go
        jira.delete_issue(ids[999])
        web = next(p for p, v in jira.projects.items() if v["key"] == "WEB")
        jira.delete_project(web)
        gateway.poll(JiraSource(spec(jira)))
        LandingFlusher(open_catalog(lake.settings), gateway.store).flush()
    finally:
        gateway.store.close()
    run_pipeline(settings=lake.settings, schemas=SCHEMAS, tests=True)

    issues = analytics(lake, "jira_issues", "key, summary, labels, updated, project_key")
    assert len(issues) == 998 and ids[1] not in issues and ids[999] not in issues
    assert issues == {
        iid: {
            "key": v["key"],
            "summary": v["fields"]["summary"],
            "labels": canonical_json(v["fields"]["labels"]),  # json columns: canonical text
            # a timestamp column: Spark shows the UTC instant without its zone
            "updated": datetime.fromisoformat(v["fields"]["updated"])
            .astimezone(UTC)
            .replace(tzinfo=None),
            "project_key": v["fields"]["project"]["key"],
        }
        for iid, v in jira.issues.items()
    }
    assert issues[ids[5]]["labels"] == '["hot","new"]'
    comments = analytics(lake, "jira_comments", "issue_id")
    assert {c: r["issue_id"] for c, r in comments.items()} == jira.expected_comments()
    projects = analytics(lake, "jira_projects", "key, is_private")
    assert projects == {p: {"key": v["key"], "is_private": False} for p, v in jira.projects.items()}
