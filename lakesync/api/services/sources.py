"""Adapter-sourced pull: read a declared source's rows through its destination adapter and page
them with :func:`lakesync.sources.page_source` (cursor semantics there).

The source is opened for the request and closed after it, in a worker thread (the adapters'
drivers block). Each table is read a page at a time (``read_changes`` with the limit), so a
request costs its page, not the table. Its tables are the ones the destination ships
(``tables``, else every registered table of the gateway) that the client's rules let it read;
their columns come from the gateway's registered schemas.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from lakesync.api.services.sync import SyncService
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.factory import open_destination
from lakesync.errors import NotFoundError
from lakesync.lakehouse.catalog import lake_catalog
from lakesync.lakehouse.settings import LakeSettings
from lakesync.rules import tables_for
from lakesync.schema import TableSchema, reserved_name_problems
from lakesync.sources import SourcePage, SourceRow, page_source, source_row
from lakesync.views import effective_rules

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

__all__ = ["pull_source"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _source(service: SyncService, gateway_id: str, name: str) -> DestinationSpec:
    spec = service.settings.destinations.get(name)
    if spec is None or spec.gateway != gateway_id:
        declared = sorted(
            n for n, s in service.settings.destinations.items() if s.gateway == gateway_id
        )
        known = ", ".join(declared) or "none declared"
        raise NotFoundError(
            f"unknown pull source {name!r} for gateway {gateway_id!r} (sources: {known})"
        )
    return spec


def _read(
    spec: DestinationSpec, schemas: list[TableSchema], since: int, limit: int, data_dir: Path
) -> tuple[list[SourceRow], bool]:
    """The rows of every table synced after ``since``, through the earliest instant at which a
    table's read of ``limit + 1`` rows ended (beyond it that table was not read), and whether
    rows beyond that instant may exist."""
    moment = _EPOCH + timedelta(microseconds=since)
    read: list[list[SourceRow]] = []
    cut: int | None = None
    # A destination in the lake is in the gateway's own lake (only such a one opens it).
    def lake() -> Catalog:
        return lake_catalog(LakeSettings.from_env(data_dir))()

    with open_destination(spec, catalog=lake) as dest:
        for schema in schemas:
            layout = dest.layout(schema.table, schema.columns, schema.external_id_column)
            # One row past the page: a table that has no more says so by returning <= limit.
            rows = [source_row(schema.table, r, layout.columns)
                    for r in dest.read_changes(layout, moment, limit + 1)]
            if len(rows) > limit:  # this table may have more after its last instant read
                cut = min(rows[-1].synced_us, cut if cut is not None else rows[-1].synced_us)
            read.append(rows)
    if cut is None:
        return [r for rows in read for r in rows], False
    return [r for rows in read for r in rows if r.synced_us <= cut], True


async def pull_source(
    service: SyncService,
    gateway_id: str,
    name: str,
    claims: Mapping[str, Any],
    since: int,
    limit: int,
) -> SourcePage:
    """A page of source ``name``'s rows after ``since`` that this client may see; an unknown
    source is :class:`NotFoundError`, an unreachable one a ``DestinationError`` (502)."""
    spec = _source(service, gateway_id, name)
    stored = (await anyio.to_thread.run_sync(service.store.get_rules, gateway_id)).rules
    rules = effective_rules(stored, claims)
    # Subqueries read the gateway's merged state (the hot log), as of this pull.
    claims = await anyio.to_thread.run_sync(service.bind, gateway_id, stored, claims)
    readable = tables_for(rules, claims)
    # A table using a reserved name (registered before it was) is never shipped: it has
    # nothing to serve, and its name may be a destination's own staging table.
    schemas = [
        s for s in (await service.schemas(gateway_id)).values()
        if spec.ships(s.table) and (readable is None or s.table in readable)
        and not reserved_name_problems(s)
    ]
    service.metrics.count(gateway_id, "pulls")
    rows, more = await anyio.to_thread.run_sync(
        _read, spec, schemas, since, limit, service.settings.data_dir
    )
    return page_source(name, rows, since, limit, rules, claims, more)
