"""Shared lake fixtures: one bootstrapped data dir and one Spark session per test module.

A Spark session is bound to the catalog it was built with, and each dbt run costs seconds, so
Spark/dbt tests share a module-scoped lake and keep examples apart by gateway id.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lakehouse.bootstrap import bootstrap
from lakehouse.catalog import open_catalog
from lakehouse.landing import LandingFlusher
from lakehouse.settings import LakeSettings
from lakesync.delta import RowDelta

from .hotlog import JsonlHotLog


@dataclass
class Lake:
    """A bootstrapped lake with a hot log feeding its landing table."""

    settings: LakeSettings
    log: JsonlHotLog
    spark: Any
    positions: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def land(self, gateway_id: str, deltas: list[RowDelta]) -> None:
        """Append ``deltas`` to the hot log in the given order and flush them to landing."""
        self.log.append([(next(self.positions), gateway_id, d) for d in deltas])
        LandingFlusher(open_catalog(self.settings), self.log).flush()

    def rows(self, sql: str) -> list[dict[str, Any]]:
        return [r.asDict() for r in self.spark.sql(sql).collect()]


def make_lake(root: Path, env: dict[str, str] | None = None) -> Lake:
    from lakehouse.spark import spark_session

    settings = LakeSettings.from_env(root, env=env or {})
    bootstrap(settings)
    return Lake(settings, JsonlHotLog(root / "hotlog.jsonl"), spark_session(settings))


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    lk = make_lake(tmp_path_factory.mktemp("lake"))
    yield lk
    lk.spark.stop()
