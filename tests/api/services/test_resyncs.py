"""Continuation records of paged first syncs: bounded, checked against the view stamp."""

from __future__ import annotations

from api.services.resyncs import PendingResync, ResyncPages


def pending(rows: int, stamp: int = 7, cursor: int = 1 << 41) -> PendingResync:
    return PendingResync([("t", str(i)) for i in range(rows)], stamp, 99, cursor)


def test_a_record_answers_its_cursor_client_and_stamp_only() -> None:
    pages = ResyncPages()
    rest = pending(3)
    cursor = pages.put("gw", "alice", rest)
    assert pages.get("gw", "alice", cursor, 7) is rest
    assert pages.get("gw", "alice", cursor, 7) is rest  # a retried pull gets the same page
    assert pages.get("gw", "bob", cursor, 7) is None
    assert pages.get("gw", "alice", cursor + 1, 7) is None
    assert pages.get("gw", "alice", cursor, 8) is None  # rules or claims changed meanwhile


def test_records_are_bounded_by_rows_held_oldest_first() -> None:
    pages = ResyncPages(max_rows=10)
    first = pages.put("gw", "a", pending(6, cursor=(1 << 41) + 1))
    second = pages.put("gw", "b", pending(6, cursor=(1 << 41) + 2))
    assert pages.get("gw", "a", first, 7) is None
    assert pages.get("gw", "b", second, 7) is not None


def test_first_cursors_are_below_every_ingest_hlc() -> None:
    cursors = {ResyncPages.first_cursor() for _ in range(100)}
    assert len(cursors) == 100
    assert all(1 << 40 <= c < 1 << 48 for c in cursors)
