"""A ``lakesync materialise`` killed with SIGKILL while Spark's executors load the staging table
(a JDBC transaction inserting into it is open), then run
again, leaves PostgreSQL and MariaDB equal to ``merge_state`` (the watermark had not moved, so
the re-run ships the same change set; applying it is idempotent)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from lakesync.config import load_config
from lakesync.delta import RowDelta
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.factory import open_destination
from lakesync.lakehouse.runner import run_pipeline
from lakesync.schema import parse_schema

from .conftest import Lake
from .test_shipping import databases, expected  # noqa: F401 - a fixture

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

GW = "gw_kill"
SCHEMA = parse_schema({"table": "shipped", "columns": [
    {"name": "title", "type": "string"}, {"name": "n", "type": "number"},
    {"name": "done", "type": "boolean"}, {"name": "meta", "type": "json"},
]})
COLUMNS = [(c.name, c.type) for c in SCHEMA.columns]


def _materialise(config: Path, data_dir: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
    return subprocess.Popen(
        [sys.executable, "-m", "lakesync.cli", "materialise", "--config", str(config),
         "--data-dir", str(data_dir)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _loading(pg_url: str) -> bool:
    """Whether a JDBC connection is inside a transaction inserting into the staging table."""
    with psycopg.connect(pg_url, connect_timeout=2) as conn:
        row = conn.execute(
            "select count(*) from pg_stat_activity where datname = current_database() "
            "and state <> 'idle' and query like 'INSERT INTO \"lakesync_stage_shipped\"%'"
        ).fetchone()
    return bool(row and row[0])


def history(rng: random.Random, rows: int) -> list[RowDelta]:
    """Inserts of ``rows`` rows, then updates, deletes and revivals of some."""
    out = [RowDelta.create("INSERT", "shipped", f"r{i}", "c1",
                           {"title": f"t{i}", "n": i, "done": i % 2 == 0}, (1000 + i) << 16)
           for i in range(rows)]
    for j in range(rows // 4):
        row, hlc = f"r{rng.randrange(rows)}", (1000 + rows + j) << 16
        if rng.random() < 0.3:
            out.append(RowDelta.create("DELETE", "shipped", row, "c2", {}, hlc))
        else:
            out.append(RowDelta.create("UPDATE", "shipped", row, "c2", {"meta": {"j": j}}, hlc))
    rng.shuffle(out)
    return out


def test_sigkill_while_shipping_then_rerun_converges(
    lake: Lake, databases: tuple[str, str], tmp_path: Path  # noqa: F811
) -> None:
    pg_url, my_url = databases
    rng = random.Random(11)
    deltas = history(rng, 40_000)
    lake.land(GW, deltas)
    config = tmp_path / "lakesync.yaml"
    config.write_text(
        f"gateways:\n  {GW}:\n    schemas:\n      - table: shipped\n        columns: "
        f"{[{'name': n, 'type': t} for n, t in COLUMNS]}\n"
        f"destinations:\n"
        f"  pg: {{kind: postgres, url: '{pg_url}', gateway: {GW}, delete: soft}}\n"
        f"  maria: {{kind: mysql, url: '{my_url}', gateway: {GW}, delete: hard}}\n",
        encoding="utf-8",
    )
    # The pipeline builds both destinations' change sets; the killed run ships them.
    run_pipeline(settings=lake.settings, schemas=[SCHEMA], tests=False, config=load_config(config))
    proc = _materialise(config, lake.settings.data_dir)
    deadline = time.monotonic() + 300
    while proc.poll() is None and not _loading(pg_url) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, f"materialise ended before the kill:\n{proc.communicate()[0]}"
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    specs = [DestinationSpec("postgres", pg_url, GW, delete="soft", name="pg"),
             DestinationSpec("mysql", my_url, GW, delete="hard", name="maria")]
    with open_destination(specs[0], env={}) as dest:
        assert dest.watermark("shipped") is None  # killed before the upsert committed

    rerun = _materialise(config, lake.settings.data_dir)
    out, _ = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, out
    want = expected(deltas)
    for spec in specs:
        with open_destination(spec, env={}) as dest:
            rows = dest.read_rows(dest.layout("shipped", COLUMNS))
        live = {r["row_id"]: {n: r[n] for n, _ in COLUMNS} for r in rows
                if r.get("deleted_at") is None}
        assert live == want, spec.name
