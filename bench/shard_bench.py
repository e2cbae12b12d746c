"""Acknowledged deltas/s of two gateway processes on one PostgreSQL store against two processes
serving two stores (``shards:``: table ``events`` in a second database), in one run.

Each configuration gets fresh databases on the test server (``LAKESYNC_TEST_PG_DSN``) and the
same load: ``--clients`` concurrent clients, half of them pushing to ``todos`` and half to
``events``, spread over the two processes, each pushing batches of ``--batch`` deltas over a
kept-alive connection for ``--seconds``. Prints one line per configuration, the ratio, then the
load average (a shared machine's load moves every figure).

Run from the repository root:
``.venv/bin/python -m bench.shard_bench [--seconds 15] [--clients 8] [--batch 20]``.

Measured 2026-12-02 on the shared 2-core machine at a load average of 17-27 (other engineers'
tests), 12 s, 8 clients, batches of 20: one store 663 deltas/s, two stores 1,236 deltas/s
(ratio 1.86). Each push to a sharded deployment also reads both stores' heads and raises the
floor of the store behind (shared by concurrent callers), which the second store's own write
lock more than pays for when pushes are spread over both.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

import httpx

from lakesync.delta import RowDelta
from tests.api.helpers import auth, now_hlc, token
from tests.conftest import drop_pg_database, fresh_pg_database
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json

GW = "bench"


def _load(servers: list[ServerProcess], clients: int, batch: int, seconds: float) -> float:
    """Acknowledged deltas/s of ``clients`` pushing for ``seconds``."""
    acked = [0] * clients
    stop = time.monotonic() + seconds

    def client(n: int) -> None:
        sub = f"c{n}"
        table = ("todos", "events")[n % 2]
        server = servers[(n // 2) % len(servers)]
        with httpx.Client(base_url=server.url, headers=auth(token(sub, GW)), timeout=120) as http:
            i = 0
            while time.monotonic() < stop:
                hlc = now_hlc()
                deltas = [
                    as_json(RowDelta.create("INSERT", table, f"{sub}-{i}-{k}", sub, {"k": k}, hlc))
                    for k in range(batch)
                ]
                r = http.post(f"/v1/sync/{GW}/push", json={"clientId": sub, "deltas": deltas})
                if r.status_code == 200:
                    acked[n] += batch
                i += 1

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(acked) / (time.monotonic() - started)


def _run(config: str, root: Path, args: argparse.Namespace) -> float:
    path = root / f"{config.count('shards')}-lakesync.yaml"
    path.write_text(config)
    env = {"LAKESYNC_FLUSH_INTERVAL": "0"}
    servers = [ServerProcess(root / f"{path.stem}-{n}", env, path) for n in ("one", "two")]
    try:
        for s in servers:
            s.start()
        _load(servers, args.clients, args.batch, 2.0)  # warm up: tables and pools
        return _load(servers, args.clients, args.batch, args.seconds)
    finally:
        for s in servers:
            s.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--batch", type=int, default=20)
    args = parser.parse_args()
    urls = [fresh_pg_database(), fresh_pg_database(), fresh_pg_database()]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            one = _run(f"store_url: {urls[0]}\n", root, args)
            print(f"one store, two processes: {one:.0f} acknowledged deltas/s")
            two = _run(
                f"store_url: {urls[1]}\nshards:\n"
                f"  - {{name: events, store_url: '{urls[2]}', tables: [events]}}\n",
                root,
                args,
            )
            print(f"two stores (shards:), two processes: {two:.0f} acknowledged deltas/s")
            print(f"ratio two stores / one store: {two / one:.2f}")
    finally:
        for url in urls:
            drop_pg_database(url)
    print("load average: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
