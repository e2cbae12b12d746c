"""Push → broadcast latency with many WebSocket clients on one gateway process.

A real ``python -m lakesync.api`` process (durable SQLite store) on loopback, sync rules
``team = jwt:team``, ``--clients`` WebSocket clients (default 10,000) whose tokens spread over
``--views`` teams (default 1,000 distinct views, so each push reaches ``clients / views``
receivers). The clients are raw ``websockets`` connections speaking lakesync's binary protocol
(docs/protocol.md §9), spread over ``--workers`` processes; one admin client pushes one-row
batches (``0x01`` SyncPush) over its own WebSocket at ``--rate`` pushes per second for
``--seconds``, each to a random team. The first client of every view is sampled: it decodes
its broadcasts and stamps their arrival (``time.perf_counter``, one clock for all processes).
Latency is from the push's acknowledgement (its reply frame) to the frame's receipt, and from
the push's send. The gateway's RSS (now and peak), each side's CPU time and the machine's load
are printed. Then ``--all-pushes`` pushes to a table every view sees (a broadcast to every
client: the cost of sending one frame to all). Everything is bounded in time and stops itself.

Run from the repository root (the fd limit is raised to the hard limit, at least 2 per client
is needed across the processes):
``.venv/bin/python -m bench.broadcast_bench [--clients 10000] [--views 1000] [--profile]``.
``--profile`` samples the gateway with py-spy during the push phase and prints its top
functions by own time.

Measured 2026-11-26 on the 2-core development machine while seven other engineers' jobs ran
(load average 17-26 on 2 cores, so every figure includes waiting for a core), 10,000 clients,
1,000 views, 20 pushes/s for 20 s, defaults:

- connect 10,000 clients: 43-61 s (4 client processes; each handshake records the client's
  claims in the store); gateway RSS 230 MiB idle → 575 MiB (35 KiB per connection), peak
  585-587 MiB after the run (target ≤ 1.5 GiB);
- push → broadcast at the sampled receivers (two runs), from the push's acknowledgement (the
  reply is queued after the broadcast, so most are negative): p50 -0.3 ms, p99 9.2 and
  16.1 ms, max 11.8 and 86.4 ms; from the push's send (adds the durable push itself): p50 7.9
  and 6.2 ms, p99 132.5 and 120.4 ms, max 7.4 s (one push of 400 waited that long to be
  stored, the store and not the fan-out: its broadcast followed its ack within 12 ms) and
  376 ms (targets p50 ≤ 20 ms, p99 ≤ 100 ms: the p99 from the send is over, bound by the
  durable push on a machine with ten runnable jobs per core, the fan-out is not);
- the earlier code (a reader, a view and an encoding per connection; same bench, same
  load, a 10 s push phase): 200 pushes took 153 s instead of 10 (about 200 ms of gateway CPU
  per push), from the send p50 636 ms, p99 3.8 s, max 8.6 s; from the ack p99 92.6 ms;
- with views but before they were indexed by claim value (every view computed per push), from
  the ack p50 -0.4 ms, p99 13.7 ms; from the send p50 46.2 ms, p99 226.5 ms (gateway 24 % of
  a core);
- a broadcast to all 10,000 clients (a row every view sees): each frame is encoded once per
  view, but sent 10,000 times: 71-73 µs of gateway CPU per frame sent (uvicorn's WebSocket
  send and websockets' framing; keepalive pings included; 154 µs before), so 0.7 s
  per such broadcast; p99 0.3-1.2 s at the receivers;
- gateway CPU in the push phase 9-12 % of a core; the 4 client processes used 12-13 s of CPU
  over the run (most of it connecting).

py-spy (``--profile``, own time with the GIL held, push phase, after the view index): uvicorn's
``send_keepalive_ping`` 78.9 % (10,000 connections pinged every 20 s: 500 pings/s, each a
write to its socket, inflated by the machine's load), websockets ``Frame.parse`` 2.6 %,
``Frame.serialize`` 2.4 %, ``_Views.add`` 2.1 %, ``Runner.run`` 2.0 %, uvicorn's ``send``
1.1 %; before the index: ``Hub._readers`` 16.6 %, ``rules._resolve`` 9.2 %,
``send_keepalive_ping`` 8.8 %, uvicorn's ``send`` 8.1 %, ``rules.visible`` 7.5 %,
``_bucket_matches`` 6.8 % (the per-view pass over 1,000 views).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import random
import re
import resource
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

from lakesync.delta import RowDelta
from lakesync.tokens import mint_token
from lakesync.wire import FEATURES_HEADER, VIEW_EVICTIONS_FEATURE
from lakesync.wsframes import decode_server_frame, encode_push
from tests.api.helpers import SECRET, auth, now_hlc, token
from tests.gateway_process import ServerProcess

GW = "gwcast"
RULES = {
    "version": 1,
    "buckets": [
        {"name": "team", "tables": ["todos"],
         "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]},
        {"name": "news", "tables": ["news"]},
    ],
}


def _raise_fd_limit() -> int:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> tuple[float, float]:
    """Resident and peak resident MiB of a process (/proc)."""
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if ":" in line
    )
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


# -- the clients' processes --------------------------------------------------------------------


def _worker(ws_url: str, ids: list[int], views: int, pipe: Connection) -> None:
    """Hold the clients ``ids``; report when all are connected; on "stop", report the sampled
    arrivals ``(row_id, perf_counter)`` and this process's CPU seconds."""
    _raise_fd_limit()
    try:
        import uvloop  # a lighter load generator where it is installed

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_hold(ws_url, ids, views, pipe))


