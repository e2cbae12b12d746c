"""lakesync.table_schemas: the gateways' registered schemas, published to the lake (no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from lakesync.config import Config, GatewayConfig
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.registry import (
    REGISTRY_IDENTIFIER,
    publish_schemas,
    registered_schemas,
    registry_rows,
    schemas_in_force,
)
from lakesync.lakehouse.settings import LakeSettings
from lakesync.schema import parse_schema

TODOS = parse_schema({"table": "todos", "columns": [{"name": "title", "type": "string"}]})
TODOS_V2 = parse_schema({"table": "todos", "columns": [
    {"name": "title", "type": "string"}, {"name": "done", "type": "boolean"},
]})
NOTES = parse_schema({"table": "notes", "columns": [{"name": "body", "type": "json"}]})


def _catalog(tmp_path: Path):  # type: ignore[no-untyped-def]
    settings = LakeSettings.from_env(tmp_path, env={})
    init_catalog_tables(settings)
    return open_catalog(settings)


def test_registry_rows_are_sorted_and_canonical() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    rows = registry_rows([("gw2", TODOS), ("gw1", NOTES), ("gw1", TODOS)], at).to_pylist()
    assert [(r["gateway_id"], r["table_name"]) for r in rows] == [
        ("gw1", "notes"), ("gw1", "todos"), ("gw2", "todos"),
    ]
    assert rows[0]["schema_json"] == (
        '{"columns":[{"name":"body","type":"json"}],"table":"notes"}'
    )
    assert {r["published_at"] for r in rows} == {at}


def test_publish_round_trips_and_commits_only_changes(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    assert registered_schemas(catalog) == []
    assert publish_schemas(catalog, [("gw1", TODOS), ("gw2", NOTES)])
    assert sorted(registered_schemas(catalog)) == [("gw1", TODOS), ("gw2", NOTES)]
    snapshots = len(catalog.load_table(REGISTRY_IDENTIFIER).snapshots())
    assert not publish_schemas(catalog, [("gw2", NOTES), ("gw1", TODOS)])  # same set: no commit
    assert len(catalog.load_table(REGISTRY_IDENTIFIER).snapshots()) == snapshots
    assert publish_schemas(catalog, [("gw1", TODOS_V2)])  # evolved, and gw2's table dropped
    assert registered_schemas(catalog) == [("gw1", TODOS_V2)]
    assert publish_schemas(catalog, [])
    assert registered_schemas(catalog) == []


def test_flusher_runs_the_publisher_before_each_flush(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    calls: list[str] = []

    def publish() -> None:
        calls.append("publish")
        publish_schemas(catalog, [("gw1", TODOS)])

    log = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    flusher = LandingFlusher(catalog, log, before_flush=publish)
    flusher.flush()
    flusher.flush()
    log.close()
    assert calls == ["publish", "publish"]
    assert registered_schemas(catalog) == [("gw1", TODOS)]


def test_gateway_lake_jobs_use_the_gateways_own_config(tmp_path: Path) -> None:
    """``lakesync up --config X``: the flusher writes to X's ``lake:`` catalog, not the default."""
    import anyio
    import yaml

    from lakesync.api.lake import lake_jobs
    from lakesync.api.settings import GatewaySettings
    from lakesync.config import load_config
    from lakesync.hlc import HLC
    from lakesync.hotlog.factory import open_store
    from lakesync.schema import schema_to_wire

    data, lake_dir = tmp_path / "data", tmp_path / "elsewhere"
    config_file = tmp_path / "gw.yaml"
    config_file.write_text(yaml.safe_dump({
        "data_dir": str(data),
        "server": {"flush_interval": 0},
        "lake": {
            "catalog_uri": f"jdbc:sqlite:{lake_dir / 'catalog.db'}",
            "warehouse": (lake_dir / "warehouse").as_uri(),
        },
    }))
    config = load_config(config_file, env={})
    settings = GatewaySettings.from_config(config)
    store = open_store("sqlite", settings.data_dir, HLC())
    try:
        store.put_doc("gw1", "schema", "todos", schema_to_wire(TODOS))
        with lake_jobs(settings, store, config) as flush:
            assert flush is not None
            anyio.run(flush, "gw1")
    finally:
        store.close()
    lake = LakeSettings.from_config(config)
    assert lake.sqlite_path == lake_dir / "catalog.db"
    assert registered_schemas(open_catalog(lake)) == [("gw1", TODOS)]
    assert not (data / "catalog.db").exists()


def test_the_published_schema_wins_over_a_stale_declaration() -> None:
    declared = parse_schema({"table": "t", "columns": [
        {"name": "n", "type": "integer"}, {"name": "b", "type": "bytes"},
        {"name": "new", "type": "string"},
    ]})
    widened = parse_schema({"table": "t", "columns": [
        {"name": "n", "type": "decimal", "precision": 21, "scale": 2},
        {"name": "b", "type": "string"},
    ]})
    config = Config(data_dir=Path("."), jwt_secrets=[],
                    gateways={"gw1": GatewayConfig("gw1", [declared, NOTES])})
    found = schemas_in_force([("gw1", widened)], config)
    assert {s.table: s.column_types() for s in found["gw1"]} == {
        "t": {"n": "decimal", "b": "string", "new": "string"},  # the file's new column joins
        "notes": {"body": "json"},  # declared, never published
    }
