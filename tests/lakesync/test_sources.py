"""Source pull paging (pure): cursor = synced_at in microseconds, pages end at an instant's end,
rules filter rows, the cursor passes rows the client cannot see."""

from __future__ import annotations

from datetime import UTC, datetime

from lakesync import hlc
from lakesync.rules import parse_rules
from lakesync.sources import SourceRow, page_source, source_row, to_micros

RULES = parse_rules({"version": 1, "buckets": [{
    "name": "mine", "tables": [], "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
}]})


def row(row_id: str, at: int, owner: str = "alice", deleted: bool = False) -> SourceRow:
    return SourceRow("t", row_id, at, {"owner": owner}, deleted)


def ids(page: object) -> list[str]:
    return [d.row_id for d in page.deltas]  # type: ignore[attr-defined]


def test_pages_end_at_an_instant_and_resume_after_it() -> None:
    rows = [row("c", 20), row("a", 10), row("b", 10), row("d", 30)]
    first = page_source("s", rows, 0, 1, None, {})
    assert ids(first) == ["a", "b"] and first.server_hlc == 10 and first.has_more
    second = page_source("s", rows, first.server_hlc, 2, None, {})
    assert ids(second) == ["c", "d"] and second.server_hlc == 30 and not second.has_more
    assert page_source("s", rows, 30, 5, None, {}).deltas == []
    assert page_source("s", rows, 30, 5, None, {}).server_hlc == 30


def test_rules_filter_and_the_cursor_passes_hidden_rows() -> None:
    rows = [row("a", 10), row("x", 20, "bob"), row("b", 30), row("y", 40, "bob")]
    claims = {"sub": "alice"}
    first = page_source("s", rows, 0, 1, RULES, claims)
    assert ids(first) == ["a"] and first.has_more and first.server_hlc == 10
    last = page_source("s", rows, 10, 1, RULES, claims)
    assert ids(last) == ["b"] and not last.has_more
    assert last.server_hlc == 40  # past bob's later row: the next poll starts after it


def test_deltas_carry_state_the_source_id_and_the_instant_as_hlc() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=UTC)
    live = source_row("t", {"row_id": "r", "synced_at": at, "owner": "a", "meta": '{"k":[1]}',
                            "n": 2.5}, [("owner", "string"), ("meta", "json"), ("n", "number")])
    assert live.synced_us == to_micros(at) == 1_767_323_045_678_901
    gone = row("g", live.synced_us + 1, deleted=True)
    page = page_source("crm", [live, gone], 0, 10, None, {})
    insert, delete = page.deltas
    assert (insert.op, insert.client_id) == ("INSERT", "lakesync-gateway-source-crm")
    assert insert.values() == {"owner": "a", "meta": {"k": [1]}, "n": 2.5}
    assert insert.hlc == hlc.encode(1_767_323_045_678, 0)
    assert (delete.op, delete.columns) == ("DELETE", ())


def test_rows_read_a_page_at_a_time_keep_has_more() -> None:
    rows = [row("a", 10), row("x", 20, "bob")]
    # the reader stopped at instant 20 and more may follow: the cursor passes what was read
    page = page_source("s", rows, 0, 5, RULES, {"sub": "alice"}, more=True)
    assert ids(page) == ["a"] and page.has_more and page.server_hlc == 20
    hidden = page_source("s", [row("x", 20, "bob")], 10, 5, RULES, {"sub": "alice"}, more=True)
    assert hidden.deltas == [] and hidden.has_more and hidden.server_hlc == 20
