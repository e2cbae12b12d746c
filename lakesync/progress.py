"""How far a long piece of work is: pure counting, no I/O.

:class:`NodeCount` follows a dbt run from the events
:func:`lakesync.lakehouse.pipeline.run_and_ship` reports (nodes planned, started, finished):
done/total, the node running now and the failures so far. :class:`FirstLoad` follows a
connector's first load from the status documents its gateway serves (rows read so far, whether it
ended and how). The command line draws them (a progress bar in a terminal, one summary line
elsewhere); the counting lives here so it is tested without a terminal, Spark or a gateway.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FAILED_STATUSES", "FirstLoad", "NodeCount"]

FAILED_STATUSES = frozenset({"error", "fail", "runtime error"})
"""dbt node statuses that count as a failure (``warn`` and ``skipped`` do not)."""


@dataclass(slots=True)
class NodeCount:
    """The nodes of one or more dbt invocations: how many are planned, done and failed, and
    which one runs now."""

    total: int = 0
    done: int = 0
    current: str | None = None
    failures: list[str] = field(default_factory=list)
    _running: list[str] = field(default_factory=list)

    def planned(self, nodes: int) -> None:
        """An invocation will run ``nodes`` more nodes (a change-set rebuild adds to the run)."""
        self.total += nodes

    def node(self, name: str, status: str) -> bool:
        """Count one node event (``started``, then its final status); True when it finished."""
        if status == "started":
            self._running.append(name)
            self.current = name
            return False
        if name in self._running:
            self._running.remove(name)
        self.current = self._running[-1] if self._running else None
        self.done += 1
        # dbt may run nodes it did not count in its plan (a rebuild's): never show done > total
        self.total = max(self.total, self.done)
        if status in FAILED_STATUSES:
            self.failures.append(name)
        return True

    def summary(self) -> str:
        """One line: ``12/12 nodes, 1 failed (stg_todos)``."""
        failed = (f", {len(self.failures)} failed ({', '.join(self.failures)})"
                  if self.failures else ", none failed")
        return f"{self.done}/{self.total} nodes{failed}"


@dataclass(slots=True)
class FirstLoad:
    """A connector's first load as its status documents tell it (the gateway's
    ``/v1/admin/connectors/{gw}/{name}/status``: ``state``, ``rows_read``, ``deltas_pushed``,
    ``failed_polls``, ``last_success``, ``last_error``). The first load is done when a poll has
    succeeded (a failed poll's successor resumes from the cursor it stored); it failed when no
    poll has succeeded and none is running after one failed."""

    name: str
    rows_read: int = 0
    deltas_pushed: int = 0
    state: str = "starting"
    done: bool = False
    error: str | None = None

    def observe(self, status: Mapping[str, Any]) -> bool:
        """Take the connector's latest status; True when the first load has ended (done or
        failed)."""
        self.rows_read = int(status.get("rows_read", 0))
        self.deltas_pushed = int(status.get("deltas_pushed", 0))
        self.state = str(status.get("state", "idle"))
        self.done = status.get("last_success") is not None
        failed = int(status.get("failed_polls", 0)) > 0 and self.state != "polling"
        self.error = None if self.done or not failed else str(status.get("last_error"))
        return self.done or self.error is not None

    def summary(self, elapsed_s: float) -> str:
        """One line: ``connector db1: first load done, 3000 rows read, 3000 deltas pushed,
        4.2 s`` (``failed after …: <error>`` when it failed)."""
        counts = f"{self.rows_read} rows read, {self.deltas_pushed} deltas pushed"
        if self.error is not None:
            return (f"connector {self.name}: first load failed after {counts}, {elapsed_s:.1f} s:"
                    f" {self.error} (the next poll resumes from the last stored chunk)")
        return f"connector {self.name}: first load done, {counts}, {elapsed_s:.1f} s"
