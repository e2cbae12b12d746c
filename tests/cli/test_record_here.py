"""A run made in the command's own process is recorded in the configured hot-log store; a store
that cannot be opened is one note on stderr (its DSN's password masked), and the command goes
on: the run itself was done."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakesync.api.lake import record_pipeline_run
from lakesync.cli.handover import record_here
from lakesync.config import Config
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.worker import RunReply
from lakesync.status import HISTORY_GATEWAY, HISTORY_KIND, runs_of
from tests.gateway_process import free_port


def test_a_run_is_recorded_in_the_configured_store(tmp_path: Path) -> None:
    record_here(Config(tmp_path, []), tmp_path,
                lambda store: record_pipeline_run(store, 1e9, RunReply(ok=True, elapsed_s=2.0)))
    store = SqliteHotLog(tmp_path / "hotlog.sqlite3", HLC())
    try:
        (run,) = runs_of(store.list_docs(HISTORY_GATEWAY, HISTORY_KIND)["pipeline"])
    finally:
        store.close()
    assert run.ok and run.elapsed_s == 2.0


def test_a_store_that_cannot_be_opened_is_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"postgresql://ops:hunter2secret@127.0.0.1:{free_port()}/nowhere"
    config = Config(tmp_path, [], store_url=url)
    record_here(config, tmp_path, lambda store: pytest.fail("no store to record in"))
    err = capsys.readouterr().err
    assert "the run was done but not recorded for lakesync status" in err
    assert "hunter2secret" not in err
