"""Connector declarations: one typed spec per kind, clear errors, secrets kept out of sight."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lakesync.connector_specs import (
    ACTION_TYPES,
    ActionGrant,
    BigQuerySpec,
    CloudWatchLogsSpec,
    JiraSpec,
    PostgresSpec,
    SalesforceSpec,
    connector_kind,
    may_run,
    parse_connector,
    parse_start,
    redact_declaration,
    resolve_secrets,
)
from lakesync.errors import ConfigError, ValidationError

JIRA = {"kind": "jira", "gateway": "gw1", "url": "https://x.atlassian.net", "email": "a@b.c"}
JIRA |= {"token": "${JIRA_TOKEN}", "jql": "project = OPS"}
PG = {"kind": "postgres", "gateway": "gw1", "dsn": "postgresql://u:hunter2@db/x"}
PG |= {"source_table": "public.items", "table": "items", "key": ["id"], "cursor_column": "v"}


def test_each_kind_parses_to_its_spec_with_defaults() -> None:
    jira = parse_connector("jira1", JIRA)
    assert isinstance(jira, JiraSpec) and connector_kind(jira) == "jira"
    assert (jira.interval, jira.chunk_rows, jira.overlap) == (60.0, 500, 120.0)
    sf = parse_connector(
        "sf",
        {
            "type": "salesforce",
            "gateway": "gw1",
            "client_id": "c",
            "client_secret": "s",
            "username": "u",
            "password": "p",
        },
    )
    assert isinstance(sf, SalesforceSpec) and sf.objects == [
        "Account",
        "Contact",
        "Opportunity",
        "Lead",
    ]
    pg = parse_connector("pg", PG)
    assert isinstance(pg, PostgresSpec) and pg.strategy == "cursor"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (JIRA | {"kind": "ftp"}, "kind"),
        (JIRA | {"interval": 0}, "interval"),
        (JIRA | {"chunk_rows": 20_000}, "chunk_rows"),
        (JIRA | {"colour": "red"}, "colour"),
        (JIRA | {"gateway": "bad gw"}, "gateway"),
        ({k: v for k, v in JIRA.items() if k != "token"}, "missing token"),
        (PG | {"cursor_column": ""}, "cursor_column"),
        (PG | {"table": "no-dashes"}, "table"),
        (PG | {"strategy": "guess"}, "strategy"),
        (
            {
                "kind": "postgres_cdc",
                "gateway": "gw1",
                "dsn": "x",
                "slot": "Bad Slot",
                "tables": {"a": "b"},
            },
            "slot",
        ),
    ],
)
def test_bad_declarations_name_the_problem(body: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        parse_connector("c1", body)


def test_the_name_must_be_storable() -> None:
    with pytest.raises(ValidationError, match="name"):
        parse_connector("a b", JIRA)


def test_secrets_resolve_from_env_or_file_and_never_show(tmp_path: Path) -> None:
    spec = parse_connector("jira1", JIRA)
    assert spec.token == "${JIRA_TOKEN}"  # the declaration keeps the reference
    resolved = resolve_secrets(spec, {"JIRA_TOKEN": "tok-123"}, lambda p: "")
    assert isinstance(resolved, JiraSpec) and resolved.token == "tok-123"
    assert "tok-123" not in repr(resolved) and "tok-123" not in str(resolved)
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    from_file = resolve_secrets(
        parse_connector("jira1", JIRA | {"token": f"${{file:{secret}}}"}),
        {},
        lambda p: Path(p).read_text(),
    )
    assert isinstance(from_file, JiraSpec) and from_file.token == "from-file"
    with pytest.raises(ConfigError, match="JIRA_TOKEN"):
        resolve_secrets(spec, {}, lambda p: "")
    pg = parse_connector("pg", PG)
    assert "hunter2" not in repr(pg)


def test_redact_hides_inline_credentials_but_keeps_references() -> None:
    shown = redact_declaration(PG | {"token": "abc", "password": "${PW}", "client_secret": ""})
    assert shown["dsn"] == "postgresql://u:***@db/x"
    assert (shown["token"], shown["password"], shown["client_secret"]) == ("***", "${PW}", "")
    assert shown["source_table"] == "public.items"


def test_lakesync_yaml_declares_connectors_by_name(tmp_path: Path) -> None:
    from lakesync.config import load_config

    path = tmp_path / "lakesync.yaml"
    path.write_text(
        "connectors:\n"
        "  jira1: {kind: jira, gateway: gw1, interval: 30, url: 'https://x.atlassian.net',\n"
        "          email: a@b.c, token: '${JIRA_TOKEN}', jql: 'project = OPS'}\n"
        "  shop: {kind: mysql, gateway: gw2, dsn: '${SHOP_DSN}', source_table: orders,\n"
        "         table: orders, key: [id], strategy: diff}\n"
    )
    config = load_config(path, env={})
    jira = config.connectors["jira1"]
    assert isinstance(jira, JiraSpec) and (jira.interval, jira.token) == (30.0, "${JIRA_TOKEN}")
    assert connector_kind(config.connectors["shop"]) == "mysql"
    path.write_text("connectors:\n  jira1: {kind: jira, gateway: gw1, url: u, email: e}\n")
    missing = r"lakesync.yaml: gateway 'gw1': connector 'jira1': missing token"
    with pytest.raises(ConfigError, match=missing):
        load_config(path, env={})


def test_action_grants_parse_are_checked_and_decide_who_may_run() -> None:
    spec = parse_connector("jira1", JIRA | {"actions": [
        {"action": "create_issue", "claims": {"team": ["ops", "support"], "region": "eu"}},
        {"action": "*", "claims": {"sub": "svc-bot"}},
    ]})
    grants = spec.actions
    assert parse_connector("jira1", JIRA).actions == []  # none: admin tokens only
    client = {"sub": "alice", "role": "client"}
    assert not may_run([], "create_issue", client)
    assert may_run([], "create_issue", {"sub": "root", "role": "admin"})
    assert may_run(grants, "create_issue", client | {"team": ["web", "ops"], "region": "eu"})
    assert not may_run(grants, "create_issue", client | {"team": "ops"})  # region missing
    assert not may_run(grants, "add_comment", client | {"team": "ops", "region": "eu"})
    assert may_run(grants, "add_comment", {"sub": "svc-bot", "role": "client"})
    assert may_run([ActionGrant("*")], "add_comment", client)  # claims {}: every client
    with pytest.raises(ValidationError, match=r"no action 'delete_all'.*create_issue"):
        parse_connector("jira1", JIRA | {"actions": [{"action": "delete_all"}]})
    with pytest.raises(ValidationError, match="postgres connector has no actions"):
        parse_connector("pg", PG | {"actions": [{"action": "*"}]})
    with pytest.raises(ValidationError, match="actions"):
        parse_connector("jira1", JIRA | {"actions": [{"action": "*", "who": "x"}]})


def test_the_action_types_table_is_what_the_handlers_run() -> None:
    from lakesync.connectors import open_actions

    for kind, spec in [("jira", parse_connector("j", JIRA)), ("salesforce", parse_connector(
        "s", {"kind": "salesforce", "gateway": "gw1", "client_id": "c", "client_secret": "s",
              "username": "u", "password": "p"}))]:
        handler = open_actions(spec)
        assert handler is not None
        assert tuple(d.action_type for d in handler.descriptors()) == ACTION_TYPES[kind]
BQ = {"kind": "bigquery", "gateway": "gw1", "url": "bigquery://acme?endpoint=http://h:1"}
BQ |= {"source_table": "finance.ledger", "table": "ledger", "key": ["id"]}
BQ |= {"cursor_column": "booked_at"}
CW = {"kind": "cloudwatch_logs", "gateway": "gw1", "log_groups": ["/svc/api"]}


def test_the_source_kinds_of_issue_27_parse_with_their_public_names() -> None:
    bq = parse_connector("ledger", BQ | {"lookback": 60, "chunk_rows": 100})
    assert isinstance(bq, BigQuerySpec) and connector_kind(bq) == "bigquery"
    assert (bq.strategy, bq.lookback, bq.query) == ("cursor", 60.0, "")
    query = {k: v for k, v in BQ.items() if k != "source_table"} | {"query": "select 1 as id"}
    assert isinstance(parse_connector("q", query | {"strategy": "diff"}), BigQuerySpec)
    assert isinstance(parse_connector("u", BQ | {"url": "${BQ_URL}"}), BigQuerySpec)
    cw = parse_connector("logs", CW | {"filter_pattern": "ERROR", "retention": "7d"})
    assert isinstance(cw, CloudWatchLogsSpec) and connector_kind(cw) == "cloudwatch_logs"
    assert (cw.table, cw.parse, cw.start, cw.overlap) == ("logs", "text", "1h", 300.0)
    assert parse_start("1h", 7200.0) == 3600.0
    assert parse_start("2026-01-01T00:00:00", 0.0) == parse_start("2026-01-01T00:00:00Z", 0.0)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (BQ | {"query": "select 1"}, "source_table or query"),
        ({k: v for k, v in BQ.items() if k != "source_table"}, "source_table or query"),
        (BQ | {"source_table": "ledger"}, "dataset.table"),
        (BQ | {"url": "https://bigquery.googleapis.com"}, "bigquery://PROJECT"),
        (BQ | {"cursor_column": ""}, "cursor_column"),
        ({k: v for k, v in BQ.items() if k != "key"}, "missing key"),
        (CW | {"log_groups": []}, "missing log_groups"),
        (CW | {"start": "yesterday"}, "start"),
        (CW | {"retention": "forever"}, "duration"),
        (CW | {"parse": "xml"}, "parse"),
        (CW | {"table": "bad table"}, "table"),
    ],
)
def test_bad_source_declarations_name_the_problem(body: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        parse_connector("c1", body)


def test_cloud_credentials_are_redacted() -> None:
    shown = redact_declaration(CW | {"secret_access_key": "abc", "access_key_id": "AKIA"})
    assert shown["secret_access_key"] == "***" and shown["access_key_id"] == "AKIA"
    assert redact_declaration(BQ | {"credentials": "{...}"})["credentials"] == "***"
    filed = redact_declaration(BQ | {"credentials": "${file:/k.json}"})
    assert filed["credentials"] == "${file:/k.json}"
