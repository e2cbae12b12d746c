"""First sync of a fresh client under sync rules, as the gateway grows (plain pulls, no
checkpoint).

A gateway with the rule ``owner = jwt:sub`` holds one user's rows (``--rows``, default 100) among
N rows in all (``--sizes``, default 1,000, 10,000 and 100,000). For each size, a fresh client of
that user pulls from ``since=0`` over HTTP against a real ``python -m lakesync.api`` process
(durable SQLite store) and we print the deltas and bytes it received, the wall time of its first
sync (median of ``--repeat``) and its rows/s; at the end the gateway's peak RSS. The deltas and
bytes must not grow with N: the client receives exactly its view. A client of a user who owns
nothing is measured too (it must receive nothing). The million-row first syncs, through the
checkpoint, are :mod:`bench.checkpoint_bench` (``--rows 1000000 --rules --total 5000000``).

Run from the repository root:
``.venv/bin/python -m bench.rules_first_sync_bench [--sizes ...] [--rows N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import msgspec

from bench.checkpoint_bench import peak_rss_mib
from lakesync.delta import RowDelta
from tests.api.helpers import auth, now_hlc, token
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json

RULES = {
    "version": 1,
    "buckets": [
        {
            "name": "mine",
            "tables": ["todos"],
            "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}],
        }
    ],
}


def fill(url: str, gw: str, owner: str, n: int) -> None:
    """Push ``n`` rows owned by ``owner`` in batches of 2,000 (under the 1 MiB body limit)."""
    headers = auth(token(owner, gw)) | {"Content-Type": "application/json"}
    hlc = now_hlc()
    with httpx.Client(base_url=url, headers=headers, timeout=120) as c:
        for start in range(0, n, 2_000):
            deltas = [
                as_json(
                    RowDelta.create(
                        "INSERT",
                        "todos",
                        f"{owner}-{i}@example.com",
                        owner,
                        {"owner": owner, "title": f"task {i}", "done": False},
                        hlc + i,
                    )
                )
                for i in range(start, min(n, start + 2_000))
            ]
            body = msgspec.json.encode({"clientId": owner, "deltas": deltas})
            r = c.post(f"/v1/sync/{gw}/push", content=body)
            assert r.status_code == 200, r.text


def first_sync(url: str, gw: str, sub: str) -> tuple[int, int, float]:
    """A fresh client's pull from 0 until done: (deltas, bytes, seconds)."""
    started = time.perf_counter()
    deltas = size = 0
    since = 0
    with httpx.Client(base_url=url, headers=auth(token(sub, gw)), timeout=120) as c:
        while True:
            r = c.get(
                f"/v1/sync/{gw}/pull", params={"since": since, "clientId": sub, "limit": 10_000}
            )
            assert r.status_code == 200, r.text
            size += len(r.content)
            body = msgspec.json.decode(r.content)
            deltas += len(body["deltas"])
            since = int(body["serverHlc"])
            if not body["hasMore"]:
                return deltas, size, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rows", type=int, default=100, help="the user's rows in each gateway")
    args = parser.parse_args()
    visible = args.rows
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        env = {"LAKESYNC_RATE_LIMIT": "0", "LAKESYNC_BACKPRESSURE_BYTES": "0"}
        with ServerProcess(data, env) as server:
            print(
                f"{'gateway rows':>12} {'user':>6} {'deltas':>7} {'bytes':>8} "
                f"{'first sync p50':>15} {'rows/s':>10}"
            )
            for n in args.sizes:
                gw = f"bench{n}"
                r = httpx.post(
                    f"{server.url}/v1/admin/sync-rules/{gw}",
                    json=RULES,
                    headers=auth(token("ops", gw, "admin")),
                )
                assert r.status_code == 200, r.text
                fill(server.url, gw, "others", n - visible)
                fill(server.url, gw, "alice", visible)
                for sub in ("alice", "carol"):
                    runs = [first_sync(server.url, gw, sub) for _ in range(args.repeat)]
                    deltas, size, _ = runs[0]
                    p50 = statistics.median(t for _, _, t in runs)
                    print(
                        f"{n:>12,} {sub:>6} {deltas:>7,} {size:>8,} {p50 * 1000:>12.1f} ms"
                        f" {(visible if sub == 'alice' else 0) / p50:>10,.0f}"
                    )
            assert server.proc is not None
            print(f"gateway peak RSS {peak_rss_mib(server.proc.pid):.0f} MiB")


if __name__ == "__main__":
    main()
