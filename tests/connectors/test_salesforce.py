"""The Salesforce connector against a fake org over real HTTP, into a real gateway store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from lakesync.connector_specs import SalesforceSpec, parse_connector
from lakesync.connectors.salesforce import OBJECTS, SalesforceSource, column_name, soql_for
from tests.connectors.conftest import GatewayUnderTest, wire_time
from tests.connectors.fake_salesforce import FakeSalesforce
from tests.connectors.test_jira import CrashAfter


@pytest.fixture
def org() -> Iterator[FakeSalesforce]:
    with FakeSalesforce() as fake:
        yield fake


def spec(fake: FakeSalesforce, **kw: Any) -> SalesforceSpec:
    body = {"kind": "salesforce", "gateway": "gw1", "login_url": fake.url, "page_size": 200}
    body |= fake.login | {"chunk_rows": 150} | kw
    body.pop("grant_type", None)
    parsed = parse_connector("sf1", body)
    assert isinstance(parsed, SalesforceSpec)
    return parsed


def seed(fake: FakeSalesforce, accounts: int) -> list[str]:
    ids = [
        fake.add("Account", Name=f"Acme {i}", AnnualRevenue=i * 1000.5, NumberOfEmployees=i)
        for i in range(accounts)
    ]
    for i in range(accounts // 2):
        fake.add("Contact", LastName=f"Doe {i}", Email=f"d{i}@x.io", AccountId=ids[i])
    for i in range(accounts // 4):
        fake.add(
            "Opportunity", Name=f"Deal {i}", Amount=10.0 * i, IsWon=i % 2 == 0, AccountId=ids[i]
        )
    fake.add("Lead", LastName="Lee", Company="Initech", IsConverted=False)
    return ids


def assert_mirrors(gateway: GatewayUnderTest, fake: FakeSalesforce) -> None:
    def wire(typ: str, value: Any) -> Any:
        if value is None:
            return None
        if typ == "timestamp":
            return wire_time(value)
        if typ == "decimal(18,2)":
            return f"{value:.2f}"
        return value

    for obj, (table, fields) in OBJECTS.items():
        expected = {
            rid: {column_name(f): wire(t, r.get(f)) for f, t in fields.items()}
            for rid, r in fake.records[obj].items()
        }
        assert gateway.rows(table) == expected, obj


def test_records_edits_deletions_token_expiry_and_503s_settle_to_the_org(
    gateway: GatewayUnderTest, org: FakeSalesforce
) -> None:
    ids = seed(org, 800)
    org.fail_next(2, 503, {}, [{"message": "busy", "errorCode": "SERVER_UNAVAILABLE"}])
    source = SalesforceSource(spec(org))
    gateway.poll(source)
    assert org.statuses(503) == 2 and source.session.logins == 1
    assert_mirrors(gateway, org)

    org.edit("Account", ids[3], Name="Renamed", AnnualRevenue=None)
    org.delete("Account", ids[4])
    org.delete("Contact", next(iter(org.records["Contact"])))
    org.add("Lead", LastName="New", Company="Hooli", IsConverted=True)
    before = len(gateway.log())
    source = SalesforceSource(spec(org))

    # The session expires mid-poll (after the login and the first query): re-login once.
    real_get = source._get
    calls = 0

    async def expiring_get(path: str, **params: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            org.expire_tokens()
        return await real_get(path, **params)

    source._get = expiring_get  # type: ignore[method-assign]
    gateway.poll(source)
    assert source.session.logins == 2 and org.statuses(401) == 1
    assert_mirrors(gateway, org)
    assert len(gateway.log()) - before == 4
    assert gateway.poll(SalesforceSource(spec(org))) == 0


def test_a_restart_mid_poll_neither_duplicates_nor_misses(
    gateway: GatewayUnderTest, org: FakeSalesforce, tmp_path_factory: pytest.TempPathFactory
) -> None:
    seed(org, 600)
    with pytest.raises(RuntimeError, match="killed"):
        gateway.poll(CrashAfter(SalesforceSource(spec(org)), 3))
    gateway.restart()
    gateway.poll(SalesforceSource(spec(org)))
    assert_mirrors(gateway, org)
    clean = GatewayUnderTest(tmp_path_factory.mktemp("clean"))
    try:
        clean.poll(SalesforceSource(spec(org)))
        assert len(gateway.log()) == len(clean.log())
    finally:
        clean.store.close()


def test_bad_credentials_fail_with_the_oauth_error_and_store_nothing(
    gateway: GatewayUnderTest, org: FakeSalesforce
) -> None:
    seed(org, 4)
    with pytest.raises(Exception, match="invalid_grant"):
        gateway.poll(SalesforceSource(spec(org, password="nope")))
    assert gateway.log() == []


def test_soql_is_incremental_on_last_modified_date() -> None:
    assert soql_for("Lead", None, 60).endswith("FROM Lead ORDER BY LastModifiedDate ASC, Id ASC")
    assert "WHERE LastModifiedDate >= 2026-01-01T09:59:30Z ORDER BY" in soql_for(
        "Lead", "2026-01-01T10:00:30.000+0000", 60
    )
    assert column_name("NumberOfEmployees") == "number_of_employees"
