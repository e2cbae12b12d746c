"""The lake's position: what the merged models are complete through.

The pipeline records two table properties on ``int_rows_merged`` after each run: the landing
snapshot it started from (:data:`CONSUMED_PROPERTY`, so the next run knows whether rows landed
late behind the models) and, when every table built, the landing state it covered
(:data:`COVERED_PROPERTY`). The covered position is what a gateway's checkpoint records
(:mod:`lakesync.lakehouse.checkpoint_builder`) and where fresh reads
(:mod:`lakesync.lakehouse.fresh`) start adding the deltas the models do not hold yet.
"""

from __future__ import annotations

import json
from typing import Any

# COVERED_PROPERTY is the catalog's (one definition); the runner and readers use it from here.
from lakesync.lakehouse.catalog import (
    COVERED_PROPERTY,
    landing_state,
    late_landing_sequence,
    open_catalog,
)
from lakesync.lakehouse.settings import LANDING_NAMESPACE, LakeSettings

__all__ = [
    "CONSUMED_PROPERTY",
    "COVERED_PROPERTY",
    "covered_by",
    "covered_positions",
    "landing_sequence",
    "mark_consumed",
]


CONSUMED_PROPERTY = "lakesync.landing-sequence"
"""Table property of ``int_rows_merged``: the sequence number of the landing snapshot the last
pipeline run started from (every landing commit up to it was read by the models)."""


def landing_sequence(settings: LakeSettings) -> tuple[int, bool, str | None]:
    """The landing table's current snapshot sequence number, whether a commit after the one
    the models last started from landed rows late (a held-back gateway that caught up: rows
    behind the models' ingest watermark, which only a full rebuild takes in), and the landing
    state of that snapshot as :data:`COVERED_PROPERTY` records it (None before any flush)."""
    catalog = open_catalog(settings)
    landing = catalog.load_table(f"{LANDING_NAMESPACE}.landing")
    current = landing.current_snapshot()
    seq = 0 if current is None else int(current.sequence_number or 0)
    position, held = landing_state(landing)
    covered = None if position is None else json.dumps({"position": position, "held": held})
    merged = f"{LANDING_NAMESPACE}.int_rows_merged"
    if not catalog.table_exists(merged):
        return seq, False, covered
    consumed = int(catalog.load_table(merged).properties.get(CONSUMED_PROPERTY, "-1"))
    return seq, late_landing_sequence(landing) > consumed, covered


def mark_consumed(settings: LakeSettings, seq: int, covered: str | None) -> None:
    """Record on ``int_rows_merged`` that a run started from landing snapshot ``seq`` and, when
    ``covered`` (:func:`landing_sequence`'s) is given, that the models are complete through it."""
    catalog = open_catalog(settings)
    table = catalog.load_table(f"{LANDING_NAMESPACE}.int_rows_merged")
    props = {CONSUMED_PROPERTY: str(seq)}
    if covered is not None:
        props[COVERED_PROPERTY] = covered
    with table.transaction() as tx:
        tx.set_properties(props)


def covered_positions(catalog: Any) -> tuple[int, dict[str, int]] | None:
    """The position the last pipeline run is complete through and, for the gateways held back
    then, their own (None before a run recorded it)."""
    ident = f"{LANDING_NAMESPACE}.int_rows_merged"
    if not catalog.table_exists(ident):
        return None
    return covered_by(catalog.load_table(ident))


def covered_by(merged_rows: Any) -> tuple[int, dict[str, int]] | None:
    """:func:`covered_positions` as recorded in ``merged_rows`` (``int_rows_merged`` as some
    reader loaded it)."""
    raw = merged_rows.properties.get(COVERED_PROPERTY)
    if raw is None:
        return None
    covered = json.loads(raw)
    position, held = int(covered["position"]), covered.get("held", {})
    return position, {gw: int(p) for gw, p in held.items()}
