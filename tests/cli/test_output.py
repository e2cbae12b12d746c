"""Tables printed to a pipe or a file are whole: ``lakesync query … | cat`` keeps every value
(rich alone cuts them at 80 columns: ``1176793…``); values are printed as text, markup and
control characters included (``tests/security/test_terminal_output.py`` runs ``lakesync
status`` on hostile ones)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lakesync.cli.output import plain, print_table
from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
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


def test_a_value_is_printed_as_the_text_it_is() -> None:
    hostile = "[/] [link=https://evil.example]click[/link] \x1b]0;owned\x07 \r\u202eabc\x9b"
    out = io.StringIO()
    console = Console(file=out, width=300, force_terminal=True, color_system=None)
    console.print(plain(hostile))
    table = Table("value")
    table.add_row(plain(hostile, style="red"))
    print_table(table, console)
    shown = "[/] [link=https://evil.example]click[/link] \\x1b]0;owned\\x07 \\r\\u202eabc\\x9b"
    lines = out.getvalue().splitlines()
    assert lines[0] == shown and any(shown in line for line in lines[1:])
    assert not any(c in out.getvalue() for c in "\x1b\x07\r\u202e\x9b")
    assert plain("tab\tand\nnewline").plain == "tab\tand\nnewline"
