"""Which rows lifecycle tiering retires: by their last change in the lake (the greatest write or
DELETE clock of the merged row state), never by when a destination received them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from lakesync.destinations.base import cutoff_hlc
from lakesync.hlc import decode, encode
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.lifecycle import aged_rows
from lakesync.lakehouse.settings import LakeSettings

from .merged_rows import write_rows_merged

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def hlc(moment: datetime, counter: int = 0) -> int:
    return encode(int(moment.timestamp() * 1000), counter)


def test_the_cutoff_is_the_first_clock_of_the_instant() -> None:
    cut = cutoff_hlc(NOW)
    assert decode(cut) == (int(NOW.timestamp() * 1000), 0)
    assert hlc(NOW - timedelta(milliseconds=1), 65_535) < cut <= hlc(NOW)


def test_rows_whose_last_change_is_older_than_the_moment_are_aged(tmp_path: Path) -> None:
    settings = LakeSettings.from_env(tmp_path, env={})
    init_catalog_tables(settings)
    catalog = open_catalog(settings)
    cut = NOW - timedelta(days=30)  # a 30-day hot window
    assert aged_rows(catalog, "gw1", "todos", cut) == []  # no pipeline run yet
    old, recent = NOW - timedelta(days=40), NOW - timedelta(days=1)
    write_rows_merged(settings, [
        ("gw1", "todos", "old", hlc(old), None),
        ("gw1", "todos", "recent", hlc(recent), None),
        # written long ago, deleted recently: its last change is the tombstone
        ("gw1", "todos", "deleted-recently", hlc(old), hlc(recent)),
        # deleted long ago, revived recently
        ("gw1", "todos", "revived", hlc(recent), hlc(old)),
        ("gw1", "todos", "deleted-long-ago", None, hlc(old)),
        ("gw1", "todos", "edge", hlc(cut), None),  # exactly at the cutoff: not older
        ("gw1", "other", "old-elsewhere", hlc(old), None),
        ("gw2", "todos", "old-of-gw2", hlc(old), None),
    ])
    assert aged_rows(catalog, "gw1", "todos", cut) == ["deleted-long-ago", "old"]
    assert aged_rows(catalog, "gw1", "todos", NOW) == [
        "deleted-long-ago", "deleted-recently", "edge", "old", "recent", "revived"]
    assert aged_rows(catalog, "gw2", "todos", cut) == ["old-of-gw2"]
    assert aged_rows(catalog, "gw1", "missing", cut) == []


def test_a_tiering_mark_leaves_out_the_rows_it_covers(tmp_path: Path) -> None:
    """The last tiering (cutoff C, watermark W) evicted every row last changed before C at a
    position up to W: the next one names only rows changed since C, or shipped since W."""
    from lakesync.destinations.base import TieringMark

    settings = LakeSettings.from_env(tmp_path, env={})
    init_catalog_tables(settings)
    catalog = open_catalog(settings)
    older, old, recent = (NOW - timedelta(days=d) for d in (60, 40, 1))
    write_rows_merged(settings, [
        ("gw1", "todos", "covered", hlc(older), None),  # aged then, shipped by then: gone
        ("gw1", "todos", "aged-since", hlc(old), None),  # changed after the last cutoff
        ("gw1", "todos", "shipped-since", hlc(older), None),  # shipped after the last tiering
        ("gw1", "todos", "recent", hlc(recent), None),  # not aged at all
    ], ingest={"covered": 10, "aged-since": 10, "shipped-since": 25, "recent": 30})
    cut = NOW - timedelta(days=30)
    mark = TieringMark(cutoff=hlc(NOW - timedelta(days=50)), position=20)
    assert aged_rows(catalog, "gw1", "todos", cut) == ["aged-since", "covered", "shipped-since"]
    assert aged_rows(catalog, "gw1", "todos", cut, mark) == ["aged-since", "shipped-since"]
