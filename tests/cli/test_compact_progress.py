"""``lakesync compact``'s progress: in a terminal a bar over the tables (done/total, the one being
maintained), each table's figures printed as it is done; piped, only the figures. Driven with the
events a compaction reports (in this process, or streamed from the gateway's worker)."""

from __future__ import annotations

import contextlib
import io

from rich.console import Console

from lakesync.cli.compact import CompactView
from lakesync.lakehouse.compaction import TableCompaction
from lakesync.lakehouse.worker import Compacted, Queued, TablesPlanned, WorkerEvent

EVENTS: list[WorkerEvent] = [
    Queued("scheduled pipeline run"),
    TablesPlanned(["lakesync.landing", "analytics.todos"]),
    Compacted(TableCompaction("lakesync.landing", 40, 2, 4096, 2048, 9, 1)),
    Compacted(TableCompaction("analytics.todos", 3, 3, 100, 100, 2, 2, error="boom")),
]


def _show(terminal: bool) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        view = CompactView(stack, Console(file=out, width=120),
                           Console(file=err, force_terminal=terminal, width=120))
        for event in EVENTS:
            view.event(event)
    return out.getvalue(), err.getvalue()


def test_a_terminal_shows_a_bar_over_the_tables() -> None:
    out, err = _show(terminal=True)
    assert "waiting for the gateway's scheduled pipeline run" in err
    assert "compacting lakesync.landing" in err and "0/2" in err
    assert "compacting analytics.todos" in err and "1/2" in err
    assert "lakesync.landing: 40 → 2 data files, 4.0 KiB → 2.0 KiB, 9 → 1 snapshots" in out
    assert "analytics.todos: failed: boom" in out


def test_piped_output_has_the_figures_and_no_progress() -> None:
    out, err = _show(terminal=False)
    assert err == ""
    assert out.splitlines() == [
        "lakesync.landing: 40 → 2 data files, 4.0 KiB → 2.0 KiB, 9 → 1 snapshots",
        "analytics.todos: failed: boom",
    ]
