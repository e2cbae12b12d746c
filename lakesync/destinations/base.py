"""The one interface every destination implements, and the typed change rows it applies.

A *change set* is what shipping applies to one destination table: per changed row its full
current state (one typed value per schema column) or the fact that it stopped being live, plus
the lake position (landing ingest HLC) the set is complete through. Applying is idempotent (each
row carries its whole state), so a re-run after a crash at any point converges.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lakesync.canonical import canonical_json
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.statements import TableLayout
from lakesync.errors import LakeSyncError
from lakesync.spark_udfs.decode import (
    json_to_boolean,
    json_to_double,
    json_to_json_text,
    json_to_string,
)

__all__ = ["EVICT_CHUNK", "Change", "Destination", "DestinationError", "TieringMark",
           "eviction_batches", "latest_per_row", "normalise_row", "typed_change"]

EVICT_CHUNK = 1_000
"""Row ids per eviction statement (bound parameters ``r0`` …, see
:func:`lakesync.destinations.statements.delete_rows`)."""


class DestinationError(LakeSyncError):
    """A destination could not be reached or refused a statement; the message says which."""

    code = "DESTINATION_ERROR"
    status = 502


@dataclass(frozen=True, slots=True)
class Change:
    """One changed row: ``values`` are typed per the layout (json as canonical JSON text);
    ``deleted`` rows carry no values."""

    row_id: str
    values: Mapping[str, Any]
    deleted: bool = False


def _null(_: str | None) -> None:
    return None


_DECODERS: dict[str, Callable[[str | None], Any]] = {
    "string": json_to_string,
    "number": json_to_double,
    "boolean": json_to_boolean,
    "json": json_to_json_text,
    "null": _null,
}


def typed_change(layout: TableLayout, row_id: str, cells: Mapping[str, Any] | None) -> Change:
    """The change of a row from its merged cells (``lakesync.merge`` values; None = deleted),
    typed exactly as the lake's current-state models type them (a value of the wrong type for
    its column is null)."""
    if cells is None:
        return Change(row_id, {}, deleted=True)
    values = {
        name: _DECODERS[kind](None if name not in cells else canonical_json(cells[name]))
        for name, kind in layout.columns
    }
    return Change(row_id, values)


def eviction_batches(row_ids: Sequence[str]) -> Iterator[dict[str, str]]:
    """The parameters (``r0`` …) of each eviction statement for ``row_ids``, at most
    :data:`EVICT_CHUNK` ids each."""
    for start in range(0, len(row_ids), EVICT_CHUNK):
        yield {f"r{i}": row_id for i, row_id in enumerate(row_ids[start : start + EVICT_CHUNK])}


def latest_per_row(changes: Sequence[Change]) -> list[Change]:
    """One change per row, the last given for it: a set-based upsert must see each key once."""
    return list({c.row_id: c for c in changes}.values())


def normalise_row(layout: TableLayout, row: Mapping[str, Any]) -> dict[str, Any]:
    """Driver values → the common shape: bool, float, json as canonical text, props as an
    object, timestamps aware UTC."""
    kinds = dict(layout.columns)
    out: dict[str, Any] = {}
    for name, value in row.items():
        kind = kinds.get(name)
        if value is None:
            out[name] = None
        elif kind == "boolean":
            out[name] = bool(value)
        elif kind == "number":
            out[name] = float(value)
        elif kind == "json":
            out[name] = canonical_json(json.loads(value) if isinstance(value, str) else value)
        elif name == "props":
            out[name] = json.loads(value) if isinstance(value, str) else value
        elif name in ("synced_at", "deleted_at"):
            out[name] = value if value.tzinfo else value.replace(tzinfo=UTC)
        else:
            out[name] = value
    return out


@dataclass(frozen=True, slots=True)
class TieringMark:
    """What a lifecycle tiering of a table achieved: every row whose last change (HLC) is
    before ``cutoff`` and whose lake position is at most ``position`` (the table's watermark
    then) is out of the destination. The next tiering need only evict the aged rows this does
    not cover: those changed since ``cutoff``, or shipped since ``position``."""

    cutoff: int
    position: int


class Destination(abc.ABC):
    """A place synced tables are materialised in (SPEC §11 layout), for one declared spec."""

    spec: DestinationSpec

    @abc.abstractmethod
    def layout(self, table: str, columns: Sequence[tuple[str, str]],
               external_id: str | None = None) -> TableLayout:
        """The layout of ``table`` in this destination (its delete mode, dataset or schema)."""

    @abc.abstractmethod
    def ensure_table(self, layout: TableLayout) -> None:
        """Create the table (and the bookkeeping tables) or add the columns it lacks."""

    @abc.abstractmethod
    def apply_changes(
        self, layout: TableLayout, changes: Sequence[Change], position: int | None = None
    ) -> None:
        """Apply a change set in one go; with ``position`` also advance the table's watermark
        (in the same transaction where the destination has them)."""

    @abc.abstractmethod
    def read_rows(self, layout: TableLayout) -> list[dict[str, Any]]:
        """Every row of the table (deleted ones too under soft delete), by ``row_id``."""

    @abc.abstractmethod
    def read_changes(
        self, layout: TableLayout, since: datetime, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows synced after ``since``, oldest first (soft-deleted ones with ``deleted_at``);
        with ``limit``, only those up to and including the ``synced_at`` of the ``limit``-th
        (a page never ends inside one instant, so it may hold more than ``limit`` rows)."""

    @abc.abstractmethod
    def evict(
        self, layout: TableLayout, row_ids: Sequence[str], mark: TieringMark | None = None
    ) -> int:
        """Remove the rows of ``row_ids`` the table holds (lifecycle tiering: the lake keeps
        them; it picks the rows whose last change is older than the hot window); returns how
        many left. With ``mark``, record it as the table's tiering mark (with the deletes, in
        one transaction where the destination has them)."""

    def tiering_mark(self, table: str) -> TieringMark | None:
        """The mark the last lifecycle tiering of ``table`` recorded (None: none, or a
        destination that does not tier)."""
        return None

    @abc.abstractmethod
    def watermark(self, table: str) -> int | None:
        """The lake position shipped into ``table`` for this destination's gateway, if any."""

    def for_table(self, table: str) -> Destination:
        """The destination that holds ``table`` (a composite's route; else this one)."""
        return self

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    def __enter__(self) -> Destination:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
