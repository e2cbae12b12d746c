"""The pure progress model behind ``lakesync pipeline run``'s bar: nodes planned, done, running
and failed, counted from dbt's node events."""

from __future__ import annotations

from lakesync.progress import NodeCount


def test_counts_done_of_total_and_the_node_running() -> None:
    count = NodeCount()
    count.planned(3)
    assert (count.done, count.total, count.current) == (0, 3, None)
    assert count.node("stg_todos", "started") is False
    assert count.current == "stg_todos"
    assert count.node("stg_todos", "success") is True
    assert (count.done, count.current) == (1, None)
    count.node("todos", "started")
    count.node("unique_todos_id", "started")  # dbt runs nodes on two threads
    count.node("unique_todos_id", "pass")
    assert count.current == "todos"
    count.node("todos", "success")
    assert (count.done, count.total, count.failures) == (3, 3, [])
    assert count.summary() == "3/3 nodes, none failed"


def test_failures_are_counted_skips_and_warnings_are_not() -> None:
    count = NodeCount()
    count.planned(4)
    for node, status in [("a", "error"), ("b", "skipped"), ("c", "warn"), ("d", "fail")]:
        count.node(node, "started")
        count.node(node, status)
    assert count.failures == ["a", "d"]
    assert count.summary() == "4/4 nodes, 2 failed (a, d)"


def test_a_second_invocation_adds_to_the_total_and_done_never_passes_it() -> None:
    count = NodeCount()
    count.planned(1)
    count.node("todos", "success")
    count.planned(2)  # the change-set rebuild when shipping
    assert (count.done, count.total) == (1, 3)
    for node in ("x", "y", "z"):  # a node dbt did not count in its plan
        count.node(node, "success")
    assert (count.done, count.total) == (4, 4)
