"""First sync of a fresh client under sync rules, as the gateway grows (plain pulls, no
checkpoint).

A gateway with the rule ``owner = jwt:sub`` holds one user's rows (``--rows``, default 100) among
N rows in all (``--sizes``, default 1,000, 10,000 and 100,000). For each size, a fresh client of
that user pulls from ``since=0`` over HTTP against a real ``python -m lakesync.api`` process
(durable SQLite store) and we print the deltas and bytes it received, the wall time of its first
sync (median of ``--repeat``) and its rows/s; at the end the gateway's peak RSS. The deltas and
bytes must not grow with N: the client receives exactly its view. A client of a user who owns
nothing is measured too (it must receive nothing).

``--relations``: each size runs twice, under the plain rule and under the relational rule ``list_id
in (select list_id from list_members where user_id = jwt:sub)`` on the same rows (the user's rows
in its own list, the others' spread over 100 lists, one membership per list and the user's), and
the last column is the relational first sync's time over the plain one's. The million-row first
syncs, through the
checkpoint, are :mod:`bench.checkpoint_bench` (``--rows 1000000 --rules --total 5000000``).

Measured 2026-12-02 with ``--relations --repeat 9`` on the 2-core machine shared with other
sessions (load average 12-16: the wall times are noisy), SQLite store, alice's 100 rows:
10,000 rows, plain 101.7 ms, relations 77.6 ms (0.76x); 100,000 rows, plain 52.8 ms,
relations 46.2 ms (0.87x); an earlier run at lower sizes ranged from 1.09x to 2.88x, with the
plain first sync of the same sizes varying 37-135 ms. Both receive the same 200 deltas.

Run from the repository root:
``.venv/bin/python -m bench.rules_first_sync_bench [--sizes ...] [--rows N] [--repeat R]
[--relations]``.
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
from tests.api.helpers import MEMBERS_RULES, auth, now_hlc, token
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


# The todos of every list the client is a member of (its memberships not synced themselves).
RELATIONAL_RULES = {"version": 1, "buckets": MEMBERS_RULES["buckets"][:1]}
LISTS = 100
"""The lists the other users' rows are spread over (``--relations``)."""


def members(url: str, gw: str) -> None:
    """One membership per list of the others, and the user's of its own list (the admin's)."""
    rows = [("others", f"list-{k}") for k in range(LISTS)] + [("alice", "list-alice")]
    deltas = [
        as_json(RowDelta.create("INSERT", "list_members", f"m{i}", "ops",
                                {"user_id": user, "list_id": list_id}, now_hlc() + i))
        for i, (user, list_id) in enumerate(rows)
    ]
    r = httpx.post(f"{url}/v1/sync/{gw}/push", json={"clientId": "ops", "deltas": deltas},
                   headers=auth(token("ops", gw, "admin")), timeout=120)
    assert r.status_code == 200, r.text


def fill(url: str, gw: str, owner: str, n: int) -> None:
    """Push ``n`` rows owned by ``owner`` (in its list, or one of :data:`LISTS`) in batches of
    2,000 (under the 1 MiB body limit)."""
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
                        {"owner": owner, "title": f"task {i}", "done": False,
                         "list_id": "list-alice" if owner == "alice" else f"list-{i % LISTS}"},
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
    parser.add_argument("--relations", action="store_true",
                        help="also under a membership subquery, and the ratio of the two")
    args = parser.parse_args()
    visible = args.rows
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        env = {"LAKESYNC_RATE_LIMIT": "0", "LAKESYNC_BACKPRESSURE_BYTES": "0"}
        with ServerProcess(data, env) as server:
            print(
                f"{'gateway rows':>12} {'rules':>9} {'user':>6} {'deltas':>7} {'bytes':>8} "
                f"{'first sync p50':>15} {'rows/s':>10} {'vs plain':>9}"
            )
            kinds = [("plain", RULES), ("relations", RELATIONAL_RULES)]
            for n in args.sizes:
                plain: dict[str, float] = {}
                for kind, rules in kinds if args.relations else kinds[:1]:
                    gw = f"bench{n}{kind}"
                    r = httpx.post(
                        f"{server.url}/v1/admin/sync-rules/{gw}",
                        json=rules,
                        headers=auth(token("ops", gw, "admin")),
                    )
                    assert r.status_code == 200, r.text
                    if kind == "relations":
                        members(server.url, gw)
                    fill(server.url, gw, "others", n - visible)
                    fill(server.url, gw, "alice", visible)
                    for sub in ("alice", "carol"):
                        runs = [first_sync(server.url, gw, sub) for _ in range(args.repeat)]
                        deltas, size, _ = runs[0]
                        p50 = statistics.median(t for _, _, t in runs)
                        plain.setdefault(sub, p50)
                        print(
                            f"{n:>12,} {kind:>9} {sub:>6} {deltas:>7,} {size:>8,}"
                            f" {p50 * 1000:>12.1f} ms"
                            f" {(visible if sub == 'alice' else 0) / p50:>10,.0f}"
                            f" {p50 / plain[sub]:>8.2f}x"
                        )
            assert server.proc is not None
            print(f"gateway peak RSS {peak_rss_mib(server.proc.pid):.0f} MiB")


if __name__ == "__main__":
    main()
