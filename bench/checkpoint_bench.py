"""First sync of a fresh Python client through the checkpoint, to 1,000,000 rows and more.

A real ``python -m lakesync.api`` process on a PostgreSQL store serves a checkpoint of one table
(``todos``: owner, title, done). The checkpoint is written into the store chunk by chunk from
generated merged rows (:func:`lakesync.lakehouse.checkpoint_builder.write_checkpoint`, the lake
job's own writer, streaming: nothing holds all rows), so a million rows need no million pushes.
A fresh :class:`lakesync.client.LakeSyncClient` (SQLite replica on disk) in a *separate process*
then runs its first ``sync()``: the checkpoint stream, then a pull from its position. Printed:
wall time and rows/s of that ``sync()``, CPU seconds of client and gateway, the peak RSS of the
client process and of the gateway process, and the machine's load.

- ``--rows N``: the rows the client receives (default 100,000).
- ``--rules --total T``: the gateway has the rule ``owner = jwt:sub`` and holds T rows, N of
  them alice's, spread evenly among the others' (a chunk is about N/T alice's); the client is
  alice and must end with exactly her N rows (filtered at serve time).
- ``--members`` (with ``--rules``): the rule reads a membership table instead,
  ``owner in (select team from members where user_id = jwt:sub)``, with alice a member of her
  own team only (and 1,000 other memberships): the same rows, through a relation.
- ``--pull``: also push the rows over HTTP first and time a plain pull from ``since=0`` (no
  checkpoint), then build the checkpoint from the store's rows as the lake job does. Slow
  beyond 100,000 rows (every row is pushed).
- ``--py-spy DIR``: record the client and the gateway with py-spy while the client syncs
  (``DIR/client.txt``, ``DIR/gateway.txt``, collapsed stacks).

Measured 2026-12-02, ``--rows 50000 --rules --total 200000`` with and without ``--members``
(load average 11.6 and 22.8): gateway CPU 0.55 s and 0.70 s (1.27x), client CPU 0.79 s and
0.87 s, wall 3.1 s and 5.4 s (the load doubled), peak RSS alike.

Run from the repository root:
``.venv/bin/python -m bench.checkpoint_bench [--rows N] [--rules --total T [--members]]
[--pull]``.

Measured 2026-11-26 on the 2-core machine shared with seven other sessions, load average 15-26
(wall times there mostly measure the other processes; CPU seconds and RSS are the figures):

- 1,000,000 rows, no rules: client 20.6 s CPU (26.0 s before the encoding was rewritten), gateway
  2.0 s CPU, client peak RSS 109 MiB (110 before: already streaming), gateway peak RSS 234 MiB;
  wall 127 s at load 16.
- alice's 1,000,000 of 5,000,000 rows under ``owner = jwt:sub``: **28.2 s** wall at load 4.9
  (35,000 rows/s), client 18.2 s CPU, gateway 7.5 s CPU, client peak RSS 105 MiB, gateway
  233 MiB. In one pair of runs side by side (load 10-12) against the code before: wall 47.5 s
  vs 135.6 s, client 19.6 vs 26.5 s CPU, gateway 10.5 vs 36.8 s CPU. What changed: a checkpoint
  sends a row the client sees as its state alone (before, a view eviction too: two deltas per
  row to build, with a deltaId each, and to apply), reads the rows the client wrote once per
  stream when they are few (before, a PostgreSQL look-up per chunk of its 4,000,000 hidden
  rows), and reads chunks from PostgreSQL in the binary format (before, hex: twice the bytes).
  With the client's apply below as well: **22.7 s** wall at load 4.4 (44,000 rows/s), client
  18.0 s CPU, gateway 9.3 s CPU (tests ran on the machine meanwhile), client RSS 106 MiB.
- SQLite alone on this disk (the same two inserts per row, executemany, one transaction per 1,600
  rows, WAL): 82,000 rows/s at load 3.6, so 12 s of the no-rules target's 20 s.

The client's apply, cut further (row states stored in msgpack, a gateway delta's common case
decoded inline, one SQL converter per column, multi-row INSERTs of 100 rows), measured in one
run against the code before it:

- 1,000,000 rows, no rules, load 3.5-3.7: **wall 15.1 s** (66,000 rows/s) against 20.6 s, client
  12.3 s CPU against 17.2 s (0.72x); client peak RSS 109 MiB (the same), gateway CPU 1.5 s. An
  earlier run at load 12-15: client 13.2 s CPU against 18.8 s, wall 20.3 s against 45.3 s.
- alice's 200,000 of 1,000,000 rows under ``owner = jwt:sub``, load 5: client 4.6 s CPU against
  5.3 s (0.88x); wall 17.2 s against 15.2 s, bounded by the gateway (7.5 s and 7.0 s CPU).
- SQLite alone, the same two inserts per row for 200,000 rows: multi-row INSERTs with msgpack
  states 0.54 s CPU against 0.86 s with executemany (0.63x); a msgpack state is about 120 bytes
  against 185 of JSON, the replica file 40 MB against 63 MB.
- Top py-spy entries of the client after it (GIL-holding samples, 300,000 rows, no rules):
  ``_replica._insert_rows`` (binding the multi-row INSERTs) 12.1 %, the inline decode
  ``delta.read_trusted_json_delta`` with ``wsframes.delta_from_proto`` about 25 % (most of it
  protobuf field access), ``_schemas._shape`` 5.6 %, ``ReplicaRows._show`` 7 %,
  ``merge.encode_row_state_binary`` 3.3 %, ``RowState.visible`` 5 %; the rest under 2 % each.

Top py-spy entries of the client before that (self time, 300,000 rows, no rules; waiting
threads left out):
``ReplicaRows._save_state`` (the ``_ls_rows`` executemany) 9.7 %, ``ReplicaRows._show`` (the user
table's executemany) 9.0 %, ``delta._read_cells`` 7.0 %, ``ReplicaFile._tx`` (COMMIT) 4.3 %,
``wsframes.delta_from_proto`` 2.8 %, ``ReplicaRows._load`` 2.6 %, ``delta.read_delta`` 1.9 %.
Before the changes the row changes built for watchers took 9 % and the rules' per-row
evaluation 80 % of serving under rules. The gateway, raw: idle in ``Condition.wait`` and psycopg
waits (serving a chunk is a msgpack decode and a join). The gateway's serving under rules
(cProfile of ``serve_chunk``, 200,000 rows, 1 in 5 visible): ``RowDelta.of_stored`` for the
evictions (their deltaIds) 39 %, the msgpack decode 9 %, ``rules.visible_among`` 5 %.
py-spy of the gateway process under rules (200,000 of 1,000,000 rows, load 6-10), after those
changes: threads waiting (``Condition.wait``, the executor's idle workers, psycopg's waits for
PostgreSQL) make most samples; of the rest the chunk's msgpack decode in ``serve_chunk`` 8.3 %
of all samples, uvicorn's ``RequestResponseCycle.send`` 4.5 %, ``rules.visible_among`` under
1 %. Before them the per-chunk ``rows_written_among`` look-up took 39.5 % (inclusive) and the
client waited in ``EpollSelector.select``; now the client bounds a first sync under rules as it
does without rules (its top entries: ``ReplicaFile._tx`` 4.5 %, ``ReplicaRows._show`` 2.4 %,
``ReplicaRows._save_state`` 2.0 %, ``delta._read_cells`` 3.1 %, thread hand-offs
``ThreadPoolExecutor.submit`` 5.6 % and ``_write_to_self`` 6.2 %).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec

from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.postgres import PostgresHotLog
from lakesync.lakehouse.checkpoint_builder import write_checkpoint
from lakesync.merge import Cell, RowState
from lakesync.views import RowKey, RowRecord
from tests.api.helpers import auth, now_hlc, token
from tests.conftest import PG_DSN, drop_pg_schema, fresh_pg_schema
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json

TODOS = {
    "table": "todos",
    "columns": [
        {"name": "owner", "type": "string"},
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
    ],
}
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

MEMBER_RULES = {
    "version": 1,
    "buckets": [
        {
            "name": "teams",
            "tables": ["todos"],
            "filters": [
                {
                    "column": "owner",
                    "op": "in",
                    "value": {
                        "table": "members",
                        "select": "team",
                        "where": [{"column": "user_id", "op": "eq", "value": "jwt:sub"}],
                    },
                }
            ],
        }
    ],
}


def members(url: str) -> None:
    """alice a member of her own team, and 1,000 others (pushed by an admin)."""
    pairs = [("alice", "alice")] + [(f"user{k}", "bob") for k in range(1_000)]
    deltas = [
        as_json(RowDelta.create("INSERT", "members", f"m{i}", "root",
                                {"user_id": user, "team": team}, now_hlc() + i))
        for i, (user, team) in enumerate(pairs)
    ]
    r = httpx.post(f"{url}/v1/sync/gw1/push", json={"clientId": "root", "deltas": deltas},
                   headers=auth(token("root", role="admin")), timeout=120)
    assert r.status_code == 200, r.text


def owner_of(i: int, visible: int, total: int) -> str:
    """Row ``i``'s owner: alice for ``visible`` of ``total`` rows, spread evenly."""
    return "alice" if (i * visible) // total != ((i + 1) * visible) // total else "bob"


