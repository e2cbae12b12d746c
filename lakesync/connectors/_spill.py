"""A set of row ids kept in a temporary SQLite file instead of memory, so a snapshot of a
whole table (a diff's "seen" ids) costs one chunk of memory at a time, whatever its size.

Used from the event loop: each call is a local read or write of at most a chunk of ids.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from types import TracebackType

from sqlglot import exp

from lakesync.sql_ast import col, marks, table

__all__ = ["SpilledKeys"]

_BATCH = 500  # ids per IN (...) look-up: under SQLite's bound on variables


@lru_cache(maxsize=8)
def _select_in(n: int) -> str:
    """``SELECT id FROM keys WHERE id IN`` ``n`` parameters."""
    query = exp.select(col("id")).from_(table("keys")).where(col("id").isin(*marks(n)))
    return query.sql(dialect="sqlite")


class SpilledKeys:
    """Row ids on disk (a temporary directory removed by :meth:`close`)."""

    def __init__(self, cache_kib: int = 512) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="lakesync-keys-")
        self._db = sqlite3.connect(Path(self._dir.name) / "keys.sqlite3")
        # A scratch file: no journal, no fsync; SQLite's page cache is capped, the rest is disk.
        self._db.executescript(
            "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
            f"PRAGMA cache_size = -{cache_kib};"
            "CREATE TABLE keys (id TEXT PRIMARY KEY) WITHOUT ROWID;"
        )

    def add(self, ids: Iterable[str]) -> None:
        """Put ``ids`` in the set."""
        self._db.executemany("INSERT OR IGNORE INTO keys VALUES (?)", ((i,) for i in ids))

    def missing(self, ids: Sequence[str]) -> list[str]:
        """Those of ``ids`` not in the set, in their order."""
        found: set[str] = set()
        for i in range(0, len(ids), _BATCH):
            part = ids[i : i + _BATCH]
            rows = self._db.execute(_select_in(len(part)), part)
            found.update(r for (r,) in rows)
        return [i for i in ids if i not in found]

    def close(self) -> None:
        """Remove the file."""
        self._db.close()
        self._dir.cleanup()

    def __enter__(self) -> SpilledKeys:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
