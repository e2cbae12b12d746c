"""The Jira connector against a fake Jira Cloud over real HTTP, into a real gateway store."""

from __future__ import annotations

import asyncio
import contextlib
import tracemalloc
from collections.abc import AsyncGenerator, Iterator, Mapping
from typing import Any

import pytest

from lakesync.connector_specs import JiraSpec, parse_connector
from lakesync.connectors import Chunk, Source
from lakesync.connectors.jira import JiraSource, jql_for
from lakesync.schema import TableSchema
from tests.connectors.conftest import GatewayUnderTest, wire_time
from tests.connectors.fake_jira import FakeJira


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        yield fake


def spec(fake: FakeJira, **kw: Any) -> JiraSpec:
    body = {"kind": "jira", "gateway": "gw1", "url": fake.url, "email": "bot@example.com"}
    body |= {"token": "jira-api-token", "page_size": 50, "chunk_rows": 40} | kw
    parsed = parse_connector("jira1", body)
    assert isinstance(parsed, JiraSpec)
    return parsed


def seed(fake: FakeJira, issues: int) -> list[str]:
    fake.add_project("OPS", "Operations")
    fake.add_project("WEB", "Website")
    ids = [
        fake.add_issue("OPS" if i % 3 else "WEB", f"issue {i}", [f"l{i % 4}"])
        for i in range(issues)
    ]
    for i, iid in enumerate(ids[:60]):
        for c in range(i % 6):  # some issues have more comments than the search inlines
            fake.add_comment(iid, f"comment {c}")
    return ids


def assert_mirrors(gateway: GatewayUnderTest, fake: FakeJira) -> None:
    issues = gateway.rows("jira_issues")
    expected = {
        i: v | {"updated": wire_time(v["updated"])} for i, v in fake.expected_issues().items()
    }
    assert {
        i: {k: r[k] for k in ("key", "summary", "labels", "updated")} for i, r in issues.items()
    } == expected
    comments = gateway.rows("jira_comments")
    assert {c: r["issue_id"] for c, r in comments.items()} == fake.expected_comments()
    projects = gateway.rows("jira_projects")
    assert {p: r["key"] for p, r in projects.items()} == {
        p: v["key"] for p, v in fake.projects.items()
    }


def test_a_thousand_issues_with_edits_deletions_and_429s_settle_to_the_fake(
    gateway: GatewayUnderTest, jira: FakeJira
) -> None:
    ids = seed(jira, 1000)
    jira.fail_next(2, 429, {"Retry-After": "1"}, {"errorMessages": ["Rate limit exceeded"]})
    assert gateway.poll(JiraSource(spec(jira))) > 1000
    assert jira.statuses(429) == 2
    assert_mirrors(gateway, jira)

    # Between polls: edits, a new comment, a removed comment, deletions, a project gone.
    jira.edit_issue(ids[5], summary="renamed", labels=["hot"])
    jira.add_comment(ids[700], "late comment")
    first = next(c for c, iid in jira.expected_comments().items() if iid == ids[3])
    jira.delete_comment(ids[3], first)
    jira.delete_issue(ids[1])  # its comment goes with it
    jira.delete_issue(ids[999])
    web = next(p for p, v in jira.projects.items() if v["key"] == "WEB")
    jira.delete_project(web)
    jira.add_issue("OPS", "brand new")
    jira.fail_next(1, 429, {"Retry-After": "0"})
    before = len(gateway.log())
    gateway.poll(JiraSource(spec(jira)))
    assert_mirrors(gateway, jira)
    # Only the changes were pushed: the renamed issue (1), the new comment and its issue's
    # new ``updated`` (2), the removed comment and its issue (2), the deleted issues (2) and
    # the comment of one of them (1), the project (1) and the new issue (1).
    assert len(gateway.log()) - before == 10
    # A poll with nothing new pushes nothing.
    assert gateway.poll(JiraSource(spec(jira))) == 0


