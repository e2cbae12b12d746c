"""Adapter-sourced pull (``GET /v1/sync/{gw}/pull?source=NAME``): a page of a source's rows as
deltas, with the client's sync rules applied (pure: the gateway reads the rows).

A *source* is a declared destination (``destinations:`` in ``lakesync.yaml``) of the gateway,
read through its adapter: rows in the docs/protocol.md §11 layout (``row_id``, typed columns,
``synced_at``, ``deleted_at`` under soft delete), such as a PostgreSQL table shipping keeps or one
a team keeps in that layout themselves.

Cursor semantics. ``since`` and ``serverHlc`` of a source pull are a row's ``synced_at`` in
microseconds since the Unix epoch (a decimal string, as every cursor), not the gateway's ingest
clock. A page holds the rows synced after ``since``, ordered by (``synced_at``, table,
``row_id``), up to ``limit`` rows, and then every further row with the same ``synced_at`` as its
last one, so a page never ends inside one instant and the next page (``since`` = the page's
``serverHlc``) starts exactly after it; a change set applied in one transaction shares one
``synced_at``, so such a page can exceed ``limit``. ``hasMore`` is true while rows after the
page exist. Rows the client may not see are skipped (the cursor still passes them).

Each live row is an ``INSERT`` carrying every column (clients upsert it), each soft-deleted row a
``DELETE``; the delta's ``hlc`` is ``synced_at`` in HLC form (wall milliseconds, counter 0) and
its ``clientId`` names the source (``lakesync-gateway-source-NAME``, reserved for gateways).
Rules are evaluated on the row (a soft-deleted row on its last values). Limits: a hard-deleted
row leaves no trace to pull (use ``delete: soft`` for sources), and a row that stops matching a
client's rules is skipped, not retracted (the source keeps no history to tell whether the client
held it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from lakesync import hlc
from lakesync.column_types import encode_value
from lakesync.delta import RESERVED_CLIENT_PREFIX, RowDelta
from lakesync.rules import SyncRules, visible
from lakesync.schema import ColumnSpec

__all__ = [
    "SourcePage",
    "SourceRow",
    "page_source",
    "source_client_id",
    "source_row",
    "to_micros",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class SourceRow(msgspec.Struct, frozen=True):
    """One row a source adapter read: its values as the row's JSON cells."""

    table: str
    row_id: str
    synced_us: int
    """``synced_at`` in microseconds since the epoch: the cursor."""
    cells: dict[str, Any]
    deleted: bool = False


class SourcePage(msgspec.Struct, frozen=True):
    """A page of a source pull in the pull response's terms."""

    deltas: list[RowDelta]
    server_hlc: int
    has_more: bool


def to_micros(moment: datetime) -> int:
    """Microseconds since the Unix epoch of an aware timestamp (the source cursor's unit)."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def source_client_id(name: str) -> str:
    """The client id a source's deltas carry."""
    return f"{RESERVED_CLIENT_PREFIX}-source-{name}"


def source_row(
    table: str, row: Mapping[str, Any], columns: Sequence[ColumnSpec | tuple[str, str]]
) -> SourceRow:
    """A :class:`SourceRow` from an adapter's normalised row (json columns as JSON text, typed
    columns as Python values): each cell in its canonical wire form
    (:func:`lakesync.column_types.encode_value`), exactly as a client wrote it. A column is a
    spec, or a ``(name, type)`` pair for a type without options."""
    cells: dict[str, Any] = {}
    for column in columns:
        spec = column if isinstance(column, ColumnSpec) else ColumnSpec(*column)  # type: ignore[arg-type]
        value = row.get(spec.name)
        if spec.type == "json" and value is not None:
            cells[spec.name] = json.loads(value)
        else:
            cells[spec.name] = encode_value(spec, value)
    return SourceRow(
        table, str(row["row_id"]), to_micros(row["synced_at"]), cells,
        row.get("deleted_at") is not None,
    )


def page_source(
    name: str,
    rows: Sequence[SourceRow],
    since: int,
    limit: int,
    rules: SyncRules | None,
    claims: Mapping[str, Any],
    more: bool = False,
) -> SourcePage:
    """The page after cursor ``since`` for a client with ``claims`` under ``rules`` (already
    the effective rules: None sees everything); see the module doc.

    ``rows`` (any order) are every row synced after ``since`` up to some instant; ``more`` says
    rows after that instant may exist (the source was read a page at a time)."""
    after = sorted((r for r in rows if r.synced_us > since),
                   key=lambda r: (r.synced_us, r.table, r.row_id))
    shown = [r for r in after if visible(rules, claims, r.table, r.cells)]
    page = shown[:limit]
    if page:
        last = page[-1].synced_us
        page += [r for r in shown[limit:] if r.synced_us == last]
    if page and shown[-1].synced_us > page[-1].synced_us:
        through, has_more = page[-1].synced_us, True
    else:  # every visible row read is in the page: pass the hidden ones read too
        through, has_more = (after[-1].synced_us if after else since), more
    client = source_client_id(name)
    deltas = [
        RowDelta.create("DELETE", r.table, r.row_id, client, {}, _hlc_of(r.synced_us))
        if r.deleted
        else RowDelta.create("INSERT", r.table, r.row_id, client, r.cells, _hlc_of(r.synced_us))
        for r in page
    ]
    return SourcePage(deltas, through, has_more)


def _hlc_of(micros: int) -> int:
    return hlc.encode(micros // 1000, 0)
