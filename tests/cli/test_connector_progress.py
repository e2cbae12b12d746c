"""``lakesync connectors --follow NAME``: a connector's first load, rows read so far in a terminal,
quiet with one summary line when output is piped. Against a real gateway process
whose connector reads a real PostgreSQL table, and the view alone on a rich console forced to be
a terminal or writing to a plain file."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from rich.console import Console

from lakesync.cli.connectors import follow_first_load
from tests.api.helpers import SECRET
from tests.cli.test_main import lakesync_cmd
from tests.connectors.test_database import SourceDb
from tests.gateway_process import ServerProcess

ROWS = 2000

STATUSES = [
    {"state": "polling", "rows_read": 0, "deltas_pushed": 0, "failed_polls": 0},
    {"state": "polling", "rows_read": 700, "deltas_pushed": 650, "failed_polls": 0},
    {"state": "idle", "rows_read": 1200, "deltas_pushed": 1200, "failed_polls": 0,
     "last_success": 1.0},
    {"state": "polling", "rows_read": 9999, "deltas_pushed": 0, "failed_polls": 0},  # not read
]


def test_a_terminal_shows_the_rows_read_so_far() -> None:
    out = io.StringIO()
    load = follow_first_load(STATUSES, "db1", Console(file=out, force_terminal=True, width=120))
    shown = out.getvalue()
    assert "connector db1: polling" in shown
    assert "0 rows read, 0 deltas pushed" in shown
    assert "700 rows read, 650 deltas pushed" in shown
    assert "1200 rows read, 1200 deltas pushed" in shown
    assert "9999" not in shown and load.rows_read == 1200 and load.done


def test_off_a_terminal_nothing_is_shown_while_it_loads() -> None:
    out = io.StringIO()
    load = follow_first_load(STATUSES, "db1", Console(file=out, width=120))
    assert out.getvalue() == ""
    assert load.done and load.rows_read == 1200


@pytest.fixture
def source() -> Iterator[SourceDb]:
    db = SourceDb("postgres")
    db.run(
        f"INSERT INTO {db.table} SELECT i, 'eu', 'row ' || i, i * 1.5, true, '{{}}',"
        f" '2026-01-01 00:00:00' FROM generate_series(1, {ROWS}) i"
    )
    yield db
    db.drop()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
    return env | {"LAKESYNC_JWT_SECRET": SECRET, "COLUMNS": "160"}


def _read_until(fd: int, needle: str, seen: bytearray, deadline: float) -> None:
    while needle.encode() not in seen:
        assert time.monotonic() < deadline, f"no {needle!r} in the terminal: {seen.decode()!r}"
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                seen.extend(os.read(fd, 65536))
            except OSError:  # the terminal closed: the command ended
                return


@pytest.mark.postgres
def test_follow_a_first_load_in_a_terminal_and_piped(tmp_path: Path, source: SourceDb) -> None:
    # The source table is locked until both commands follow the load, so it cannot end first.
    lock = psycopg.connect(source.dsn)
    try:
        lock.execute(f"LOCK TABLE {source.table} IN ACCESS EXCLUSIVE MODE")
        shown, out, err, code = _follow_both(tmp_path, source, lock)
    finally:
        lock.close()  # else dropping the table waits for it
    text = shown.decode(errors="replace")
    assert re.search(rf"first load done, {ROWS} rows read, {ROWS} deltas pushed, ", text), text
    assert code == 0 and out == ""
    assert re.fullmatch(
        rf"connector db1: first load done, {ROWS} rows read, {ROWS} deltas pushed, \d+\.\d s\n",
        err,
    ), err


def _follow_both(
    tmp_path: Path, source: SourceDb, lock: psycopg.Connection[tuple[object, ...]]
) -> tuple[bytes, str, str, int]:
    """Follow connector db1's first load in a terminal and piped while ``lock`` holds its
    source table, then release it: what the terminal showed, the piped stdout, stderr and exit
    code."""
    config = tmp_path / "lakesync.yaml"
    config.write_text(
        "connectors:\n"
        f"  db1: {{kind: postgres, gateway: gw1, dsn: '{source.dsn}', source_table: "
        f"{source.table}, table: items, key: [id, region], strategy: diff, chunk_rows: 100,"
        " interval: 3600}\n"
    )
    with ServerProcess(tmp_path / "gw", config=config) as gw:
        follow = [*lakesync_cmd(), "connectors", "--gw", "gw1", "--url", gw.url, "--follow", "db1"]
        piped = subprocess.Popen(
            follow, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
        )
        leader, follower = pty.openpty()
        terminal = subprocess.Popen(
            follow, stdin=follower, stdout=follower, stderr=follower, env=_env(),
            start_new_session=True,
        )
        os.close(follower)
        shown = bytearray()
        try:
            # Polling, nothing read yet: the source waits for the lock.
            _read_until(leader, "connector db1: polling 0 rows read", shown,
                        time.monotonic() + 60)
            assert piped.poll() is None  # still following, quietly
            lock.rollback()  # the load goes on
            _read_until(leader, "first load done", shown, time.monotonic() + 120)
            assert terminal.wait(timeout=60) == 0
            out, err = piped.communicate(timeout=60)
        finally:
            for proc in (piped, terminal):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            os.close(leader)
    return bytes(shown), out, err, piped.returncode


@pytest.mark.postgres
def test_a_connector_that_does_not_run_there_is_one_error_line(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "gw") as gw:
        proc = subprocess.run(
            [*lakesync_cmd(), "connectors", "--gw", "gw1", "--url", gw.url, "--follow", "nope"],
            capture_output=True, text=True, env=_env(), timeout=60, check=False,
        )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: connector 'nope' does not run on gateway 'gw1'")
    assert len(proc.stderr.strip().splitlines()) == 1
