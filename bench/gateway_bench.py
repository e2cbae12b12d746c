"""Gateway benchmarks on loopback against a real ``python -m lakesync.api`` process (durable store).

- push throughput: sequential batches of 100 deltas over a kept-alive connection per client
  (the standard library's HTTP client, whose cost stays small next to the gateway's), 1 and 8
  concurrent clients, with the gateway's CPU per batch; and (``--log-size``) one client's rate
  as the log grows;
- the physical limit of one sequential client, measured alone: a durable SQLite commit (WAL,
  ``synchronous=FULL``) of one page and of the 42 pages a push of 100 new rows writes;
- pull latency: one page of 1,000 deltas, without and with sync rules;
- push-to-broadcast latency with 100 connected WebSocket clients.

Run from the repository root:
``.venv/bin/python -m bench.gateway_bench [--batches 200] [--log-size 1000000] [--push-only]``.
Prints one line per figure, then the load average.

**The original TypeScript gateway is not run here**: no LakeSync TypeScript gateway package is in
``tests/js/node_modules`` (only the canonical-JSON oracle's dependency) and the npm registry has
none under ``@lakesync/gateway`` or ``lakesync``, so this bench prints no ratio against it.

Where a push's time goes (py-spy 0.4.3, ``record --threads``, 1 client, flusher off,
SQLite store), after the changes of that issue. CPU per batch of 100 by thread
(``/proc/<pid>/task``): writer 2.4-2.8 ms (before: 2.5-2.7), event loop 1.6-2.2 ms (before:
2.1-2.6), worker and checkpointer ~0.2 ms each.

- event loop: reading the deltas 22% (shape checks 7%, deltaIds 7%; before: 15% of the GIL
  samples with the deltaIds' text joins, and verifying the JWT 5%, now remembered per token),
  Litestar's parameters and body 8%, the response 7%, the access log line 6%, the hand-off to a
  worker thread (anyio) 5%, decoding the body (msgspec) 4%;
- writer: the append 31% of its samples (the log rows' INSERT 9%, the row states' upsert 7%, the
  rows read 4% (before: one SELECT per row), the merge 3%), the COMMIT's WAL fsync 19%, the rest
  waiting for work.

Measured 2026-11-26 on the shared 2-core machine at a load average of 15-26 (seven other
engineers' tests and benches): 1 client 32-59 batches/s before and 32-54 after (the wall-clock
rates follow the load, not the code), 8 clients 21-50 batches/s; the 42-page durable commit alone
took 7.5-8.1 ms (at most 125-133 batches/s), the one-page commit 0.1-5 ms. At that load one
sequential client is bound by the disk's fsync of what a push writes (~40% of its wall time)
and then by the gateway's CPU on its critical path (~4.4 ms: the event loop's, then the
writer's).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import msgspec
import psycopg
import websockets
from psycopg import sql

from lakesync.delta import RowDelta
from lakesync.wsframes import decode_server_frame
from tests.api.helpers import auth, now_hlc, token
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json

OWNER_RULES = {
    "version": 1,
    "buckets": [{"name": "mine", "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}]}],
}


def batch(client: str, n: int, start: int, owner: str | None = None) -> list[dict[str, object]]:
    hlc = now_hlc()
    return [
        as_json(
            RowDelta.create(
                "INSERT",
                "todos",
                f"{client}-{start + i}",
                client,
                {"title": f"task {start + i}", "done": False, "owner": owner or client},
                hlc + i,
            )
        )
        for i in range(n)
    ]


def _post_all(url: str, path: str, headers: dict[str, str], bodies: list[bytes]) -> None:
    """POST each body in turn over one kept-alive connection (the standard library's client:
    its cost per request is small next to the gateway's, so the figure measures the gateway)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        for body in bodies:
            conn.request("POST", path, body=body, headers=headers)
            r = conn.getresponse()
            reply = r.read()
            assert r.status == 200, reply
    finally:
        conn.close()


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def push_throughput(
    url: str, clients: int, batches: int, pid: int | None = None
) -> tuple[float, float, float | None]:
    """Batches per second, deltas per second and (given the gateway's ``pid``) the gateway's
    CPU milliseconds per batch, with ``clients`` concurrent pushers sending ``batches`` batches
    in all, each over its own kept-alive connection (bodies are built before the clock
    starts)."""
    per_client = batches // clients
    bodies = {
        n: [
            msgspec.json.encode(
                {"clientId": f"p{clients}-{n}", "deltas": batch(f"p{clients}-{n}", 100, i * 100)}
            )
            for i in range(per_client)
        ]
        for n in range(clients)
    }

    def pusher(n: int) -> None:
        headers = auth(token(f"p{clients}-{n}")) | {"Content-Type": "application/json"}
        _post_all(url, "/v1/sync/gw1/push", headers, bodies[n])

    cpu = process_cpu_seconds(pid) if pid is not None else 0.0
    started = time.perf_counter()
    await asyncio.gather(*(asyncio.to_thread(pusher, n) for n in range(clients)))
    elapsed = time.perf_counter() - started
    done = per_client * clients
    cpu_ms = (process_cpu_seconds(pid) - cpu) * 1000 / done if pid is not None else None
    return done / elapsed, done * 100 / elapsed, cpu_ms


def durable_commit_ms(directory: Path, pages: int = 1, commits: int = 200) -> float:
    """Median milliseconds of a durable SQLite commit of ``pages`` 4 KiB pages on
    ``directory``'s disk, measured alone: WAL mode with ``synchronous=FULL`` and a checkpoint
    now and then, as the hot log commits (an empty transaction writes nothing and syncs
    nothing, so one page is the smallest). The WAL's fsync bounds one sequential client: at
    most ``1000 / ms`` batches per second whatever the gateway's CPU costs."""
    path = directory / f"commit-probe-{pages}.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
        times = []
        for i in range(commits):
            started = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            # A blob over a page spills into overflow pages: ``pages`` pages in all.
            conn.execute("INSERT INTO t (v) VALUES (?)", (os.urandom(4000 * pages - 100),))
            conn.execute("COMMIT")
            times.append(time.perf_counter() - started)
            if i % 50 == 49:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        return statistics.median(times) * 1000
    finally:
        conn.close()


async def push_growth(url: str, total: int, segments: int) -> list[float]:
    """Deltas per second of one client pushing ``total`` deltas (new rows, batches of 100), per
    each of ``segments`` equal parts: flat figures mean the cost of a push does not grow with
    the log (each part's bodies are built before its clock starts)."""
    headers = auth(token("grow", "gw_grow")) | {"Content-Type": "application/json"}
    per_segment = total // segments // 100
    rates = []
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as c:
        for s in range(segments):
            start = s * per_segment * 100
            bodies = [
                msgspec.json.encode(
                    {"clientId": "grow", "deltas": batch("grow", 100, start + i * 100)}
                )
                for i in range(per_segment)
            ]
            started = time.perf_counter()
            for body in bodies:
                r = await c.post("/v1/sync/gw_grow/push", content=body)
                assert r.status_code == 200, r.text
            rates.append(per_segment * 100 / (time.perf_counter() - started))
    return rates


async def pull_latency(url: str, gw: str, rules: bool) -> tuple[float, float, float]:
    """First, median and p95 milliseconds of pulling a 1,000-delta page (30 pulls)."""
    admin = auth(token("root", gw, "admin"))
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        if rules:
            r = await c.post(f"/v1/admin/sync-rules/{gw}", json=OWNER_RULES, headers=admin)
            assert r.status_code == 200, r.text
        for k in range(10):
            owner = "reader" if k % 2 == 0 else "someone"
            body = {"clientId": "root", "deltas": batch("root", 100, k * 100, owner)}
            r = await c.post(f"/v1/sync/{gw}/push", json=body, headers=admin)
            assert r.status_code == 200, r.text
        reader = auth(token("reader", gw))
        params = {"since": "0", "clientId": "reader", "limit": "1000"}
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            r = await c.get(f"/v1/sync/{gw}/pull", params=params, headers=reader)
            times.append((time.perf_counter() - t0) * 1000)
            assert r.status_code == 200 and r.json()["deltas"], r.text
    cold = times[0]
    times.sort()
    return cold, statistics.median(times), times[int(len(times) * 0.95) - 1]


async def broadcast_latency(
    ws_url: str, url: str, receivers: int
) -> tuple[float, float, float]:
    """Median, p99 and worst milliseconds from push sent to broadcast received, over all
    receivers of 10 pushes."""
    sockets = [
        await websockets.connect(f"{ws_url}/v1/sync/gw_ws/ws?token={token(f'r{i}', 'gw_ws')}")
        for i in range(receivers)
    ]
    await asyncio.sleep(0.5)
    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        for k in range(10):
            body = {"clientId": "w", "deltas": batch("w", 1, k)}
            t0 = time.perf_counter()
            push = asyncio.create_task(
                c.post("/v1/sync/gw_ws/push", json=body, headers=auth(token("w", "gw_ws")))
            )

            async def receive(sock: websockets.ClientConnection, started: float = t0) -> float:
                frame = decode_server_frame(await sock.recv())  # type: ignore[arg-type]
                assert frame.broadcast
                return (time.perf_counter() - started) * 1000

            latencies.extend(await asyncio.gather(*(receive(s) for s in sockets)))
            assert (await push).status_code == 200
    for s in sockets:
        await s.close()
    latencies.sort()
    return statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1], latencies[-1]


