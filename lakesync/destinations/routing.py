"""Destinations made of destinations: routing tables (composite), fan-out and hot/cold tiering.

- :class:`CompositeDestination` sends each table to the destination its route names (else the
  default), so one logical destination can keep ``todos`` in PostgreSQL and ``events`` in BigQuery.
- :class:`FanOutDestination` writes to a primary synchronously (its failures are the caller's)
  and then to secondaries best effort: a secondary's failure is logged and counted in
  :attr:`FanOutDestination.failures` and in the Prometheus counter
  ``lakesync_destination_secondary_failures_total`` (:mod:`lakesync.destinations.metrics`), never
  raised,
  so a slow or broken copy never blocks the primary. Reads come from the primary. Shipping
  ships the primary, then each secondary from the secondary's own watermark (kept in the
  secondary, like any destination's), so a secondary that missed change sets is caught up by
  the next run.
- :class:`TieredDestination` is a destination with a ``hot_window`` over its cold tier (the
  lake, a :class:`ColdTier`): after a table shipped, the rows whose last change is older than
  the window leave the destination; the cold tier keeps every row.

:func:`open_declared` builds them from ``lakesync.yaml`` (a destination's ``routes``,
``secondaries`` and ``hot_window``). A route or secondary that cannot be opened becomes an
:class:`UnreachableDestination`: the tables routed there fail one by one, a secondary counts a
failure per write, and everything else ships.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, NoReturn, Protocol

from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.base import (
    Change,
    ChangeSet,
    Destination,
    DestinationError,
    ShipResult,
    TieringMark,
    cutoff_hlc,
)
from lakesync.destinations.metrics import DestinationMetrics
from lakesync.destinations.statements import Columns, TableLayout, column_spec
from lakesync.errors import LakeSyncError

__all__ = [
    "ColdTier",
    "CompositeDestination",
    "FanOutDestination",
    "TieredDestination",
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

    def route(self, table: str) -> Destination:
        """The destination ``table`` goes to."""
        found = self._routes.get(table, self._default)
        if found is None:
            raise DestinationError(
                f"no route for table {table!r}: add it to the routes or give a default"
            )
        return found

    def ship(self, change_set: ChangeSet) -> ShipResult:
        try:
            result = self.route(change_set.table).ship(change_set)
        except DestinationError as exc:
            return ShipResult(self.spec.name, change_set.table, error=exc.message)
        return replace(result, destination=self.spec.name)

    def tier(self, table: str, columns: Columns, external_id: str | None) -> ShipResult | None:
        result = self.route(table).tier(table, columns, external_id)
        return None if result is None else replace(result, destination=self.spec.name)

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


class _Wrapping(Destination):
    """A destination over one other (``inner``) that passes every call on to it; a subclass
    overrides what it adds."""

    def __init__(self, inner: Destination) -> None:
        self.inner = inner
        self.spec = inner.spec

    def layout(
        self, table: str, columns: Columns, external_id: str | None = None
    ) -> TableLayout:
        return self.inner.layout(table, columns, external_id)

    def ensure_table(self, layout: TableLayout) -> None:
        self.inner.ensure_table(layout)

    def apply_changes(
        self, layout: TableLayout, changes: Sequence[Change], position: int | None = None
    ) -> None:
        self.inner.apply_changes(layout, changes, position)

    def read_rows(self, layout: TableLayout) -> list[dict[str, Any]]:
        return self.inner.read_rows(layout)

    def read_changes(
        self, layout: TableLayout, since: datetime, limit: int | None = None
    ) -> list[dict[str, Any]]:
        return self.inner.read_changes(layout, since, limit)

    def evict(
        self, layout: TableLayout, row_ids: Sequence[str], mark: TieringMark | None = None
    ) -> int:
        return self.inner.evict(layout, row_ids, mark)

    def tiering_mark(self, table: str) -> TieringMark | None:
        return self.inner.tiering_mark(table)

    def watermark(self, table: str) -> int | None:
        return self.inner.watermark(table)

    def close(self) -> None:
        self.inner.close()


class FanOutDestination(_Wrapping):
    """A primary (``inner``) written synchronously plus best-effort secondaries (by name); reads
    and tiering are the primary's (secondaries are copies, kept whole)."""

    def __init__(
        self,
        primary: Destination,
        secondaries: Mapping[str, Destination],
        metrics: DestinationMetrics | None = None,
    ) -> None:
        super().__init__(primary)
        self.secondaries = dict(secondaries)
        self.failures: Counter[str] = Counter()
        """Failed writes per secondary name since this object was made."""
        self._metrics = metrics

    def _failed(self, name: str) -> None:
        self.failures[name] += 1
        if self._metrics is not None:
            self._metrics.secondary_failed(self.spec.name, name)

    def _each_secondary(self, what: str, layout: TableLayout, call: Any) -> None:
        for name, dest in self.secondaries.items():
            try:
                call(dest, dest.layout(layout.table, layout.columns, layout.external_id))
            except DestinationError as exc:
                self._failed(name)
                _log.warning("secondary destination %s: %s failed (%s); the primary has it",
                             name, what, exc.message)

    def ship(self, change_set: ChangeSet) -> ShipResult:
        """Ship to the primary, then to each secondary from its own watermark, best effort;
        the result is the primary's with how many secondaries failed."""
        result = self.inner.ship(change_set)
        failed = 0
        for name, secondary in self.secondaries.items():
            shipped = secondary.ship(change_set)
            if shipped.error is None:
                continue
            failed += 1
            self._failed(name)
            _log.warning("secondary destination %s: shipping %s failed (%s); the primary has it, "
                         "the next run catches it up", name, change_set.table, shipped.error)
        return replace(result, secondary_failures=failed)

    def tier(self, table: str, columns: Columns, external_id: str | None) -> ShipResult | None:
        """Tiering applies to the primary (secondaries are copies, kept whole)."""
        return self.inner.tier(table, columns, external_id)

    def ensure_table(self, layout: TableLayout) -> None:
        self.inner.ensure_table(layout)
        self._each_secondary("ensure_table", layout, lambda d, lay: d.ensure_table(lay))

    def apply_changes(
        self, layout: TableLayout, changes: Sequence[Change], position: int | None = None
    ) -> None:
        self.inner.apply_changes(layout, changes, position)
        self._each_secondary(
            "apply_changes", layout, lambda d, lay: d.apply_changes(lay, changes, position)
        )

    def close(self) -> None:
        super().close()
        for dest in self.secondaries.values():
            dest.close()