async def _hold(ws_url: str, ids: list[int], views: int, pipe: Connection) -> None:
    import websockets

    arrivals: list[tuple[str, float]] = []
    sockets: list[Any] = []
    gate = asyncio.Semaphore(100)  # handshakes in flight from this process
    failures = Counter[str]()

    async def open_one(i: int) -> None:
        tok = mint_token(SECRET, f"c{i}", GW, claims={"team": f"t{i % views}"}, ttl_s=7200)
        for attempt in range(20):
            async with gate:
                try:
                    ws = await websockets.connect(
                        f"{ws_url}/v1/sync/{GW}/ws?token={tok}",
                        additional_headers={FEATURES_HEADER: VIEW_EVICTIONS_FEATURE},
                        compression=None, max_size=None, ping_interval=None, open_timeout=60,
                    )
                except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
                    failures[type(exc).__name__] += 1
                    await asyncio.sleep(0.2 * (attempt + 1))
                    continue
            sockets.append(ws)
            asyncio.get_running_loop().create_task(listen(ws, sampled=i < views))
            return
        raise RuntimeError(f"client c{i} could not connect: {dict(failures)}")

    async def listen(ws: Any, sampled: bool) -> None:
        try:
            async for frame in ws:
                if sampled:
                    at = time.perf_counter()
                    for d in decode_server_frame(frame).deltas:
                        if d.client_id == "pusher":
                            arrivals.append((d.row_id, at))
        except websockets.ConnectionClosed as exc:
            failures[f"closed {exc.rcvd.code if exc.rcvd else None}"] += 1

    await asyncio.gather(*(open_one(i) for i in ids))
    pipe.send(("ready", len(sockets), dict(failures)))
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, pipe.recv)  # "stop"
    usage = resource.getrusage(resource.RUSAGE_SELF)
    pipe.send(("done", arrivals, usage.ru_utime + usage.ru_stime, dict(failures)))
    for ws in sockets:
        ws.transport.abort()  # no closing handshakes: the gateway just sees the sockets go


# -- the pusher ---------------------------------------------------------------------------------


