"""Connector declarations: one typed spec per kind, clear errors, secrets kept out of sight."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lakesync.connector_specs import (
    JiraSpec,
    PostgresSpec,
    SalesforceSpec,
    connector_kind,
    parse_connector,
    redact,
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
    shown = redact(PG | {"token": "abc", "password": "${PW}", "client_secret": ""})
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
    with pytest.raises(ConfigError, match=r"lakesync.yaml: connector 'jira1': missing token"):
        load_config(path, env={})
