"""Shard declarations (``shards:`` in lakesync.yaml): parsed, validated, errors naming the shard,
and ``lakesync up`` refusing a bad one with one line and exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakesync.cli.main import app
from lakesync.config import load_config
from lakesync.errors import ConfigError
from lakesync.shard_specs import ShardSpec, parse_shards

EVENTS = {"name": "events", "store_url": "postgresql://db-events/lakesync", "tables": ["events"]}


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for var in [v for v in os.environ if v.startswith("LAKESYNC_")]:
        monkeypatch.delenv(var)


def test_no_shards_is_the_default() -> None:
    assert load_config(None, env={}).shards == []


def test_shards_are_read_from_the_file(tmp_path: Path) -> None:
    config = tmp_path / "lakesync.yaml"
    config.write_text(
        "store_url: postgresql://db-main/lakesync\n"
        "shards:\n"
        "  - name: events\n"
        "    store_url: postgresql://db-events/lakesync\n"
        "    tables: [events, logs]\n"
        "  - {name: audit, store_url: 'sqlite:///tmp/audit.sqlite3', tables: [audit]}\n"
    )
    shards = load_config(config, env={}).shards
    assert shards == [
        ShardSpec("events", "postgresql://db-events/lakesync", ["events", "logs"]),
        ShardSpec("audit", "sqlite:///tmp/audit.sqlite3", ["audit"]),
    ]


@pytest.mark.parametrize(
    ("shards", "needles"),
    [
        ([{**EVENTS, "tables": []}], ["shard 'events'", "lists no tables"]),
        ([{**EVENTS, "tables": ["events", "events"]}], ["shard 'events'", "'events' twice"]),
        (
            [EVENTS, {**EVENTS, "name": "more", "tables": ["logs", "events"]}],
            ["shard 'more'", "table 'events' is already in shard 'events'"],
        ),
        ([EVENTS, {**EVENTS, "tables": ["logs"]}], ["shard 'events'", "name is already taken"]),
        ([{**EVENTS, "name": "default"}], ["shard 'default'", "name is already taken"]),
        ([{**EVENTS, "tables": ["bad name"]}], ["shard 'events'", "invalid table 'bad name'"]),
        ([{**EVENTS, "colour": "red"}], ["shard 'events'", "unknown field `colour`"]),
        ([{"name": "events", "tables": ["events"]}], ["shard 'events'", "store_url"]),
        ([{"store_url": "sqlite", "tables": ["t"]}], ["shard #1", "name"]),
        (["events"], ["shard #1"]),
    ],
    ids=["no-tables", "table-twice", "table-in-two-shards", "name-twice", "default-name",
         "bad-table", "unknown-key", "no-store", "no-name", "not-a-mapping"],
)
def test_bad_shards_are_errors_naming_the_shard(
    shards: list[object], needles: list[str]
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_shards(shards, "lakesync.yaml")
    assert raised.value.message.startswith("lakesync.yaml: shard ")
    for needle in needles:
        assert needle in raised.value.message


def test_up_refuses_a_bad_shard_with_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "lakesync.yaml"
    config.write_text(
        "shards:\n"
        "  - {name: events, store_url: sqlite, tables: [events]}\n"
        "  - {name: logs, store_url: sqlite, tables: [logs, events]}\n"
    )
    out = CliRunner().invoke(app, ["up", "--config", str(config)])
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: ")
    assert "shard 'logs'" in lines[0] and "table 'events' is already in shard 'events'" in lines[0]
    assert out.exit_code == 2


def test_up_refuses_a_shard_on_the_default_stores_file(tmp_path: Path) -> None:
    config = tmp_path / "lakesync.yaml"
    shared = tmp_path / "hotlog.sqlite3"
    config.write_text(
        f"shards:\n  - {{name: events, store_url: 'sqlite:///{shared}', tables: [events]}}\n"
    )
    out = CliRunner().invoke(
        app,
        ["up", "--config", str(config), "--data-dir", str(tmp_path)],
        env={"LAKESYNC_JWT_SECRET": "s" * 40},
    )
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert "shard 'events'" in lines[0] and "shard 'default'" in lines[0]
    assert out.exit_code == 2