async def _push_phase(
    ws_url: str, table: str, pushes: int, rate: float, views: int, seed: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Push ``pushes`` one-row batches at ``rate`` per second over one admin WebSocket: the
    send and acknowledgement times by row id."""
    import websockets

    rnd = random.Random(seed)
    sent: dict[str, float] = {}
    acked: dict[str, float] = {}
    tok = token("pusher", GW, "admin")
    async with websockets.connect(
        f"{ws_url}/v1/sync/{GW}/ws?token={tok}", compression=None, max_size=None
    ) as ws:
        start = time.perf_counter()
        for k in range(pushes):
            row = f"{table}-{seed}-{k}"
            values = {"title": f"push {k}", "team": f"t{rnd.randrange(views)}"}
            frame = encode_push(
                "pusher", [RowDelta.create("INSERT", table, row, "pusher", values, now_hlc())]
            )
            await asyncio.sleep(max(0.0, start + k / rate - time.perf_counter()))
            sent[row] = time.perf_counter()
            await ws.send(frame)
            reply = decode_server_frame(await ws.recv())  # type: ignore[arg-type]
            acked[row] = time.perf_counter()
            assert not reply.broadcast
    return sent, acked


def _percentiles(values: list[float]) -> str:
    if not values:
        return "no samples"
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return (
        f"p50 {statistics.median(values):.1f} ms, p99 {p99:.1f} ms, max {values[-1]:.1f} ms"
        f" ({len(values)} samples)"
    )


def _profile(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["py-spy", "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "200",
         "-f", "raw", "-o", str(out), "--nonblocking", "--gil"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def _top_functions(raw: Path, n: int = 12) -> list[tuple[str, float]]:
    """Own-time shares of the most sampled functions in py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        leaf = stack.split(";")[-1]
        own[re.sub(r":\d+\)$", ")", leaf)] += int(count)  # per function, not per line
        total += int(count)
    return [(f, c / total) for f, c in own.most_common(n)] if total else []


def main(args: argparse.Namespace) -> None:
    hard = _raise_fd_limit()
    if hard < args.clients + 1000:  # the gateway holds one fd per client
        print(f"warning: fd hard limit {hard} is low for {args.clients} clients")
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "LAKESYNC_WS_RATE_LIMIT": "0",
            "LAKESYNC_WS_MAX_CONNECTIONS": "0",
            "LAKESYNC_WS_MAX_CONNECTIONS_PER_GATEWAY": "0",
            "LAKESYNC_FLUSH_INTERVAL": "0",
        }
        server = ServerProcess(Path(tmp) / "data", env).start()
        pid = server.proc.pid  # type: ignore[union-attr]
        ctx = mp.get_context("spawn")
        workers: list[tuple[Any, Connection]] = []
        try:
            r = httpx.post(f"{server.url}/v1/admin/sync-rules/{GW}", json=RULES,
                           headers=auth(token("root", GW, "admin")))
            assert r.status_code == 200, r.text
            idle_rss, _ = _rss_mib(pid)
            t0 = time.perf_counter()
            for w in range(args.workers):
                ours, theirs = ctx.Pipe()
                ids = list(range(w, args.clients, args.workers))
                proc = ctx.Process(target=_worker, args=(server.ws_url, ids, args.views, theirs))
                proc.start()
                workers.append((proc, ours))
            connected, failures = 0, Counter[str]()
            for _, pipe in workers:
                if not pipe.poll(args.connect_timeout):
                    raise RuntimeError("a client process did not connect its clients in time")
                _, n, failed = pipe.recv()
                connected += n
                failures.update(failed)
            took = time.perf_counter() - t0
            rss, _ = _rss_mib(pid)
            print(
                f"connected {connected:,} WebSocket clients in {took:.1f} s ({args.views:,} "
                f"views, {args.workers} client processes; retries {dict(failures) or 'none'}); "
                f"gateway RSS {idle_rss:.0f} MiB idle → {rss:.0f} MiB "
                f"({(rss - idle_rss) * 1024 / max(connected, 1):.1f} KiB per connection)"
            )
            time.sleep(1.0)
            pushes = int(args.rate * args.seconds)
            cpu0, wall0, load0 = _cpu_seconds(pid), time.perf_counter(), os.getloadavg()
            spy = _profile(pid, args.seconds, Path(tmp) / "spy.txt") if args.profile else None
            sent, acked = asyncio.run(
                _push_phase(server.ws_url, "todos", pushes, args.rate, args.views, 1)
            )
            phase = time.perf_counter() - wall0
            gateway_cpu = _cpu_seconds(pid) - cpu0
            time.sleep(2.0)  # the last broadcasts land
            all_acked: dict[str, float] = {}
            all_cpu = 0.0
            if args.all_pushes:
                cpu1 = _cpu_seconds(pid)
                _, all_acked = asyncio.run(
                    _push_phase(server.ws_url, "news", args.all_pushes, 1.0, args.views, 2)
                )
                time.sleep(5.0)
                all_cpu = _cpu_seconds(pid) - cpu1
            arrivals: list[tuple[str, float]] = []
            client_cpu = 0.0
            for _, pipe in workers:
                pipe.send("stop")
            for _, pipe in workers:
                if pipe.poll(60):
                    _, got, cpu, failed = pipe.recv()
                    arrivals.extend(got)
                    client_cpu += cpu
                    failures.update(failed)
            rss, peak = _rss_mib(pid)
            views_lat = [(at - acked[r]) * 1000 for r, at in arrivals if r in acked]
            views_sent = [(at - sent[r]) * 1000 for r, at in arrivals if r in sent]
            print(
                f"push → broadcast, {connected:,} clients, {args.views:,} views, {pushes} pushes "
                f"at {args.rate:g}/s, one sampled receiver per push ({len(views_lat)} of "
                f"{pushes} heard):\n  from the push's ack: {_percentiles(views_lat)}\n"
                f"  from the push's send: {_percentiles(views_sent)}"
            )
            if args.all_pushes:
                everyone = [(at - all_acked[r]) * 1000 for r, at in arrivals if r in all_acked]
                print(
                    f"push → broadcast to every client ({args.all_pushes} pushes, each heard by "
                    f"{args.views:,} sampled receivers of {connected:,}): from the ack: "
                    f"{_percentiles(everyone)}; gateway CPU {all_cpu:.1f} s = "
                    f"{all_cpu * 1e6 / (args.all_pushes * connected):.0f} µs per frame sent "
                    f"(keepalive pings included)"
                )
            print(
                f"gateway RSS {rss:.0f} MiB (peak {peak:.0f} MiB); gateway CPU in the push "
                f"phase {gateway_cpu:.1f} s of {phase:.1f} s ({gateway_cpu / phase:.0%} of a "
                f"core); the client processes' CPU over the run {client_cpu:.1f} s; load average "
                f"{load0[0]:.2f} before → {os.getloadavg()[0]:.2f} after on {os.cpu_count()} "
                f"cores; client closes: {dict(failures) or 'none'}"
            )
            if spy is not None:
                spy.wait(args.seconds + 30)
                print("gateway py-spy, own time during the push phase:")
                for fn, share in _top_functions(Path(tmp) / "spy.txt"):
                    print(f"  {share:6.1%}  {fn}")
        finally:
            for proc, _ in workers:
                proc.join(10)
                if proc.is_alive():
                    proc.kill()
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--views", type=int, default=1_000)
    parser.add_argument("--workers", type=int, default=4, help="client processes")
    parser.add_argument("--rate", type=float, default=20.0, help="pushes per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the push phase")
    parser.add_argument("--all-pushes", type=int, default=5,
                        help="then this many pushes every client receives (0: none)")
    parser.add_argument("--connect-timeout", type=float, default=600.0)
    parser.add_argument("--profile", action="store_true", help="py-spy the gateway")
    main(parser.parse_args())
