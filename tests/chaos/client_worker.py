"""One library client of a chaos run, in its own process so the run can SIGKILL it mid-sync:
``python -m tests.chaos.client_worker SPEC_JSON``.

It writes its rows through :class:`lakesync.client.LakeSyncClient` (the replica file survives
a kill) and syncs after every few writes; when a sync fails it moves to the next gateway
process. Each local write that returned is logged as ``row_id v`` in the spec's ``log`` file,
so the run can check that no acknowledged write is lost: ``v`` only grows per row.

Its wall clock is off by the minutes the spec's ``clock`` file holds (0 or missing: right; the
run writes it for a ``client_skew`` fault): :func:`skewed_wall_clock` sets this process's
``time.time`` and ``time.time_ns`` that far off, as a device whose system clock is wrong, so the
library's hybrid logical clock (its physical part) reads the skewed time. The monotonic clock
(timeouts, backoff) stays right, as it does on such a device.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from lakesync.client import Backoff, LakeSyncClient

COLUMNS = [{"name": "team", "type": "string"}, {"name": "v", "type": "integer"},
           {"name": "title", "type": "string"}]
SCHEMAS = [{"table": "todos", "columns": COLUMNS}]
ROWS_PER_CLIENT = 20


def skewed_wall_clock(control: Path, poll_s: float = 0.2) -> None:
    """Set this process's wall clock off by the minutes ``control`` holds, read again every
    ``poll_s`` seconds by a daemon thread (so a skew starts and ends while the client runs)."""
    real_ns = time.time_ns
    offset_ns = [0]

    def read() -> None:
        try:
            minutes = int(control.read_text().strip() or "0")
        except (OSError, ValueError):
            minutes = 0
        offset_ns[0] = minutes * 60 * 10**9

    def poll() -> None:
        while True:
            time.sleep(poll_s)
            read()

    read()
    time.time_ns = lambda: real_ns() + offset_ns[0]
    time.time = lambda: time.time_ns() / 1e9
    threading.Thread(target=poll, daemon=True).start()


def open_client(spec: dict[str, Any], url: str) -> LakeSyncClient:
    """The spec's replica, syncing with ``url``; few retries, so a dead process is left soon."""
    return LakeSyncClient(
        spec["replica"], url=url, gateway_id="gw1", token=spec["token"], schemas=SCHEMAS,
        transport=spec["transport"], timeout=5.0, backoff=Backoff(base=0.1, cap=1.0,
                                                                   max_retries=2),
    )


def main(spec: dict[str, Any]) -> None:
    if spec.get("clock"):
        skewed_wall_clock(Path(spec["clock"]))
    urls: list[str] = spec["urls"]
    name, team = spec["name"], spec["team"]
    log = Path(spec["log"])
    start = sum(1 for _ in log.open()) if log.exists() else 0
    at = start % len(urls)
    client = open_client(spec, urls[at])
    with log.open("a") as out:
        for n in range(start, 10**9):
            row = f"{name}-{n % ROWS_PER_CLIENT}"
            client.upsert("todos", row, {"team": team, "v": n, "title": f"w{n}"})
            out.write(f"{row} {n}\n")
            out.flush()
            if n % 5 == 4:
                try:
                    client.sync()
                except Exception:  # any failure: try the next process
                    client.close()
                    at = (at + 1) % len(urls)
                    client = open_client(spec, urls[at])


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
