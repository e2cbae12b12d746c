"""Who runs the lake jobs when several gateway processes share a store (issue 15 #4)."""

from __future__ import annotations

import threading
import time

import pytest

from lakesync.api.store.base import HotLog
from lakesync.api.store.postgres import PostgresHotLog
from lakesync.hlc import HLC
from tests.conftest import PG_DSN


def _other_process(store: HotLog) -> PostgresHotLog:
    """A second gateway process's view of the same PostgreSQL store."""
    assert isinstance(store, PostgresHotLog)
    return PostgresHotLog(PG_DSN, HLC(), schema=store._schema, pool_size=2)


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
