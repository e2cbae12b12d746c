"""The Coordination port's behaviour suite: who runs the lake jobs when several gateway processes
share a store, store-wide mutexes and other processes' append notices; and the
readiness ping. Run on every store (the ``store`` fixture: SQLite and PostgreSQL)."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from psycopg_pool import PoolClosed

from lakesync.hotlog.base import HotLog, LogNotice
from lakesync.hotlog.postgres import PostgresHotLog
from tests.hotlog.common import another, insert


def _other_process(store: HotLog) -> PostgresHotLog:
    """A second gateway process's view of the same PostgreSQL store."""
    other = another(store)
    assert isinstance(other, PostgresHotLog)
    return other


def test_one_process_leads_each_role_until_it_goes(store: HotLog) -> None:
    assert store.lead("landing") and store.lead("landing")  # stable while it lives
    if not isinstance(store, PostgresHotLog):
        return  # an embedded store serves one process: it always leads
    other = _other_process(store)
    try:
        assert not other.lead("landing")
        assert other.lead("pipeline")  # roles are elected apart
        assert not store.lead("pipeline")
        store.close()  # the leader goes: its session's locks go with it
        # ... once its backend has ended, which PostgreSQL does a moment after the client closed.
        deadline = time.monotonic() + 30
        while not other.lead("landing"):
            assert time.monotonic() < deadline, "the lead never passed to the other process"
            time.sleep(0.05)
    finally:
        other.close()


@pytest.mark.postgres
def test_exclusive_serialises_processes(store: HotLog) -> None:
    if not isinstance(store, PostgresHotLog):
        pytest.skip("a cross-process mutex: PostgreSQL only")
    other = _other_process(store)
    events: list[str] = []
    inside = threading.Event()

    def hold() -> None:
        with store.exclusive("landing"):
            events.append("first in")
            inside.set()
            time.sleep(0.5)
            events.append("first out")

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert inside.wait(10)
        with other.exclusive("landing"):
            events.append("second in")
        with other.exclusive("another"):  # names are separate mutexes
            pass
    finally:
        t.join()
        other.close()
    assert events == ["first in", "first out", "second in"]


def test_other_processes_appends_are_noticed(store: HotLog) -> None:
    notices: list[LogNotice] = []
    store.listen(notices.append)
    mine = store.append("gw1", [insert("a", 1)])
    if not isinstance(store, PostgresHotLog):
        assert notices == []  # an embedded store serves one process: nobody else appends
        return
    other = _other_process(store)
    try:
        # The listener starts in the background: append until a notice comes through.
        deadline = time.monotonic() + 30
        hlc = 2
        while not notices:
            assert time.monotonic() < deadline, "no notice of the other process's append"
            theirs = other.append("gw2", [insert(f"b{hlc}", hlc)])
            hlc += 1
            time.sleep(0.2)
        notice = notices[0]
        assert (notice.gateway_id, notice.origin) == ("gw2", other.origin)
        assert mine.head <= notice.after < notice.upto <= theirs.head
        store.append("gw1", [insert("c", 100)])
        last = other.append("gw2", [insert("d", 101)])
        while notices[-1].upto < last.head:
            assert time.monotonic() < deadline, "no notice of the other process's last append"
            time.sleep(0.05)
        assert {n.origin for n in notices} == {other.origin}  # never its own appends
    finally:
        other.close()


def test_ping_answers_while_the_store_is_open(store: HotLog) -> None:
    store.ping()
    again = another(store)
    again.ping()
    again.close()
    with pytest.raises((sqlite3.ProgrammingError, PoolClosed)):  # each driver's own error
        again.ping()