class CrashAfter(Source):
    """The Jira source, dying (as a killed gateway would) after ``chunks`` chunks."""

    def __init__(self, inner: Source, chunks: int) -> None:
        self.inner = inner
        self.chunks = chunks

    async def schemas(self) -> list[TableSchema]:
        return list(await self.inner.schemas())

    async def poll(self, cursor: Mapping[str, Any]) -> AsyncGenerator[Chunk, None]:
        n = 0
        async with contextlib.aclosing(self.inner.poll(cursor)) as chunks:
            async for chunk in chunks:
                if n == self.chunks:
                    raise RuntimeError("killed")
                n += 1
                yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_a_restart_mid_poll_neither_duplicates_nor_misses(
    gateway: GatewayUnderTest, jira: FakeJira, tmp_path_factory: pytest.TempPathFactory
) -> None:
    seed(jira, 300)
    with pytest.raises(RuntimeError, match="killed"):
        gateway.poll(CrashAfter(JiraSource(spec(jira)), 7))
    stored = len(gateway.log())
    assert stored > 0
    gateway.restart()
    gateway.poll(JiraSource(spec(jira)))
    assert_mirrors(gateway, jira)
    # An uninterrupted run over the same data stores exactly as many deltas.
    clean = GatewayUnderTest(tmp_path_factory.mktemp("clean"))
    try:
        clean.poll(JiraSource(spec(jira)))
        assert len(gateway.log()) == len(clean.log())
        assert len({d.delta_id for d in gateway.log()}) == len(gateway.log())
    finally:
        clean.store.close()


def test_chunks_bound_what_a_poll_holds(gateway: GatewayUnderTest, jira: FakeJira) -> None:
    seed(jira, 400)
    sizes: list[int] = []
    source = JiraSource(spec(jira, chunk_rows=25, page_size=100))
    poller = gateway.poller("jira1", source)
    push = poller.sink.push

    async def counting(deltas: Any) -> None:
        sizes.append(len(deltas))
        await push(deltas)

    poller.sink.push = counting  # type: ignore[method-assign]
    tracemalloc.start()
    asyncio.run(poller.poll_once())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    asyncio.run(source.aclose())
    assert sizes and max(sizes) <= 25
    assert sum(sizes) == len(gateway.log())
    print(f"jira poll of 400 issues, chunk_rows=25: peak traced memory {peak / 1e6:.1f} MB")


def test_wrong_credentials_fail_the_poll_with_a_clear_error(
    gateway: GatewayUnderTest, jira: FakeJira
) -> None:
    seed(jira, 3)
    source = JiraSource(spec(jira, token="wrong"))
    poller = gateway.poller("jira1", source)
    with pytest.raises(Exception, match="401"):
        asyncio.run(poller.poll_once())
    assert poller.status.last_error is not None and "401" in poller.status.last_error
    assert "wrong" not in poller.status.last_error
    assert gateway.log() == []


def test_incremental_jql_is_bounded_and_overlaps_to_the_minute() -> None:
    assert jql_for("", None, 60) == "project IS NOT EMPTY ORDER BY updated ASC"
    assert (
        jql_for("project = OPS", "2026-01-01T10:05:30.000+0000", 120)
        == 'updated >= "2026-01-01 10:03" AND (project = OPS) ORDER BY updated ASC'
    )


class EditingJira(FakeJira):
    """Edits issues while a search is being paged: after the first page of the first search,
    one issue already served and one not yet served change."""

    def __init__(self) -> None:
        super().__init__()
        self.edits: list[str] = []

    def _search(self, req: Any) -> Any:
        reply = super()._search(req)
        if self.edits and req.query.get("nextPageToken") is None and "fields" in req.query:
            served, later = self.edits
            self.edits = []
            self.edit_issue(served, summary="edited after its page")
            self.edit_issue(later, summary="edited before its page")
        return reply


def test_issues_edited_between_pages_are_not_lost(gateway: GatewayUnderTest) -> None:
    with EditingJira() as jira:
        ids = seed(jira, 120)
        jira.edits = [ids[0], ids[110]]  # oldest first: ids[0] is on page 1, ids[110] is not
        gateway.poll(JiraSource(spec(jira)))
        assert_mirrors(gateway, jira)
        rows = gateway.rows("jira_issues")
        assert rows[ids[0]]["summary"] == "edited after its page"
        assert rows[ids[110]]["summary"] == "edited before its page"
