"""``lakesync materialise`` without Spark: what it says when there is nothing to ship or a
destination cannot be opened (the others still ship; the command exits 1 naming it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakesync.cli.main import app
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import ensure_landing_table, open_catalog
from lakesync.lakehouse.settings import LakeSettings


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for var in [v for v in os.environ if v.startswith("LAKESYNC_")]:
        monkeypatch.delenv(var)


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    settings = LakeSettings.from_env(tmp_path / "lake", env={})
    init_catalog_tables(settings)
    ensure_landing_table(open_catalog(settings))
    return settings.data_dir


def write_config(tmp_path: Path, lake: Path, destinations: str) -> Path:
    path = tmp_path / "lakesync.yaml"
    path.write_text(f"data_dir: {lake}\n{destinations}", encoding="utf-8")
    return path


def hot_config(tmp_path: Path, lake: Path, url: str) -> Path:
    """A configuration whose PostgreSQL destination ``hot`` (at ``url``) keeps 30 days of
    gw1's ``todos``."""
    return write_config(tmp_path, lake, f"""\
gateways:
  gw1:
    schemas: [{{table: todos, columns: [{{name: title, type: string}}]}}]
destinations:
  hot:
    kind: postgres
    url: "{url}"
    gateway: gw1
    hot_window: 30d
""")


def test_nothing_declared_says_how_to_declare(tmp_path: Path, lake: Path) -> None:
    config = write_config(tmp_path, lake, "")
    out = CliRunner().invoke(app, ["materialise", "--config", str(config)])
    assert out.exit_code == 0, out.output
    assert "add a destinations: section" in out.stderr


def test_unusable_destinations_are_reported_and_exit_1(tmp_path: Path, lake: Path) -> None:
    config = write_config(tmp_path, lake, """\
destinations:
  nosecret: {kind: postgres, url: "${NOT_SET_ANYWHERE}", gateway: gw1}
  closed: {kind: mysql, url: "mysql://root:hunter2@127.0.0.1:1/db", gateway: gw1}
""")
    out = CliRunner().invoke(app, ["materialise", "--config", str(config)])
    assert out.exit_code == 1, out.output
    lines = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in out.output
    assert "2 of 2 shipments failed" in lines[0]
    assert "NOT_SET_ANYWHERE is not set" in lines[0]
    assert "closed/*: destination 'closed': cannot connect to mysql://root:***@127.0.0.1:1/db" in (
        lines[0]
    )
    assert "hunter2" not in out.output
    assert "nosecret" in out.stdout and "failed" in out.stdout  # the results table


def test_no_lake_says_what_to_run(tmp_path: Path) -> None:
    config = write_config(tmp_path, tmp_path / "nolake", """\
destinations:
  d: {kind: postgres, url: "postgresql://u@127.0.0.1:1/db", gateway: gw1}
""")
    out = CliRunner().invoke(app, ["materialise", "--config", str(config)])
    assert out.exit_code == 1
    assert out.stderr.startswith("error:") and "Traceback" not in out.output


def test_migrate_between_declared_destinations(tmp_path: Path) -> None:
    from tests.destinations.conftest import _drop, open_fresh

    source, source_name = open_fresh("postgres")
    target, target_name = open_fresh("mysql")
    try:
        layout = source.layout("todos", [("title", "string")])
        source.ensure_table(layout)
        from lakesync.destinations.base import typed_change

        source.apply_changes(layout, [typed_change(layout, "a", {"title": "hi"})])
        urls = {
            "src": source.spec.url, "dst": target.spec.url,
        }
        config = tmp_path / "lakesync.yaml"
        config.write_text(f"""\
gateways:
  gw1:
    schemas: [{{table: todos, columns: [{{name: title, type: string}}]}}]
destinations:
  src: {{kind: postgres, url: "{urls['src']}", gateway: gw1}}
  dst: {{kind: mysql, url: "{urls['dst']}", gateway: gw1}}
""", encoding="utf-8")
        runner = CliRunner()
        base = ["migrate", "--config", str(config), "--from", "src", "--to"]
        out = runner.invoke(app, [*base, "dst"])
        assert out.exit_code == 0, out.output
        assert "todos: 1 rows from src to dst" in out.stdout
        rows = target.read_rows(target.layout("todos", [("title", "string")]))
        assert [r["title"] for r in rows] == ["hi"]
        out = runner.invoke(app, [*base, "nope"])
        assert out.exit_code == 2 and "no destination 'nope'" in out.stderr
    finally:
        source.close()
        target.close()
        _drop("postgres", source_name)
        _drop("mysql", target_name)


