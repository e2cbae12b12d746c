"""Schema contracts: where a source's rows become the gateway's typed rows. Pure, no I/O.

A source hands over its tables' schemas (typed from the source: :mod:`lakesync.connectors._types`)
and rows of Python values. :func:`merge_source_schema` decides what is registered against the
table the gateway already has, and :func:`encode_rows` encodes each value for its column with
:func:`lakesync.column_types.encode_value`, applying the table's
:class:`~lakesync.connector_specs.TableContract` to a column the table lacks and to a value its
column's type does not hold: ``evolve``, ``freeze`` (:class:`ContractError` stops the poll),
``discard_row`` or ``discard_value`` (each a :class:`Refusal`, counted and logged by the poller).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from lakesync.column_types import decimal_holding, encode_value, widening_allowed
from lakesync.connector_specs import TableContract
from lakesync.connectors._values import fit_value
from lakesync.errors import LakeSyncError, SchemaError
from lakesync.schema import ColumnSpec, TableSchema, parse_schema, schema_to_wire

__all__ = [
    "ContractError",
    "Encoded",
    "Refusal",
    "encode_rows",
    "merge_source_schema",
    "widen_to_text",
]


class ContractError(SchemaError):
    """A ``freeze`` contract met what does not fit: the poll stops, naming table, row and
    column (nothing of the chunk is stored; the next poll meets it again)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """A row refused (``discard_row``) or a value discarded (``discard_value``), and why."""

    table: str
    row_id: str
    column: str
    why: str
    row_refused: bool

    def message(self) -> str:
        """One log line: table, row, column, what was done and why."""
        done = "row refused" if self.row_refused else "value discarded"
        where = f"table {self.table!r} row {self.row_id!r} column {self.column!r}"
        return f"{where}: {done}: {self.why}"


