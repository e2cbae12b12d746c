"""One library client of a chaos run, in its own process so the run can SIGKILL it mid-sync:
``python -m tests.chaos.client_worker SPEC_JSON``.

It writes its rows through :class:`lakesync.client.LakeSyncClient` (the replica file survives
a kill) and syncs after every few writes; when a sync fails it moves to the next gateway
process. Each local write that returned is logged as ``row_id v`` in the spec's ``log`` file,
so the run can check that no acknowledged write is lost: ``v`` only grows per row.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from lakesync.client import Backoff, LakeSyncClient

COLUMNS = [{"name": "team", "type": "string"}, {"name": "v", "type": "integer"},
           {"name": "title", "type": "string"}]
SCHEMAS = [{"table": "todos", "columns": COLUMNS}]
ROWS_PER_CLIENT = 20


def open_client(spec: dict[str, Any], url: str) -> LakeSyncClient:
    """The spec's replica, syncing with ``url``; few retries, so a dead process is left soon."""
    return LakeSyncClient(
        spec["replica"], url=url, gateway_id="gw1", token=spec["token"], schemas=SCHEMAS,
        transport=spec["transport"], timeout=5.0, backoff=Backoff(base=0.1, cap=1.0,
                                                                   max_retries=2),
    )


def main(spec: dict[str, Any]) -> None:
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
