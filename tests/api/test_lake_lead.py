"""Which gateway process runs a lake job, as the operator reads it in the log: while the hot-log
store cannot be reached, the job waits and says so (not that another process runs it), and takes
the lead again once the store is back."""

from __future__ import annotations

import logging

import pytest

from lakesync.api.lake import Lead
from lakesync.hlc import HLC
from lakesync.hotlog.postgres import PostgresHotLog
from tests.netns import wait_for
from tests.pg_cluster import private_postgres

pytestmark = pytest.mark.slow


def test_a_job_waits_for_an_unreachable_store_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with private_postgres() as pg:
        store = PostgresHotLog(pg.dsn, HLC(), pool_size=2)
        try:
            lead = Lead(store, "landing", "landing flush")
            with caplog.at_level(logging.INFO, logger="lakesync.api.lake"):
                assert lead()
                pg.stop("immediate")
                assert not lead() and not lead()
                pg.start()
                wait_for("the lead taken again", lead)
            lines = [r.getMessage() for r in caplog.records if r.name == "lakesync.api.lake"]
            assert lines[0].startswith("landing flush: this gateway process"), lines
            assert lines[1].startswith("landing flush: waits, the hot-log store cannot be"), lines
            assert lines[2].startswith("landing flush: this gateway process"), lines
            assert len(lines) == 3, lines  # logged once per change, never "another process"
        finally:
            store.close()