async def main(batches: int, store: str, log_size: int, push_only: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        kind = store.partition(":")[0]
        schema = f"lakesync_bench_{uuid.uuid4().hex[:8]}"
        env = {"LAKESYNC_WS_RATE_LIMIT": "0", "LAKESYNC_STORE_URL": store}
        if kind != "sqlite":
            env["LAKESYNC_PG_SCHEMA"] = schema
        server = ServerProcess(Path(tmp) / "data", env).start()
        try:
            assert server.proc is not None
            await push_throughput(server.url, 1, 20)  # warm up: imports, first statements
            for clients in (1, 8):
                bps, dps, cpu_ms = await push_throughput(
                    server.url, clients, batches, server.proc.pid
                )
                print(
                    f"push throughput, {clients} client(s), sequential batches of 100 over a "
                    f"kept-alive connection each: {bps:.0f} batches/s = {dps:.0f} deltas/s "
                    f"(durable, {kind}); gateway CPU {cpu_ms:.2f} ms per batch"
                )
            if kind == "sqlite":
                # A push of 100 new rows writes ~42 pages to the WAL (log, its indexes, the row
                # states); the smallest commit writes one.
                for pages in (1, 42):
                    ms = durable_commit_ms(Path(tmp), pages)
                    print(
                        f"physical limit, a durable SQLite commit of {pages} page(s) on this "
                        f"disk alone: {ms:.2f} ms = at most {1000 / ms:.0f} sequential batches/s"
                    )
            print(f"load average: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
            if log_size:
                rates = await push_growth(server.url, log_size, 10)
                print(
                    f"push throughput as the log grows to {log_size:,} deltas, 1 client, "
                    f"per tenth: {', '.join(f'{r:.0f}' for r in rates)} deltas/s ({kind})"
                )
            if push_only:
                return
            for gw, rules in (("gw_plain", False), ("gw_rules", True)):
                cold, p50, p95 = await pull_latency(server.url, gw, rules)
                label = "with rules (500 of 1,000 visible)" if rules else "without rules"
                print(
                    f"pull latency, 1,000-delta page, {label}: first {cold:.1f} ms, "
                    f"p50 {p50:.1f} ms, p95 {p95:.1f} ms"
                )
            p50, p99, worst = await broadcast_latency(server.ws_url, server.url, 100)
            print(
                f"push-to-broadcast latency, 100 WebSocket clients: p50 {p50:.1f} ms, "
                f"p99 {p99:.1f} ms, max {worst:.1f} ms"
            )
        finally:
            server.stop()
            if kind != "sqlite":
                with psycopg.connect(store, autocommit=True) as conn:
                    conn.execute(
                        sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=200, help="push batches per run")
    parser.add_argument(
        "--store", default="sqlite", help="sqlite (default) or a postgresql:// DSN (fresh schema)"
    )
    parser.add_argument(
        "--log-size",
        type=int,
        default=0,
        help="also push this many deltas with one client, printing the rate per tenth",
    )
    parser.add_argument(
        "--push-only", action="store_true", help="only the push figures and the physical limit"
    )
    args = parser.parse_args()
    asyncio.run(main(args.batches, args.store, args.log_size, args.push_only))
