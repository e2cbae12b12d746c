"""The one interface every destination implements, and the typed change rows it applies.

A *change set* is what shipping applies to one destination table: per changed row its full
current state (one typed value per schema column) or the fact that it stopped being live, plus
the lake position (landing ingest HLC) the set is complete through. Applying is idempotent (each
row carries its whole state), so a re-run after a crash at any point converges.
"""

from __future__ import annotations

import abc
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Context, Decimal
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from lakesync.canonical import canonical_json
from lakesync.cells import decoder
from lakesync.column_types import MAX_DECIMAL_PRECISION, decimal_params, encode_value
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.statements import DELETED, POSITION, Columns, TableLayout
from lakesync.errors import LakeSyncError
from lakesync.hlc import encode
from lakesync.schema import ColumnSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["EVICT_CHUNK", "Change", "ChangeSet", "Destination", "DestinationError", "ShipResult",
           "TieringMark", "collect_change_set", "collect_rows", "cutoff_hlc", "eviction_batches",
           "latest_per_row", "normalise_row", "typed_change", "widened_value"]

_log = logging.getLogger(__name__)

_EXACT = Context(prec=MAX_DECIMAL_PRECISION + 2)  # a 38-digit decimal quantizes without rounding

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


def typed_change(layout: TableLayout, row_id: str, cells: Mapping[str, Any] | None) -> Change:
    """The change of a row from its merged cells (``lakesync.merge`` values, the wire form;
    None = deleted), typed exactly as the lake's current-state models type them (a value of
    the wrong type for its column is null): Python values (int, Decimal, aware UTC datetime,
    date, bytes; json as canonical text)."""
    if cells is None:
        return Change(row_id, {}, deleted=True)
    values = {
        c.name: decoder(c)(None if c.name not in cells else canonical_json(cells[c.name]))
        for c in layout.columns
    }
    return Change(row_id, values)


def widened_value(old: ColumnSpec, new: ColumnSpec, value: Any) -> Any:
    """A typed value of an ``old`` column as the column widened to ``new`` holds it: the value
    the lake's decoder of ``new`` reads its wire form as (a string column: its JSON text), so
    a destination that widens by rewriting its rows (the lake, one without ``ALTER … TYPE``)
    keeps every value exactly as a re-shipment would write it."""
    if value is None:
        return None
    wire = json.loads(value) if old.type == "json" else encode_value(old, value)
    return decoder(new)(canonical_json(wire))


def eviction_batches(row_ids: Sequence[str]) -> Iterator[dict[str, str]]:
    """The parameters (``r0`` …) of each eviction statement for ``row_ids``, at most
    :data:`EVICT_CHUNK` ids each."""
    for start in range(0, len(row_ids), EVICT_CHUNK):
        yield {f"r{i}": row_id for i, row_id in enumerate(row_ids[start : start + EVICT_CHUNK])}


def latest_per_row(changes: Sequence[Change]) -> list[Change]:
    """One change per row, the last given for it: a set-based upsert must see each key once."""
    return list({c.row_id: c for c in changes}.values())


def normalise_row(
    layout: TableLayout, row: Mapping[str, Any], *, json_decoded: bool = False
) -> dict[str, Any]:
    """Driver values → the common shape: bool, float, json as canonical text, props as an
    object, timestamps aware UTC.

    ``json_decoded`` says the driver hands ``json`` columns and ``props`` over already decoded
    (psycopg, BigQuery's client) rather than as JSON text (PyMySQL, the lake): decoding a
    decoded value again would read the JSON string ``"123"`` as the number 123 and fail on
    ``"just a string"``. A cell no column of its kind can hold (a table kept by hand: invalid
    JSON text, a number column holding text) reads as null and is logged, so one bad row never
    fails a whole read (a source pull serves every client from it).
    """
    specs = {c.name: c for c in layout.columns}
    out: dict[str, Any] = {}
    for name, value in row.items():
        try:
            out[name] = _normal_cell(specs.get(name), name, value, json_decoded)
        except (TypeError, ValueError, AttributeError) as exc:
            _log.warning("table %r, row %r: column %r holds %s, read as null (%s)",
                         layout.table, row.get("row_id"), name, type(value).__name__, exc)
            out[name] = None
    return out


