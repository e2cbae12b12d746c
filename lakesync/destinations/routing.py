"""Destinations made of destinations: routing tables (composite) and fan-out.

- :class:`CompositeDestination` sends each table to the destination its route names (else the
  default), so one logical destination can keep ``todos`` in PostgreSQL and ``events`` in BigQuery.
- :class:`FanOutDestination` writes to a primary synchronously (its failures are the caller's)
  and then to secondaries best effort: a secondary's failure is logged and counted in
  :attr:`FanOutDestination.failures` and in the Prometheus counter
  ``lakesync_destination_secondary_failures_total`` (:mod:`lakesync.destinations.metrics`), never
  raised,
  so a slow or broken copy never blocks the primary. Reads come from the primary.

:func:`open_declared` builds them from ``lakesync.yaml`` (a destination's ``routes`` and
``secondaries``). A route or secondary that cannot be opened becomes an
:class:`UnreachableDestination`: the tables routed there fail one by one, a secondary counts a
failure per write, and everything else ships.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn

from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.base import Change, Destination, DestinationError, TieringMark
from lakesync.destinations.metrics import DestinationMetrics
from lakesync.destinations.statements import Columns, TableLayout, column_spec
from lakesync.errors import LakeSyncError

__all__ = [
    "CompositeDestination",
    "FanOutDestination",
    "UnreachableDestination",
    "open_declared",
]

_log = logging.getLogger(__name__)


class CompositeDestination(Destination):
    """Route each table to one destination: ``routes[table]``, else ``default``."""

    def __init__(
        self, routes: Mapping[str, Destination], default: Destination | None = None
    ) -> None:
        if not routes and default is None:
            raise ValueError("a composite destination needs at least one route or a default")
        self._routes = dict(routes)
        self._default = default
        self.spec = (default or next(iter(self._routes.values()))).spec

    def for_table(self, table: str) -> Destination:
        return self.route(table)

    def route(self, table: str) -> Destination:
        """The destination ``table`` goes to."""
        found = self._routes.get(table, self._default)
        if found is None:
            raise DestinationError(
                f"no route for table {table!r}: add it to the routes or give a default"
            )
        return found

    def layout(
        self, table: str, columns: Columns, external_id: str | None = None
    ) -> TableLayout:
        return self.route(table).layout(table, columns, external_id)

    def ensure_table(self, layout: TableLayout) -> None:
        self.route(layout.table).ensure_table(layout)

    def apply_changes(
        self, layout: TableLayout, changes: Sequence[Change], position: int | None = None
    ) -> None:
        self.route(layout.table).apply_changes(layout, changes, position)

    def read_rows(self, layout: TableLayout) -> list[dict[str, Any]]:
        return self.route(layout.table).read_rows(layout)

    def read_changes(
        self, layout: TableLayout, since: datetime, limit: int | None = None
    ) -> list[dict[str, Any]]:
        return self.route(layout.table).read_changes(layout, since, limit)

    def evict(
        self, layout: TableLayout, row_ids: Sequence[str], mark: TieringMark | None = None
    ) -> int:
        return self.route(layout.table).evict(layout, row_ids, mark)

    def tiering_mark(self, table: str) -> TieringMark | None:
        return self.route(table).tiering_mark(table)

    def watermark(self, table: str) -> int | None:
        return self.route(table).watermark(table)

    def close(self) -> None:
        for dest in {id(d): d for d in [*self._routes.values(), self._default] if d}.values():
            dest.close()


class FanOutDestination(Destination):
    """A primary written synchronously plus best-effort secondaries (by name)."""

    def __init__(
        self,
        primary: Destination,
        secondaries: Mapping[str, Destination],
        metrics: DestinationMetrics | None = None,
    ) -> None:
        self.primary = primary
        self.secondaries = dict(secondaries)
        self.spec = primary.spec
        self.failures: Counter[str] = Counter()
        """Failed writes per secondary name since this object was made."""
        self._metrics = metrics

    def _each_secondary(self, what: str, layout: TableLayout, call: Any) -> None:
        for name, dest in self.secondaries.items():
            try:
                call(dest, dest.layout(layout.table, layout.columns, layout.external_id))
            except DestinationError as exc:
                self.failures[name] += 1
                if self._metrics is not None:
                    self._metrics.secondary_failed(self.spec.name, name)
                _log.warning("secondary destination %s: %s failed (%s); the primary has it",
                             name, what, exc.message)

    def layout(
        self, table: str, columns: Columns, external_id: str | None = None
    ) -> TableLayout:
        return self.primary.layout(table, columns, external_id)

    def ensure_table(self, layout: TableLayout) -> None:
        self.primary.ensure_table(layout)
        self._each_secondary("ensure_table", layout, lambda d, lay: d.ensure_table(lay))

    def apply_changes(
        self, layout: TableLayout, changes: Sequence[Change], position: int | None = None
    ) -> None:
        self.primary.apply_changes(layout, changes, position)
        self._each_secondary(
            "apply_changes", layout, lambda d, lay: d.apply_changes(lay, changes, position)
        )

    def read_rows(self, layout: TableLayout) -> list[dict[str, Any]]:
        return self.primary.read_rows(layout)

    def read_changes(
        self, layout: TableLayout, since: datetime, limit: int | None = None
    ) -> list[dict[str, Any]]:
        return self.primary.read_changes(layout, since, limit)

    def evict(
        self, layout: TableLayout, row_ids: Sequence[str], mark: TieringMark | None = None
    ) -> int:
        """Tiering applies to the primary (secondaries are copies, kept whole)."""
        return self.primary.evict(layout, row_ids, mark)

    def tiering_mark(self, table: str) -> TieringMark | None:
        return self.primary.tiering_mark(table)

    def watermark(self, table: str) -> int | None:
        return self.primary.watermark(table)

    def close(self) -> None:
        self.primary.close()
        for dest in self.secondaries.values():
            dest.close()


class UnreachableDestination(Destination):
    """A declared destination that could not be opened: every call raises why."""

    def __init__(self, spec: DestinationSpec, error: LakeSyncError) -> None:
        self.spec = spec
        self.error = error

    def _fail(self) -> NoReturn:
        raise DestinationError(self.error.message)

    def layout(
        self, table: str, columns: Columns, external_id: str | None = None
    ) -> TableLayout:
        return TableLayout(table, [column_spec(c) for c in columns], self.spec.delete, external_id)

    def ensure_table(self, layout: TableLayout) -> None:
        self._fail()

    def apply_changes(
        self, layout: TableLayout, changes: Sequence[Change], position: int | None = None
    ) -> None:
        self._fail()

    def read_rows(self, layout: TableLayout) -> list[dict[str, Any]]:
        self._fail()

    def read_changes(
        self, layout: TableLayout, since: datetime, limit: int | None = None
    ) -> list[dict[str, Any]]:
        self._fail()

    def evict(
        self, layout: TableLayout, row_ids: Sequence[str], mark: TieringMark | None = None
    ) -> int:
        self._fail()

    def tiering_mark(self, table: str) -> TieringMark | None:
        self._fail()

    def watermark(self, table: str) -> int | None:
        self._fail()


def open_declared(
    spec: DestinationSpec,
    specs: Mapping[str, DestinationSpec],
    open_one: Callable[[DestinationSpec], Destination],
    metrics: DestinationMetrics | None = None,
) -> Destination:
    """The destination ``spec`` declares with its ``routes`` (a composite) and ``secondaries``
    (a fan-out over it), each opened by ``open_one``. A failure to open ``spec`` itself raises;
    routes and secondaries that cannot be opened become :class:`UnreachableDestination`."""

    def tolerant(name: str) -> Destination:
        try:
            return open_one(specs[name])
        except LakeSyncError as exc:  # a bad URL or missing secret too
            return UnreachableDestination(specs[name], exc)

    own = open_one(spec)
    dest: Destination = own
    if spec.routes:
        targets = {name: tolerant(name) for name in dict.fromkeys(spec.routes.values())}
        dest = CompositeDestination(
            {table: targets[name] for table, name in spec.routes.items()}, default=own
        )
    if spec.secondaries:
        dest = FanOutDestination(dest, {n: tolerant(n) for n in spec.secondaries}, metrics)
    return dest
