"""Tables printed to a pipe or a file are whole: ``lakesync query … | cat`` keeps every value
(rich alone cuts them at 80 columns: ``1176793…``)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lakesync.api.store.sqlite import SqliteHotLog
from lakesync.cli.output import print_table
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import ensure_landing_table, open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.settings import LakeSettings
from tests.gateway_process import ROOT

LONG = "a-long-value-" + "x" * 150 + "-end"


def test_a_table_off_a_terminal_is_printed_whole() -> None:
    table = Table("id", "body", title="rows")
    table.add_row("1176793120000000000", LONG)
    out = io.StringIO()
    print_table(table, Console(file=out, width=80))
    assert "1176793120000000000" in out.getvalue() and LONG in out.getvalue()
    assert "…" not in out.getvalue()


def test_query_piped_prints_every_value_whole(tmp_path: Path) -> None:
    settings = LakeSettings.from_env(tmp_path, env={})
    init_catalog_tables(settings)
    catalog = open_catalog(settings)
    ensure_landing_table(catalog)
    log = SqliteHotLog(tmp_path / "hotlog.sqlite3", HLC())
    hlc = HLC().now()
    log.append("gw1", [RowDelta.create("INSERT", "notes", "r1", "c1", {"body": LONG}, hlc)])
    LandingFlusher(catalog, log).flush()
    log.close()
    sql = "select hlc, row_id, columns_json from lakesync.landing"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    env.pop("LAKESYNC_CONFIG", None)
    done = subprocess.run(  # stdout is a pipe, as in `lakesync query … | cat`
        [sys.executable, "-m", "lakesync.cli.main", "query", sql, "--data-dir", str(tmp_path)],
        capture_output=True, env=env, timeout=120, check=False, text=True,
    )
    assert done.returncode == 0, done.stderr
    assert str(hlc) in done.stdout and LONG in done.stdout, done.stdout
    assert "…" not in done.stdout