def collect_change_set(layout: TableLayout, rows: DataFrame) -> tuple[list[Change], int | None]:
    """A change set (a Spark DataFrame of ``row_id``, the layout's columns, ``_deleted`` and
    ``_position``) on the Spark driver as :class:`Change` rows, and its greatest position."""
    names = layout.column_names
    out: list[Change] = []
    top: int | None = None
    for row in collect_rows(rows):
        deleted = bool(row[DELETED])
        values = {} if deleted else {n: row[n] for n in names}
        out.append(Change(row["row_id"], values, deleted))
        top = max(top or 0, int(row[POSITION]))
    return out, top


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def collect_rows(frame: DataFrame) -> Iterator[dict[str, Any]]:
    """Each row of a Spark DataFrame, brought to the driver, as Python values: a ``timestamp``
    as the aware UTC instant, ``binary`` as bytes.

    Timestamps travel as their microseconds since the epoch: PySpark's own conversion goes
    through ``datetime.fromtimestamp`` in local time, which fails for 0001-01-01 (CPython
    probes the local offset a day earlier) and depends on this process's time zone."""
    stamps = {name for name, kind in frame.dtypes if kind == "timestamp"}
    frame = frame.selectExpr(*(f"unix_micros(`{n}`) as `{n}`" if n in stamps else f"`{n}`"
                               for n in frame.columns))
    for row in frame.toLocalIterator():
        yield {n: _from_spark(v, n in stamps) for n, v in row.asDict().items()}


