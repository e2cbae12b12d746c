"""Which rows lifecycle tiering retires: those whose last change is older than the hot window.

A row's last change is the greatest of its write and DELETE clocks in the lake's merged row
state (``int_rows_merged``: every cell's and the tombstone's clock), taken at its HLC wall time:
when the row last changed, not when a destination last received it. A row shipped today whose
last change is a year old (a first shipment of old data) is therefore cold at once, and a row
changed within the window stays hot however long ago it was shipped. Read with pyiceberg, so
``lakesync materialise --lifecycle-only`` needs no Spark.

Each tiering records a :class:`~lakesync.destinations.base.TieringMark` in the destination (the
cutoff
and the table's watermark then); the next one evicts only the aged rows that mark does not
cover: changed since its cutoff, or shipped since its watermark (a row's lake position,
``last_ingest_hlc``, grows whenever it changes). So a long-lived destination is not sent a
delete for every row it ever retired on every run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from lakesync.destinations.base import DestinationError, TieringMark, cutoff_hlc
from lakesync.lakehouse.catalog import ROWS_MERGED_IDENTIFIER, open_catalog
from lakesync.lakehouse.settings import LakeSettings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

__all__ = ["LakeColdTier", "aged_rows"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LakeColdTier:
    """The lake as the cold tier of the destinations with a ``hot_window``
    (:class:`lakesync.destinations.routing.ColdTier`): it keeps every row in ``analytics.<table>``
    and tells which rows aged out by their last change (:func:`aged_rows`)."""

    settings: LakeSettings
    now: datetime
    """The instant hot windows end at, one for a whole run."""

    def aged_rows(
        self, gateway_id: str, table: str, before: datetime, mark: TieringMark | None
    ) -> list[str]:
        """:func:`aged_rows` in the lake's catalog; a failure to read it says how to rebuild."""
        try:
            return aged_rows(open_catalog(self.settings), gateway_id, table, before, mark)
        except Exception as exc:  # pyiceberg and pyarrow errors (a missing or unreadable file)
            _log.exception("lifecycle tiering of %s: reading the lake's row clocks failed",
                           table)
            raise DestinationError(
                f"cannot read the lake's row clocks ({type(exc).__name__}: {exc}); run "
                "`lakesync pipeline run` (or `--full-refresh`) to rebuild them"
            ) from exc


def aged_rows(
    catalog: Catalog,
    gateway_id: str,
    table: str,
    before: datetime,
    mark: TieringMark | None = None,
) -> list[str]:
    """The ids of ``gateway_id``'s rows of ``table`` whose last change (the greatest write or
    DELETE clock of the merged row state) is before ``before``, sorted; none before the pipeline
    first merged anything. With the ``mark`` of the destination's last tiering, only those it
    does not cover: last changed at or after its cutoff, or at a lake position past its
    watermark."""
    # heavy, optional (extra "pipeline")
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415
    from pyiceberg.expressions import And, EqualTo  # noqa: PLC0415

    # EqualTo's own __init__ takes (term, literal); mypy sees pydantic's field signature instead.
    equal: Any = EqualTo

    if not catalog.table_exists(ROWS_MERGED_IDENTIFIER):
        return []
    rows = (
        catalog.load_table(ROWS_MERGED_IDENTIFIER)
        .scan(
            row_filter=And(equal("gateway_id", gateway_id), equal("table_name", table)),
            selected_fields=("row_id", "write_hlc", "delete_hlc", "last_ingest_hlc"),
        )
        .to_arrow()
    )
    if rows.num_rows == 0:
        return []
    last = pc.max_element_wise(rows["write_hlc"], rows["delete_hlc"], skip_nulls=True)
    hlc = rows.schema.field("write_hlc").type
    wanted = pc.fill_null(pc.less(last, pa.scalar(Decimal(cutoff_hlc(before)), type=hlc)), False)
    if mark is not None:
        since_cutoff = pc.greater_equal(last, pa.scalar(Decimal(mark.cutoff), type=hlc))
        position = pa.scalar(Decimal(mark.position), type=rows.schema.field("last_ingest_hlc").type)
        shipped_since = pc.greater(rows["last_ingest_hlc"], position)
        uncovered = pc.fill_null(pc.or_kleene(since_cutoff, shipped_since), True)
        wanted = pc.and_(wanted, uncovered)
    aged = rows.filter(wanted)
    return sorted(str(r) for r in aged["row_id"].to_pylist())