def test_lifecycle_only_moves_aged_rows_out_of_postgres(tmp_path: Path, lake: Path) -> None:
    """``lakesync materialise --lifecycle-only``: rows whose last change in the lake is older than
    ``hot_window`` leave the PostgreSQL destination although they were just shipped; rows
    changed within the window stay, even one shipped long ago; no Spark (the lake's merged row
    clocks are read with pyiceberg), the watermark untouched."""
    from datetime import UTC, datetime, timedelta

    import psycopg

    from lakesync.destinations.base import typed_change
    from lakesync.hlc import encode
    from tests.destinations.conftest import _drop, open_fresh
    from tests.lakehouse.merged_rows import write_rows_merged

    def clock(days_ago: int) -> int:
        moment = datetime.now(UTC) - timedelta(days=days_ago)
        return encode(int(moment.timestamp() * 1000), 0)

    write_rows_merged(LakeSettings.from_env(lake, env={}), [
        ("gw1", "todos", f"r{i}", clock(40 if i % 2 == 0 else 1), None) for i in range(6)
    ])
    dest, schema = open_fresh("postgres")
    try:
        layout = dest.layout("todos", [("title", "string")])
        dest.ensure_table(layout)
        changes = [typed_change(layout, f"r{i}", {"title": f"t{i}"}) for i in range(6)]
        dest.apply_changes(layout, changes, position=42)
        with psycopg.connect(dest.spec.url, autocommit=True) as conn:  # shipped long ago
            conn.execute("update todos set synced_at = synced_at - interval '40 days' "
                         "where row_id = 'r1'")
        config = hot_config(tmp_path, lake, dest.spec.url)
        out = CliRunner().invoke(app, ["materialise", "--config", str(config), "--lifecycle-only"])
        assert out.exit_code == 0, out.output
        assert "lifecycle" in out.stdout
        rows = dest.read_rows(layout)
        assert [r["row_id"] for r in rows] == ["r1", "r3", "r5"]
        assert dest.watermark("todos") == 42
        out = CliRunner().invoke(app, ["materialise", "--config", str(config), "--lifecycle-only"])
        assert out.exit_code == 0, out.output
        assert [r["row_id"] for r in dest.read_rows(layout)] == ["r1", "r3", "r5"]

        # The first run recorded its mark: rows it covers are not named again (r0, put back
        # by hand, stays), a row shipped since (r2, position 50) is.
        mark = dest.tiering_mark("todos")
        assert mark is not None and mark.position == 42
        dest.apply_changes(layout, [typed_change(layout, "r0", {"title": "t0"})])
        write_rows_merged(LakeSettings.from_env(lake, env={}), [
            ("gw1", "todos", f"r{i}", clock(40 if i % 2 == 0 else 1), None) for i in range(6)
        ], ingest={"r2": 50})
        dest.apply_changes(layout, [typed_change(layout, "r2", {"title": "t2"})], position=50)
        out = CliRunner().invoke(app, ["materialise", "--config", str(config), "--lifecycle-only"])
        assert out.exit_code == 0, out.output
        assert [r["row_id"] for r in dest.read_rows(layout)] == ["r0", "r1", "r3", "r5"]
        assert dest.tiering_mark("todos").position == 50  # type: ignore[union-attr]
    finally:
        dest.close()
        _drop("postgres", schema)


def test_an_unreadable_lake_fails_tiering_of_that_table_only(tmp_path: Path, lake: Path) -> None:
    """The lake's row clocks cannot be read (a data file of ``int_rows_merged`` is gone): the
    table's tiering is reported failed with what to do, the command exits 1 after the others,
    no traceback reaches the user, and the destination's rows stay."""
    from lakesync.destinations.base import typed_change
    from tests.destinations.conftest import _drop, open_fresh
    from tests.lakehouse.merged_rows import write_rows_merged

    settings = LakeSettings.from_env(lake, env={})
    write_rows_merged(settings, [("gw1", "todos", "r1", 1, None)])
    merged = open_catalog(settings).load_table("lakesync.int_rows_merged")
    for task in merged.scan().plan_files():
        os.remove(task.file.file_path.removeprefix("file://"))
    dest, schema = open_fresh("postgres")
    try:
        layout = dest.layout("todos", [("title", "string")])
        dest.ensure_table(layout)
        dest.apply_changes(layout, [typed_change(layout, "r1", {"title": "t"})], position=7)
        config = hot_config(tmp_path, lake, dest.spec.url)
        out = CliRunner().invoke(app, ["materialise", "--config", str(config), "--lifecycle-only"])
        assert out.exit_code == 1, out.output
        assert "cannot read the lake's row clocks" in out.output
        assert "lakesync pipeline run" in out.output
        assert out.exception is None or isinstance(out.exception, SystemExit)
        assert [r["row_id"] for r in dest.read_rows(layout)] == ["r1"]
    finally:
        dest.close()
        _drop("postgres", schema)