def _from_spark(value: Any, timestamp: bool) -> Any:
    if timestamp and value is not None:
        return _EPOCH + timedelta(microseconds=value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _normal_cell(spec: ColumnSpec | None, name: str, value: Any, json_decoded: bool) -> Any:
    if value is None:
        return None
    kind = None if spec is None else spec.type
    if kind == "boolean":
        return bool(value)
    if kind == "number":
        return float(value)
    if kind == "json":
        return canonical_json(value if json_decoded else json.loads(value))
    if kind == "integer":
        if isinstance(value, bool | float) or int(value) != value:
            raise ValueError("not an integer")
        return int(value)
    if kind == "decimal" and spec is not None:
        # MySQL keeps a decimal of a large scale as its text; the others hand a Decimal over.
        _, scale = decimal_params(spec)
        number = Decimal(value) if isinstance(value, str | int | Decimal) else None
        if number is None or not number.is_finite():
            raise ValueError("not a decimal")
        return number.quantize(Decimal(1).scaleb(-scale), context=_EXACT)
    if kind == "date":
        if isinstance(value, datetime) or not isinstance(value, date):
            raise TypeError("not a date")
        return value
    if kind == "bytes":
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError("not bytes")
        return bytes(value)
    if name == "props":
        return value if json_decoded else json.loads(value)
    if kind == "timestamp" or name in ("synced_at", "deleted_at"):
        # MySQL's DATETIME holds UTC without a zone.
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


@dataclass(frozen=True, slots=True)
class TieringMark:
    """What a lifecycle tiering of a table achieved: every row whose last change (HLC) is
    before ``cutoff`` and whose lake position is at most ``position`` (the table's watermark
    then) is out of the destination. The next tiering need only evict the aged rows this does
    not cover: those changed since ``cutoff``, or shipped since ``position``."""

    cutoff: int
    position: int


def cutoff_hlc(before: datetime) -> int:
    """The smallest HLC whose wall time is not before ``before``: a clock below it is older."""
    return encode(int(before.timestamp() * 1000), 0)


@dataclass(frozen=True, slots=True)
class ShipResult:
    """What shipping one table to one destination did."""

    destination: str
    table: str
    rows: int = 0
    """Changed rows applied (upserted or deleted)."""
    position: int | None = None
    """The watermark after the run (None: nothing shipped yet)."""
    error: str | None = None
    elapsed_s: float = 0.0
    steps: dict[str, float] = field(default_factory=dict)
    """Seconds per step: ``prepare`` (table, watermark, change set), ``ship`` (the destination's
    :meth:`~Destination.apply_change_set`: the change set read on Spark, loaded, applied with
    the watermark)."""
    secondary_failures: int = 0
    """Fan-out secondaries this table failed to ship to (best effort: the next run retries them
    from their own watermark)."""
    evicted: int = 0
    """Rows lifecycle tiering took out of the destination (its ``hot_window``)."""


class ChangeSet(Protocol):
    """One table's changes as the lake holds them, which any destination ships from its own
    watermark (the lakehouse implements it: :class:`lakesync.lakehouse.change_sets.LakeChangeSet`).
    """

    @property
    def table(self) -> str:
        """The table's name."""

    @property
    def columns(self) -> Sequence[ColumnSpec]:
        """The table's columns as the lake types them."""

    @property
    def external_id(self) -> str | None:
        """The schema's external id column, if any."""

    def rows(self, destination: DestinationSpec, since: int | None) -> DataFrame | None:
        """The rows ``destination`` lacks past its watermark ``since``: a Spark DataFrame of
        ``row_id``, the columns, ``_deleted`` and ``_position`` (None: nothing is past it).
        Raises :class:`DestinationError` when the lake cannot serve that watermark yet."""

    def shipped(self, destination: DestinationSpec, position: int | None) -> None:
        """Record that ``destination`` now holds the rows through watermark ``position``."""


class Destination(abc.ABC):
    """A place synced tables are shipped to (docs/protocol.md §11 layout), for one declared
    spec."""

    spec: DestinationSpec

    lives_in_lake: ClassVar[bool] = False
    """This kind lives in the lake's own catalog: it opens only with the lake's catalog, the
    pipeline alone reads its watermarks, and it is the cold tier itself."""

    def ship(self, change_set: ChangeSet) -> ShipResult:
        """Ship ``change_set`` end to end: create or widen the table, read the watermark, take
        the rows past it from the lake, apply them with the new watermark
        (:meth:`apply_change_set`) and tell the lake. A failure is the result's ``error``,
        never raised, so one table never stops the others. Composite destinations (routing,
        fan-out, tiering: :mod:`lakesync.destinations.routing`) override it."""
        started = time.monotonic()
        steps: dict[str, float] = {}
        mark = started

        def step(name: str) -> None:
            nonlocal mark
            now = time.monotonic()
            steps[name] = now - mark
            mark = now

        table = change_set.table

        def failed(error: str) -> ShipResult:
            return ShipResult(self.spec.name, table, error=error,
                              elapsed_s=time.monotonic() - started)

        try:
            layout = self.layout(table, change_set.columns, change_set.external_id)
            self.ensure_table(layout)
            since = self.watermark(table)
            frame = change_set.rows(self.spec, since)
            step("prepare")
            if frame is None:  # shipped up to this watermark, and the lake has not changed since
                count, position = 0, since
            else:
                count, position = self.apply_change_set(layout, frame)
            step("ship")
            if count == 0:
                position = since
            if frame is not None:
                change_set.shipped(self.spec, position)
        except LakeSyncError as exc:
            return failed(exc.message)
        except Exception as exc:  # Spark's errors (Py4J, analysis) name no LakeSync type
            detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            if type(exc).__module__.startswith(("pyspark", "py4j")):
                return failed(f"Spark: {detail}")
            # Anything else is this table's failure too: logged with its trace, reported, and
            # the other tables still ship.
            _log.exception("shipping %s to %s failed", table, self.spec.name)
            return failed(f"{type(exc).__name__}: {detail}")
        return ShipResult(self.spec.name, table, count, position,
                          elapsed_s=time.monotonic() - started, steps=steps)

    def tier(self, table: str, columns: Columns, external_id: str | None) -> ShipResult | None:
        """Lifecycle tiering of ``table`` alone (no shipping): the rows past the hot window
        evicted, in the result's ``evicted``; None for a destination without a hot window
        (a composite's tiering, :class:`lakesync.destinations.routing.TieredDestination`)."""
        return None

    @abc.abstractmethod
    def layout(self, table: str, columns: Columns,
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

    def apply_change_set(self, layout: TableLayout, rows: DataFrame) -> tuple[int, int | None]:
        """Apply a change set the lake computed: ``rows`` is a Spark DataFrame of ``row_id``, the
        layout's columns (json as canonical text), ``_deleted`` and ``_position``, one row per
        changed row. Apply it and advance the table's watermark to its greatest position, as
        :meth:`apply_changes` does; returns (rows applied, that position; ``(0, None)`` when
        empty). This default brings the rows to the Spark driver; a destination with a bulk
        path (a staging table loaded over JDBC, a load job) overrides it so the executors load
        the rows in parallel. :meth:`ship` calls only this (and the rest of this interface)."""
        changes, top = collect_change_set(layout, rows)
        if not changes:
            return 0, None
        self.apply_changes(layout, changes, top)
        return len(changes), top

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

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    def __enter__(self) -> Destination:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
