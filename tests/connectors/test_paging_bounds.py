"""Every pagination loop of a connector ends, whatever the outside system answers: a repeated
next-page token, a "not the last page" that never ends, a total never reached or a next-page URL
on another host ends the poll with an error after a few requests (against the fake APIs over
real HTTP, into a real gateway store); ids from a payload go into URLs as one path segment."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from lakesync.connector_specs import JiraSpec, SalesforceSpec, parse_connector
from lakesync.connectors import PagingError
from lakesync.connectors.jira import JiraSource
from lakesync.connectors.salesforce import SalesforceSource
from tests.connectors.conftest import GatewayUnderTest
from tests.connectors.fake_jira import FakeJira
from tests.connectors.fake_salesforce import FakeSalesforce

# The fakes refuse every request past this many, so a loop that would not end fails the test
# instead of hanging it.
BUDGET = 300
FEW = 12


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    with FakeJira() as fake:
        fake.request_budget = BUDGET
        fake.add_project("OPS", "Operations")
        for i in range(120):
            iid = fake.add_issue("OPS", f"issue {i}")
            for c in range(5 if i < 3 else 0):  # more comments than a search inlines
                fake.add_comment(iid, f"comment {c}")
        yield fake


def jira_spec(fake: FakeJira) -> JiraSpec:
    body = {"kind": "jira", "gateway": "gw1", "url": fake.url, "email": "bot@example.com"}
    body |= {"token": "jira-api-token", "page_size": 50}
    spec = parse_connector("jira1", body)
    assert isinstance(spec, JiraSpec)
    return spec


def poll_fails(gateway: GatewayUnderTest, source: JiraSource | SalesforceSource) -> str:
    """One poll, which must fail with a paging error; the connector's last error."""
    poller = gateway.poller("conn1", source)

    async def run() -> None:
        try:
            await poller.poll_once()
        finally:
            await source.aclose()

    with pytest.raises(PagingError):
        asyncio.run(run())
    assert poller.status.last_error is not None
    return poller.status.last_error


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("repeat-token", "repeats an earlier next-page token"),
        ("never-last", "brings nothing new"),
        ("comment-total", "comments of Jira issue"),
        ("projects-never-last", "Jira project search"),
    ],
)
def test_jira_paging_that_would_not_end_ends_the_poll(
    gateway: GatewayUnderTest, jira: FakeJira, fault: str, says: str
) -> None:
    jira.paging_fault = fault
    error = poll_fails(gateway, JiraSource(jira_spec(jira)))
    assert says in error, error
    assert len(jira.requests) <= FEW, (len(jira.requests), jira.requests[-3:])


def test_jira_issue_ids_from_the_payload_are_one_path_segment(
    gateway: GatewayUnderTest, jira: FakeJira
) -> None:
    # An id that, unencoded, would address another resource of the API with the bot's rights.
    odd = jira.add_issue("OPS", "odd id")
    for c in range(5):
        jira.add_comment(odd, f"odd comment {c}")
    with jira.lock:
        moved = "../../project/search?x="
        jira.issues[moved] = {**jira.issues.pop(odd), "id": moved}
        jira.comments[moved] = jira.comments.pop(odd)
    gateway.poll(JiraSource(jira_spec(jira)))
    comments = gateway.rows("jira_comments")
    assert sorted(c for c, r in comments.items() if r["issue_id"] == moved) == sorted(
        c["id"] for c in jira.comments[moved]
    )
    paths = {path for method, path, _ in jira.requests if method == "GET"}
    assert "/rest/api/3/issue/..%2F..%2Fproject%2Fsearch%3Fx%3D/comment" in paths, paths
    searches = [p for m, p, _ in jira.requests if (m, p) == ("GET", "/rest/api/3/project/search")]
    assert len(searches) == 1  # the poll's own: the id sent no request of its own there


@pytest.fixture
def org() -> Iterator[FakeSalesforce]:
    with FakeSalesforce() as fake:
        fake.request_budget = BUDGET
        for i in range(450):
            fake.add("Account", Name=f"acct {i}")
        yield fake


def sf_spec(fake: FakeSalesforce) -> SalesforceSpec:
    body = {"kind": "salesforce", "gateway": "gw1", "login_url": fake.url, **fake.login}
    body |= {"objects": ["Account"], "page_size": 200}
    spec = parse_connector("crm", body)
    assert isinstance(spec, SalesforceSpec)
    return spec


def test_salesforce_next_records_url_repeated_ends_the_poll(
    gateway: GatewayUnderTest, org: FakeSalesforce
) -> None:
    org.paging_fault = "repeat-next"
    error = poll_fails(gateway, SalesforceSource(sf_spec(org)))
    assert "Salesforce query of Account" in error, error
    assert len(org.requests) <= FEW, len(org.requests)


def test_salesforce_next_records_url_on_another_host_is_not_followed(
    gateway: GatewayUnderTest, org: FakeSalesforce
) -> None:
    with FakeSalesforce() as elsewhere:
        # Appended to the instance URL as it stands, this makes the instance's host:port the
        # user info of a URL on another host.
        host = elsewhere.url.removeprefix("http://")
        org.paging_fault = f"@{host}/services/data/v60.0/query/stolen-0"
        error = poll_fails(gateway, SalesforceSource(sf_spec(org)))
        assert "not an API path" in error, error
        assert elsewhere.requests == []  # the session's bearer token never went there
