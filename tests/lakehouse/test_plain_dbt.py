"""Acceptance: `dbt build` from the root of a fresh clone, as the README shows, builds
everything (staging, intermediate, the current-state marts and the declared destinations' change
sets) and runs the dbt data and unit tests with plain dbt: no Python UDF, no runner.

The "clone" is a copy of the files git tracks (the working tree's content, so the test checks what
is about to be committed); its lake is the default data dir ``.lakesync`` inside it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lakesync.cli.main import main as lakesync
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.query import run_query
from lakesync.lakehouse.registry import publish_schemas
from lakesync.lakehouse.settings import LakeSettings
from lakesync.merge import merge_state
from lakesync.schema import parse_schema

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TODOS = parse_schema(
    {
        "table": "todos",
        "columns": [
            {"name": "title", "type": "string"},
            {"name": "n", "type": "number"},
            {"name": "done", "type": "boolean"},
            {"name": "meta", "type": "json"},
        ],
    }
)
DELTAS = [
    RowDelta.create("INSERT", "todos", "r1", "c1", {"title": "a", "n": 1, "done": False}, 10),
    RowDelta.create("UPDATE", "todos", "r1", "c2", {"title": "b", "meta": {"k": [1]}}, 12),
    RowDelta.create("INSERT", "todos", "r2", "c1", {"title": "gone"}, 11),
    RowDelta.create("DELETE", "todos", "r2", "c2", {}, 13),
    RowDelta.create("INSERT", "todos", "r3", "c3", {"title": "é 😀", "n": 2.5, "done": True}, 9),
]


def _fresh_clone(into: Path) -> Path:
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.split(b"\0")
    for name in filter(None, (t.decode() for t in tracked)):
        src = ROOT / name
        if src.is_file():  # a file deleted in the working tree is not in the clone either
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, into / name)
    return into


def _readme_env(clone: Path, data: Path) -> dict[str, str]:
    """The environment the README's `eval "$(python -m lakesync.lakehouse.bootstrap --print-env)"`
    sets."""
    out = subprocess.run(
        [sys.executable, "-m", "lakesync.lakehouse.bootstrap", "--data-dir", str(data),
         "--print-env"],
        cwd=clone,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESYNC_", "DBT_"))}
    for line in out.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = shlex.split(value)[0] if value else ""
    return env


def test_dbt_build_from_a_fresh_clone_builds_the_marts_with_plain_dbt(tmp_path: Path) -> None:
    clone = _fresh_clone(tmp_path / "clone")
    data = clone / ".lakesync"
    env = _readme_env(clone, data)
    settings = LakeSettings.from_env(data, env={})
    bootstrap(settings)
    log = SqliteHotLog(data / "hotlog.sqlite3", HLC())
    try:
        for d in DELTAS:
            log.append("gw1", [d])
        LandingFlusher(open_catalog(settings), log).flush()
    finally:
        log.close()
    publish_schemas(open_catalog(settings), [("gw1", TODOS)])
    config = clone / "lakesync.yaml"
    config.write_text(yaml.safe_dump({"destinations": {"pg": {
        "kind": "postgres", "url": "postgresql://127.0.0.1/unused", "gateway": "gw1",
    }}}))
    generate = ["pipeline", "generate", "--data-dir", str(data), "--into",
                str(clone / "generated"), "--config", str(config)]
    assert lakesync(generate) == 0

    dbt = Path(sys.executable).with_name("dbt")
    run = subprocess.run(
        [str(dbt), "build"],
        check=False,
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "analytics__todos" in run.stdout
    assert "lakesync_live_rows_match_analytics__todos" in run.stdout  # the mart's data tests ran
    assert "ERROR=0" in run.stdout

    result = run_query(
        settings,
        "select row_id, title, n, done, meta from analytics.todos where gateway_id = 'gw1' "
        "order by row_id",
    )
    expected = merge_state(DELTAS)
    assert [r[0] for r in result.rows] == sorted(r for _, r in expected)
    by_row = {r[0]: r[1:] for r in result.rows}
    assert by_row["r1"] == ("b", 1.0, False, '{"k":[1]}')
    assert by_row["r3"] == ("é 😀", 2.5, True, None)

    # The destination's change set: without the watermark var, every row (r2 deleted, typed nulls).
    assert "changes__pg__todos" in run.stdout
    changes = _change_set(settings)
    assert {r[0]: r[1:5] for r in changes} == {
        "r1": ("b", 1.0, False, False), "r2": (None, None, None, True),
        "r3": ("é 😀", 2.5, True, False),
    }
    assert _built_since(settings) == "-1"

    # With the watermark a destination is at (as `lakesync pipeline run` passes it): the rows
    # past it only, and the table records it.
    positions = sorted({r[5] for r in changes})
    mark = positions[-2]
    run = subprocess.run(
        [str(dbt), "run", "--select", "tag:lakesync_change_set",
         "--vars", f"{{lakesync_watermarks: {{pg: {{todos: {mark}}}}}}}"],
        check=False, cwd=clone, env=env, capture_output=True, text=True, timeout=1200,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert sorted(r[0] for r in _change_set(settings)) == sorted(
        r[0] for r in changes if r[5] > mark
    )
    assert _built_since(settings) == str(mark)

    # `dbt docs generate` works, and the docs describe every model, source and column.
    run = subprocess.run(
        [str(dbt), "docs", "generate"],
        check=False, cwd=clone, env=env, capture_output=True, text=True, timeout=1200,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    manifest = json.loads((clone / "target" / "manifest.json").read_text())
    catalog = json.loads((clone / "target" / "catalog.json").read_text())
    documented = {
        uid: node for uid, node in [*manifest["nodes"].items(), *manifest["sources"].items()]
        if node["resource_type"] in ("model", "source") and node["package_name"] == "lakesync"
    }
    assert {"model.lakesync.analytics__todos", "model.lakesync.changes__pg__todos",
            "model.lakesync.stg_lakesync__cells", "source.lakesync.lakesync.landing"} <= set(
        documented
    )
    for uid, node in documented.items():
        assert node["description"].strip(), uid
        assert node["columns"], uid
        assert all(c["description"].strip() for c in node["columns"].values()), uid
    # Every column the built tables really have is among the described ones.
    built = {**catalog["nodes"], **catalog["sources"]}
    for uid in ("model.lakesync.analytics__todos", "model.lakesync.changes__pg__todos",
                "model.lakesync.int_cells_merged", "model.lakesync.int_rows_merged",
                "source.lakesync.lakesync.landing"):
        real = {c.lower() for c in built[uid]["columns"]}
        assert real and real <= set(documented[uid]["columns"]), (uid, real)


def _change_set(settings: LakeSettings) -> list[tuple[object, ...]]:
    return run_query(
        settings,
        "select row_id, title, n, done, _lakesync_deleted, _position "
        "from lakesync_changes.changes__pg__todos",
    ).rows


def _built_since(settings: LakeSettings) -> str | None:
    table = open_catalog(settings).load_table("lakesync_changes.changes__pg__todos")
    return table.properties.get("lakesync.since")