def fill(url: str, n: int, owner: str = "alice", first: int = 0) -> None:
    """Push ``n`` rows of ``owner`` (ids from ``first``) as ``owner``, in batches of 2,000
    (under the 1 MiB body limit)."""
    headers = auth(token(owner)) | {"Content-Type": "application/json"}
    hlc = now_hlc()
    with httpx.Client(base_url=url, headers=headers, timeout=120) as c:
        for start in range(first, first + n, 2_000):
            deltas = [
                as_json(
                    RowDelta.create(
                        "INSERT",
                        "todos",
                        f"row-{i:08}",
                        owner,
                        {"owner": owner, "title": f"task {i}", "done": i % 2 == 0},
                        hlc + i,
                    )
                )
                for i in range(start, min(first + n, start + 2_000))
            ]
            r = c.post(
                "/v1/sync/gw1/push",
                content=msgspec.json.encode({"clientId": owner, "deltas": deltas}),
            )
            assert r.status_code == 200, r.text


def generated_rows(visible: int, total: int, hlc: int) -> Iterator[tuple[RowKey, RowRecord]]:
    """``total`` merged rows in ``(table, row_id)`` order as the lake's models give them,
    ``visible`` of them alice's; one at a time."""
    for i in range(total):
        owner = owner_of(i, visible, total)
        at = hlc + i
        cells = {
            "owner": Cell(owner, at, owner),
            "title": Cell(f"task {i}", at, owner),
            "done": Cell(i % 2 == 0, at, owner),
        }
        yield ("todos", f"row-{i:08}"), RowRecord(RowState(cells, (at, owner)), at)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has spent so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    """A live process's peak resident set (VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def client_main(url: str, path: str, n: int) -> None:
    """The client process: one first ``sync()``; prints its figures as JSON."""
    import resource

    from lakesync.client import LakeSyncClient

    with LakeSyncClient(
        path,
        url=url,
        gateway_id="gw1",
        token=token("alice"),
        schemas=[TODOS],
        pull_limit=10_000,
        timeout=600,
    ) as c:
        started, cpu = time.perf_counter(), time.process_time()
        c.sync()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        got = c.query("select count(*) as n from todos")[0]["n"]
        assert got == n, f"the replica holds {got} rows, not {n}"
        if n:
            mine = c.query("select count(*) as n from todos where owner = 'alice'")[0]["n"]
            assert mine == n, "the replica holds rows of another owner"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall": elapsed, "cpu": cpu, "rss": rss}))


def initial_sync(
    gw: ServerProcess, path: Path, n: int, spy: Path | None, label: str
) -> dict[str, float]:
    """A fresh client process's first ``sync()``: wall and CPU seconds and peak RSS of the
    client, CPU seconds of the gateway; the client checks it holds exactly alice's ``n`` rows."""
    assert gw.proc is not None
    cmd = [sys.executable, "-m", "bench.checkpoint_bench", "--client", gw.url, str(path), str(n)]
    spies = []
    if spy is not None:
        cmd = ["py-spy", "record", "-f", "raw", "-r", "50", "-o", str(spy / f"{label}-client.txt"),
               "--", *cmd]
        spies.append(
            subprocess.Popen(
                ["py-spy", "record", "-f", "raw", "-r", "50", "-p", str(gw.proc.pid),
                 "-o", str(spy / f"{label}-gateway.txt")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    gateway_cpu = cpu_seconds(gw.proc.pid)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    gateway_cpu = cpu_seconds(gw.proc.pid) - gateway_cpu
    for p in spies:
        p.send_signal(2)  # SIGINT: py-spy writes its file and exits
        p.wait(60)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    figures: dict[str, float] = json.loads(lines[-1])
    return figures | {"gateway_cpu": gateway_cpu}


def report(label: str, n: int, f: dict[str, float]) -> None:
    """One printed line per sync."""
    print(
        f"  {label} {f['wall']:7.2f} s  {n / f['wall']:10,.0f} rows/s  (CPU: client"
        f" {f['cpu']:.2f} s, gateway {f['gateway_cpu']:.2f} s; client peak RSS"
        f" {f['rss']:.0f} MiB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="rows the client receives")
    parser.add_argument("--total", type=int, help="rows on the gateway (with --rules)")
    parser.add_argument("--rules", action="store_true", help="owner = jwt:sub on the gateway")
    parser.add_argument("--members", action="store_true",
                        help="with --rules: the rule reads a membership table")
    parser.add_argument("--pull", action="store_true", help="also push the rows and pull from 0")
    parser.add_argument("--py-spy", type=Path, help="record client and gateway into this dir")
    parser.add_argument("--client", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(args.client[0], args.client[1], int(args.client[2]))
        return
    n = args.rows
    total = args.total or (n + n // 10 if args.rules else n)
    if total != n and not args.rules:
        parser.error("--total > --rows needs --rules (without rules the client gets every row)")
    if args.members and not args.rules:
        parser.error("--members needs --rules")
    schema = fresh_pg_schema()
    env = {
        "LAKESYNC_STORE_URL": PG_DSN,
        "LAKESYNC_PG_SCHEMA": schema,
        "LAKESYNC_RATE_LIMIT": "0",
        "LAKESYNC_FLUSH_INTERVAL": "0",
    }
    store = PostgresHotLog(PG_DSN, HLC(), schema=schema)
    pull = None
    try:
        with tempfile.TemporaryDirectory() as tmp, ServerProcess(Path(tmp) / "gw", env) as gw:
            admin = auth(token("root", role="admin"))
            if args.rules:
                assert httpx.post(
                    f"{gw.url}/v1/admin/sync-rules/gw1",
                    json=MEMBER_RULES if args.members else RULES,
                    headers=admin,
                ).is_success
            if args.members:
                members(gw.url)
            if args.pull:
                fill(gw.url, n)
                if total > n:
                    fill(gw.url, total - n, "bob", first=n)
                pull = initial_sync(gw, Path(tmp) / "pull.db", n, args.py_spy, "pull")
                page = store.read_all_rows("gw1")
                position, rows = page.head, iter(sorted(page.rows.items()))
            else:
                position, rows = now_hlc(), generated_rows(n, total, now_hlc(-60_000))
            started = time.perf_counter()
            built = write_checkpoint(store, "gw1", position, rows)
            build_s = time.perf_counter() - started
            assert built is not None
            checkpoint = initial_sync(gw, Path(tmp) / "cp.db", n, args.py_spy, "checkpoint")
            assert gw.proc is not None
            gateway_rss = peak_rss_mib(gw.proc.pid)
    finally:
        store.close()
        drop_pg_schema(schema)
    rule = "owner in (her teams' members)" if args.members else "owner = jwt:sub"
    mode = f"rule {rule}, alice's {n:,} of {total:,} rows" if args.rules else "no rules"
    print(f"first sync of {n:,} rows ({mode}; PostgreSQL store; replica on disk)")
    if pull is not None:
        report("plain pull from 0     ", n, pull)
    report("through the checkpoint", n, checkpoint)
    print(f"  gateway peak RSS {gateway_rss:.0f} MiB (whole run)")
    print(
        f"  checkpoint: {built.rows:,} rows in {built.chunks:,} chunks, staged in {build_s:.1f} s"
    )
    print(f"  load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
