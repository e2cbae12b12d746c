"""How far a long piece of work is: pure counting, no I/O.

:class:`NodeCount` follows a dbt run from the events
:func:`lakesync.lakehouse.pipeline.run_and_ship` reports (nodes planned, started, finished):
done/total, the node running now and the failures so far. The command line draws it (a progress
bar in a terminal, one summary line elsewhere); the counting lives here so it is tested without
a terminal or Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FAILED_STATUSES", "NodeCount"]

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