@dataclass(slots=True)
class Encoded:
    """:func:`encode_rows`' outcome: the ``rows`` to store (wire values), the ``refusals``,
    and the columns a ``data_type: evolve`` contract needs widened to ``string`` first
    (``widen``: then register and encode again)."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    refusals: list[Refusal] = field(default_factory=list)
    widen: list[str] = field(default_factory=list)


def _text_column(col: ColumnSpec) -> ColumnSpec:
    return msgspec.structs.replace(col, type="string", precision=None, scale=None)


def merge_source_schema(
    stored: TableSchema | None, source: TableSchema, contract: TableContract
) -> tuple[TableSchema, list[str]]:
    """The schema to register for ``source`` over the ``stored`` one (None: the first
    registration takes the source's), and notes for the log.

    A stored column keeps its type (a declared type wins over the source's), unless the
    source's is a widening of it and ``data_type`` is ``evolve``; when the source's type may
    hold values the stored one does not, a note says so (those values meet the contract). A
    source column the table lacks is added under ``columns: evolve`` and noted otherwise
    (``freeze`` stops the poll when a row holds a value in it)."""
    if stored is None:
        return source, []
    notes: list[str] = []
    have = {c.name.lower(): c for c in stored.columns}
    columns = list(stored.columns)
    for col in source.columns:
        old = have.get(col.name.lower())
        if old is None:
            if contract.columns == "evolve":
                columns.append(msgspec.structs.replace(col, nullable=True))
            else:
                notes.append(
                    f"table {source.table!r}: source column {col.name!r} is not in the table "
                    f"(contract columns: {contract.columns}): not added"
                )
            continue
        same = msgspec.structs.replace(col, name=old.name, nullable=old.nullable)
        if same == old:
            continue
        if contract.data_type == "evolve" and widening_allowed(old, same) is None:
            columns[columns.index(old)] = same
        elif contract.data_type == "evolve" and (held := decimal_holding(old, same)):
            # integer → numeric(20,2): a decimal holding both, not text.
            precision, scale = held
            columns[columns.index(old)] = msgspec.structs.replace(
                old, type="decimal", precision=precision, scale=scale
            )
        elif widening_allowed(same, old) is not None:
            notes.append(
                f"table {source.table!r}: column {old.name!r} is {_shown(old)} in the gateway but "
                f"{_shown(col)} in the source; values that do not fit meet the contract "
                f"(data_type: {contract.data_type})" + _evolve_hint(source.table, contract)
            )
    if columns == stored.columns:
        return stored, notes
    merged = msgspec.structs.replace(stored, columns=columns)
    return parse_schema(schema_to_wire(merged), stored=True), notes


def _evolve_hint(table: str, contract: TableContract, case: str = "data_type") -> str:
    """What to set so the table follows the source (empty when it already does)."""
    if getattr(contract, case) == "evolve":
        return ""
    return (
        f"; to follow the source, set the connector's contract: {{{case}: evolve}} (or "
        f"contract: {{tables: {{{table}: {{{case}: evolve}}}}}} for this table alone)"
    )


def _shown(col: ColumnSpec) -> str:
    if col.type == "decimal":
        return f"decimal({col.precision},{col.scale})"
    return col.type


def widen_to_text(schema: TableSchema, columns: Sequence[str]) -> TableSchema:
    """``schema`` with ``columns`` widened to ``string`` (``data_type: evolve`` for a value no
    widening of the column's own type holds)."""
    wanted = set(columns)
    return msgspec.structs.replace(
        schema,
        columns=[_text_column(c) if c.name in wanted else c for c in schema.columns],
    )


def encode_rows(
    schema: TableSchema, rows: Mapping[str, Mapping[str, Any]], contract: TableContract
) -> Encoded:
    """``rows`` (row id → column → the source's Python value) encoded for ``schema``'s
    columns under ``contract`` (see the module docstring). Raises :class:`ContractError`
    under ``freeze``."""
    specs = {c.name: c for c in schema.columns}
    out = Encoded()
    for row_id, row in rows.items():
        encoded: dict[str, Any] = {}
        refused: Refusal | None = None
        for name, value in row.items():
            spec = specs.get(name)
            if spec is None:
                refused = _unknown(schema.table, row_id, name, value, contract, out)
            else:
                try:
                    encoded[name] = encode_value(spec, fit_value(spec.type, value))
                except LakeSyncError as exc:
                    refused = _misfit(schema.table, row_id, spec, exc, contract, out)
                    if refused is not None and not refused.row_refused:
                        encoded[name], refused = None, None  # discard_value: null instead
            if refused is not None:
                break
        if refused is None:
            out.rows[row_id] = encoded
    return out


def _unknown(
    table: str, row_id: str, name: str, value: Any, contract: TableContract, out: Encoded
) -> Refusal | None:
    """A value in a column the table lacks (its contract did not let it be added)."""
    if value is None:
        return None  # nothing would be lost
    why = f"the table has no column {name!r} (contract columns: {contract.columns})"
    if contract.columns in ("freeze", "evolve"):
        raise ContractError(
            f"table {table!r} row {row_id!r} column {name!r}: {why}"
            + _evolve_hint(table, contract, "columns")
        )
    found = Refusal(table, row_id, name, why, contract.columns == "discard_row")
    out.refusals.append(found)
    return found if found.row_refused else None


def _misfit(
    table: str,
    row_id: str,
    spec: ColumnSpec,
    exc: LakeSyncError,
    contract: TableContract,
    out: Encoded,
) -> Refusal | None:
    """A value its column's type does not hold: the refusal (None when the column is to be
    widened first)."""
    mode = contract.data_type
    if mode == "evolve" and spec.type not in ("string", "json"):
        out.widen.append(spec.name)
        return None
    if mode in ("freeze", "evolve"):
        raise ContractError(
            f"table {table!r} row {row_id!r}: {exc.message} (contract data_type: {mode})"
            + _evolve_hint(table, contract)
        )
    row_refused = mode == "discard_row" or not spec.nullable
    found = Refusal(table, row_id, spec.name, exc.message, row_refused)
    out.refusals.append(found)
    return found
