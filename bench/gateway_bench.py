"""Gateway benchmarks on loopback against a real ``python -m lakesync.api`` process (durable store).

- push throughput: batches of 100 deltas, 1 and 8 concurrent clients, and (``--log-size``)
  one client's rate as the log grows;
- pull latency: one page of 1,000 deltas, without and with sync rules;
- push-to-broadcast latency with 100 connected WebSocket clients.

Run from the repository root:
``.venv/bin/python -m bench.gateway_bench [--batches 200] [--log-size 1000000]``.
Prints one line per figure.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

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


async def push_throughput(url: str, clients: int, batches: int) -> tuple[float, float]:
    """Batches per second and deltas per second with ``clients`` concurrent pushers sending
    ``batches`` batches in all (bodies are built before the clock starts)."""
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

    async def pusher(n: int) -> None:
        headers = auth(token(f"p{clients}-{n}")) | {"Content-Type": "application/json"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as c:
            for body in bodies[n]:
                r = await c.post("/v1/sync/gw1/push", content=body)
                assert r.status_code == 200, r.text

    started = time.perf_counter()
    await asyncio.gather(*(pusher(n) for n in range(clients)))
    elapsed = time.perf_counter() - started
    done = per_client * clients
    return done / elapsed, done * 100 / elapsed


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


async def main(batches: int, store: str, log_size: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        kind = store.partition(":")[0]
        schema = f"lakesync_bench_{uuid.uuid4().hex[:8]}"
        env = {"LAKESYNC_WS_RATE_LIMIT": "0", "LAKESYNC_STORE_URL": store}
        if kind != "sqlite":
            env["LAKESYNC_PG_SCHEMA"] = schema
        server = ServerProcess(Path(tmp) / "data", env).start()
        try:
            for clients in (1, 8):
                bps, dps = await push_throughput(server.url, clients, batches)
                print(
                    f"push throughput, {clients} client(s), batches of 100: "
                    f"{bps:.0f} batches/s = {dps:.0f} deltas/s (durable, {kind})"
                )
            if log_size:
                rates = await push_growth(server.url, log_size, 10)
                print(
                    f"push throughput as the log grows to {log_size:,} deltas, 1 client, "
                    f"per tenth: {', '.join(f'{r:.0f}' for r in rates)} deltas/s ({kind})"
                )
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
    args = parser.parse_args()
    asyncio.run(main(args.batches, args.store, args.log_size))
