"""A stand-in for the pipeline's merged models (``int_rows_merged``, ``int_cells_merged``) for the
short chaos run, where Spark is too heavy: the landing table's deltas joined with
:class:`lakesync.merge.MergedState` (the merge every other part uses), written with pyiceberg,
with the landing state they cover recorded as a pipeline run records it. The gateways' own
checkpoint and trimming lanes then publish checkpoints from them and trim the hot log, exactly
as after a real run; the long run (``bench/chaos.py``) runs the real pipeline instead.
"""

from __future__ import annotations

import contextlib
import json
from decimal import Decimal
from typing import Any

import msgspec

from lakesync.delta import ColumnValue, RowDelta
from lakesync.lakehouse.catalog import (
    COVERED_PROPERTY,
    LANDING_IDENTIFIER,
    ROWS_MERGED_IDENTIFIER,
    landing_state,
    open_catalog,
)
from lakesync.lakehouse.settings import LANDING_NAMESPACE, LakeSettings
from lakesync.merge import MergedState

__all__ = ["write_models"]

CELLS_MERGED = f"{LANDING_NAMESPACE}.int_cells_merged"
_FIELDS = ("gateway_id", "ingest_hlc", "op", "table_name", "row_id", "client_id", "hlc",
           "columns_json")


def write_models(settings: LakeSettings) -> bool:
    """Rebuild both models from the landing table's current snapshot and record the position
    they cover; False when nothing was landed yet."""
    import pyarrow as pa  # heavy, optional (extra "pipeline")

    catalog = open_catalog(settings)
    if not catalog.table_exists(LANDING_IDENTIFIER):
        return False
    landing = catalog.load_table(LANDING_IDENTIFIER)
    snapshot = landing.current_snapshot()
    position, held = landing_state(landing)
    if snapshot is None or position is None:
        return False
    scan = landing.scan(snapshot_id=snapshot.snapshot_id, selected_fields=_FIELDS)
    states: dict[str, MergedState] = {}
    ingest: dict[tuple[str, str, str], int] = {}
    for row in scan.to_arrow().to_pylist():
        gw = row["gateway_id"]
        columns = tuple(ColumnValue(c["column"], c["value"])
                        for c in json.loads(row["columns_json"]))
        states.setdefault(gw, MergedState()).apply(RowDelta(
            row["op"], row["table_name"], row["row_id"], row["client_id"], columns,
            int(row["hlc"]), ""))
        key = (gw, row["table_name"], row["row_id"])
        ingest[key] = max(ingest.get(key, 0), int(row["ingest_hlc"]))
    hlc = pa.decimal128(20, 0)
    rows: list[dict[str, Any]] = []
    cells: list[dict[str, Any]] = []
    for gw, merged in states.items():
        for (table, row_id), state in merged.rows.items():
            write, tomb = state.write, state.tombstone
            rows.append({
                "gateway_id": gw, "table_name": table, "row_id": row_id,
                "write_hlc": None if write is None else Decimal(write[0]),
                "write_client_id": None if write is None else write[1],
                "delete_hlc": None if tomb is None else Decimal(tomb[0]),
                "delete_client_id": None if tomb is None else tomb[1],
                "last_ingest_hlc": Decimal(ingest[(gw, table, row_id)]),
            })
            cells.extend({
                "gateway_id": gw, "table_name": table, "row_id": row_id, "column_name": name,
                "value_json": msgspec.json.encode(cell.value).decode(),
                "hlc": Decimal(cell.hlc), "client_id": cell.client_id,
            } for name, cell in state.cells.items())
    ids = [("gateway_id", pa.string()), ("table_name", pa.string()), ("row_id", pa.string())]
    rows_schema = pa.schema([*ids, ("write_hlc", hlc), ("write_client_id", pa.string()),
                             ("delete_hlc", hlc), ("delete_client_id", pa.string()),
                             ("last_ingest_hlc", hlc)])
    cells_schema = pa.schema([*ids, ("column_name", pa.string()), ("value_json", pa.string()),
                              ("hlc", hlc), ("client_id", pa.string())])
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(LANDING_NAMESPACE)
    for ident, data, schema in ((CELLS_MERGED, cells, cells_schema),
                                (ROWS_MERGED_IDENTIFIER, rows, rows_schema)):
        model = (catalog.load_table(ident) if catalog.table_exists(ident)
                 else catalog.create_table(ident, schema=schema))
        with model.transaction() as tx:
            arrow = pa.Table.from_pylist(data, schema=schema)
            if model.current_snapshot() is None:  # a new table: nothing to replace
                tx.append(arrow)
            else:
                tx.overwrite(arrow)
            if ident == ROWS_MERGED_IDENTIFIER:  # last: the checkpoint lane reads it first
                covered = json.dumps({"position": position, "held": held})
                tx.set_properties({COVERED_PROPERTY: covered})
    return True
