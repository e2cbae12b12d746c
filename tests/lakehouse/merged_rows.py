"""A stand-in for the pipeline's ``int_rows_merged`` (row clocks only), written with pyiceberg,
for tests of what reads it without running Spark."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from decimal import Decimal

from lakesync.lakehouse.catalog import ROWS_MERGED_IDENTIFIER as ROWS_MERGED
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.settings import LANDING_NAMESPACE, LakeSettings

RowClocks = tuple[str, str, str, int | None, int | None]
"""``(gateway_id, table_name, row_id, write_hlc, delete_hlc)``."""


def write_rows_merged(
    settings: LakeSettings, rows: Sequence[RowClocks], ingest: Mapping[str, int] | None = None
) -> None:
    """Replace ``int_rows_merged`` with ``rows`` (the columns lifecycle tiering reads); each
    row's lake position (``last_ingest_hlc``) is ``ingest[row_id]``, default 1."""
    import pyarrow as pa
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    hlc = pa.decimal128(20, 0)
    schema = pa.schema([("gateway_id", pa.string()), ("table_name", pa.string()),
                        ("row_id", pa.string()), ("write_hlc", hlc), ("delete_hlc", hlc),
                        ("last_ingest_hlc", hlc)])
    data = pa.Table.from_pylist([
        {"gateway_id": gw, "table_name": t, "row_id": r,
         "write_hlc": None if w is None else Decimal(w),
         "delete_hlc": None if d is None else Decimal(d),
         "last_ingest_hlc": Decimal((ingest or {}).get(r, 1))}
        for gw, t, r, w, d in rows
    ], schema=schema)
    catalog = open_catalog(settings)
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(LANDING_NAMESPACE)
    if catalog.table_exists(ROWS_MERGED):
        catalog.drop_table(ROWS_MERGED)
    catalog.create_table(ROWS_MERGED, schema=schema).append(data)
