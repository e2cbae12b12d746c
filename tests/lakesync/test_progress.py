"""The pure progress models: ``lakesync pipeline run``'s bar (nodes planned, done, running
and failed, counted from dbt's node events) and a connector's first load (rows so far)."""

from __future__ import annotations

from lakesync.progress import FirstLoad, NodeCount


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


def _status(state: str = "idle", rows: int = 0, failed: int = 0, success: float | None = None,
            error: str | None = None) -> dict[str, object]:
    return {"state": state, "rows_read": rows, "deltas_pushed": rows, "failed_polls": failed,
            "last_success": success, "last_error": error}


def test_a_first_load_counts_rows_until_a_poll_succeeds() -> None:
    load = FirstLoad("db1")
    assert load.observe(_status()) is False  # not polled yet
    assert load.observe(_status("polling", rows=100)) is False
    assert (load.rows_read, load.state) == (100, "polling")
    assert load.observe(_status("idle", rows=300, success=1.0)) is True
    assert load.done and load.error is None
    assert load.summary(2.04) == (
        "connector db1: first load done, 300 rows read, 300 deltas pushed, 2.0 s"
    )


def test_a_failed_first_load_ends_with_its_error_unless_a_retry_runs() -> None:
    load = FirstLoad("db1")
    assert load.observe(_status("polling", rows=50, failed=1, error="old")) is False  # retrying
    assert load.observe(_status("idle", rows=70, failed=2, error="OperationalError: gone")) is True
    assert not load.done and load.error == "OperationalError: gone"
    assert load.summary(1.0).startswith(
        "connector db1: first load failed after 70 rows read, 70 deltas pushed, 1.0 s: "
        "OperationalError: gone"
    )
    # A success after failures: the first load is done (the later poll resumed it).
    assert load.observe(_status("idle", rows=90, failed=2, success=5.0, error="x")) is True
    assert load.done and load.error is None
