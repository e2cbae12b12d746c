"""A file-backed hot log for tests: the flusher's source protocol over a JSON-lines file.

File-backed so a child process (the one we SIGKILL) and the test read the same log. The gateway's
real hot log lives in ``api/store``; the flusher only needs ``read_log``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from lakesync.delta import RowDelta
from tests.wire_json import as_json, verified


class JsonlHotLog:
    """Entries ``(ingest_hlc, gateway_id, delta)`` stored one JSON object per line, in order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.marks = path.with_suffix(".marks")

    def append(self, entries: Iterable[tuple[int, str, RowDelta]]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            for pos, gw, delta in entries:
                f.write(json.dumps({"pos": pos, "gw": gw, "delta": as_json(delta)}) + "\n")

    def read_log(
        self, after: int, limit: int, gateway_id: str | None = None
    ) -> list[tuple[int, str, RowDelta]]:
        out: list[tuple[int, str, RowDelta]] = []
        if not self.path.exists():
            return out
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                obj = json.loads(line)
                if obj["pos"] > after and gateway_id in (None, obj["gw"]):
                    out.append((obj["pos"], obj["gw"], verified(obj["delta"])))
                    if len(out) >= limit:
                        break
        return out

    def mark_flushed(self, position: int) -> None:
        with self.marks.open("a", encoding="utf-8") as f:
            f.write(f"{position}\n")

    def marked(self) -> list[int]:
        if not self.marks.exists():
            return []
        return [int(x) for x in self.marks.read_text().split()]
