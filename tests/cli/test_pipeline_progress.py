"""``lakesync pipeline run``'s progress: a bar over dbt's nodes in a terminal (done/total, the
node running, failures so far), quiet with one summary line when output is piped. Driven with
the events :func:`lakesync.lakehouse.pipeline.run_and_ship` reports, on a rich console forced to
be a terminal or writing to a plain file."""

from __future__ import annotations

import contextlib
import io

import pytest
from rich.console import Console

from lakesync.cli.lake import RunView
from lakesync.lakehouse.pipeline import Built, NodeProgress, NodesPlanned, PipelineEvent, Shipped
from lakesync.lakehouse.runner import PipelineResult
from lakesync.lakehouse.shipping import ShipResult

RUN: list[PipelineEvent] = [
    NodesPlanned("build", 3),
    NodeProgress("build", "stg_lakesync__todos", "started"),
    NodeProgress("build", "stg_lakesync__todos", "success"),
    NodeProgress("build", "analytics__todos", "started"),
    NodeProgress("build", "analytics__todos", "error"),
    NodeProgress("build", "unique_analytics__todos_id", "started"),
    NodeProgress("build", "unique_analytics__todos_id", "skipped"),
    Built(PipelineResult(rows_merged=7, tables_updated=["todos"], elapsed_s=1.5,
                         models=["analytics__todos"])),
    Shipped(ShipResult("warehouse", "todos", rows=7)),
]


def _show(terminal: bool) -> str:
    err = io.StringIO()
    console = Console(file=err, force_terminal=terminal, width=120)
    with contextlib.ExitStack() as stack:
        view = RunView(stack, ships=True, console=console)
        for event in RUN:
            view(event)
    view.finish()
    return err.getvalue()


def test_a_terminal_shows_a_bar_over_the_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    shown = _show(terminal=True)
    assert "analytics__todos …" in shown  # the node running
    assert "1/3" in shown and "2/3" in shown and "3/3" in shown  # done/total as it goes
    assert "1 failed" in shown
    assert "error" in shown and "analytics__todos" in shown  # the failed node, printed above
    assert "shipped warehouse/todos: 7 rows" in shown
    assert "pipeline run:" not in shown  # the bar and the table said it
    assert "1 failed (analytics__todos)" in capsys.readouterr().out  # the summary table


def test_piped_output_is_quiet_with_one_summary_line(capsys: pytest.CaptureFixture[str]) -> None:
    shown = _show(terminal=False)
    assert shown.count("\n") == 1, shown
    assert shown.startswith("pipeline run: 3/3 nodes, 1 failed (analytics__todos), ")
    assert "rows merged" in capsys.readouterr().out  # the summary table, printed whole


def test_a_run_handed_to_a_busy_gateway_says_it_waits() -> None:
    err = io.StringIO()
    with contextlib.ExitStack() as stack:
        view = RunView(stack, ships=False, console=Console(file=err, force_terminal=True))
        view.waiting("scheduled pipeline run")
        view(NodesPlanned("build", 1))
    assert "waiting for the gateway's scheduled pipeline run" in err.getvalue()