class ColdTier(Protocol):
    """Where the rows a hot destination evicts stay (the lake), and which of them aged out."""

    @property
    def now(self) -> datetime:
        """The instant hot windows end at (one for a whole run)."""

    def aged_rows(
        self, gateway_id: str, table: str, before: datetime, mark: TieringMark | None
    ) -> list[str]:
        """The ids of the rows of ``table`` whose last change is before ``before`` and that
        ``mark`` (the destination's last tiering) does not cover. Raises
        :class:`DestinationError` when the cold tier cannot tell."""


class TieredDestination(_Wrapping):
    """A destination with a ``hot_window`` over its cold tier: every table it ships then loses
    the rows whose last change is older than the window, however recently they were shipped;
    a row that changes again is shipped again (its whole state) and is hot once more."""

    def __init__(self, hot: Destination, cold: ColdTier) -> None:
        window = hot.spec.hot_window_seconds
        if window is None:
            raise ValueError(f"destination {hot.spec.name!r} has no hot_window")
        super().__init__(hot)
        self._window = window
        self._cold = cold

    def ship(self, change_set: ChangeSet) -> ShipResult:
        result = self.inner.ship(change_set)
        if result.error is not None:
            return result
        return self._evict(result, change_set.table, change_set.columns,
                           change_set.external_id)

    def tier(self, table: str, columns: Columns, external_id: str | None) -> ShipResult | None:
        result = ShipResult(self.spec.name, table)
        try:
            self.inner.ensure_table(self.inner.layout(table, columns, external_id))
        except LakeSyncError as exc:
            return replace(result, error=exc.message)
        return self._evict(result, table, columns, external_id)

    def _evict(
        self, result: ShipResult, table: str, columns: Columns, external_id: str | None
    ) -> ShipResult:
        """``result`` with the rows whose last change in the cold tier is older than the
        window evicted (none before anything was shipped)."""
        before = self._cold.now - timedelta(seconds=self._window)
        try:
            layout = self.inner.layout(table, columns, external_id)
            shipped = result.position if result.position is not None else self.inner.watermark(
                table)
            if shipped is None:  # nothing shipped: nothing to evict
                return result
            mark = self.inner.tiering_mark(table)
            if mark is not None and mark.position > shipped:
                mark = None  # the destination went back (reset or restored): check every row
            aged = self._cold.aged_rows(self.spec.gateway, table, before, mark)
            evicted = self.inner.evict(layout, aged, TieringMark(cutoff_hlc(before), shipped))
        except LakeSyncError as exc:
            return replace(result, error=f"lifecycle tiering: {exc.message}")
        return replace(result, evicted=evicted)


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
    cold: ColdTier | None = None,
) -> Destination:
    """The destination ``spec`` declares with its ``routes`` (a composite) and ``secondaries``
    (a fan-out over it), each opened by ``open_one``; with ``cold``, each of them with a
    ``hot_window`` is tiered over it. A failure to open ``spec`` itself raises; routes and
    secondaries that cannot be opened become :class:`UnreachableDestination`."""

    def tiered(dest: Destination) -> Destination:
        if cold is None or dest.spec.hot_window_seconds is None:
            return dest
        return TieredDestination(dest, cold)

    def tolerant(name: str) -> Destination:
        try:
            return tiered(open_one(specs[name]))
        except LakeSyncError as exc:  # a bad URL or missing secret too
            return tiered(UnreachableDestination(specs[name], exc))

    own = tiered(open_one(spec))
    dest: Destination = own
    if spec.routes:
        targets = {name: tolerant(name) for name in dict.fromkeys(spec.routes.values())}
        dest = CompositeDestination(
            {table: targets[name] for table, name in spec.routes.items()}, default=own
        )
    if spec.secondaries:
        dest = FanOutDestination(dest, {n: tolerant(n) for n in spec.secondaries}, metrics)
    return dest
