"""``lakesync demo``: the main job end to end on the embedded default.

Starts a local gateway (``lakesync up`` in a subprocess, SQLite hot log under the data dir), has
two offline-first clients edit the same rows (different columns, same column, a delete), syncs
them until they converge, flushes the hot log into the Iceberg landing table, runs the dbt
pipeline on local Spark (:func:`lakesync.lakehouse.pipeline.run_and_ship`, as ``lakesync pipeline
run`` does; the demo declares no destinations) and prints the merged ``analytics.todos`` table
read back with DuckDB.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console
from rich.table import Table
from sqlglot import exp

from lakesync.cli.lake import DataDirOption
from lakesync.cli.output import plain, print_table
from lakesync.client import LakeSyncClient
from lakesync.config import load_config
from lakesync.errors import LakeSyncError
from lakesync.lakehouse.pipeline import NodeProgress, PipelineEvent, run_and_ship
from lakesync.lakehouse.process_env import free_loopback_port, stop_process
from lakesync.lakehouse.query import run_query
from lakesync.lakehouse.settings import LakeSettings
from lakesync.schema import parse_schema
from lakesync.sql_ast import col
from lakesync.sql_ast import table as sql_table
from lakesync.tokens import mint_token

__all__ = ["demo_command", "run_demo"]

GATEWAY = "demo"
TODOS: dict[str, Any] = {
    "table": "todos",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
        {"name": "owner", "type": "string"},
    ],
}


@contextmanager
def _gateway(data_dir: Path, config: Path, secret: str) -> Iterator[str]:
    """Run ``lakesync up`` in a subprocess until the block ends; yield its base URL."""
    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "LAKESYNC_JWT_SECRET": secret}
    log = (data_dir / "demo-gateway.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lakesync.cli.main",
            "up",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
            "--config",
            str(config),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise LakeSyncError(f"the gateway exited; see {log.name}")
            try:
                if httpx.get(f"{url}/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise LakeSyncError(f"the gateway did not become ready in 60 s; see {log.name}")
            time.sleep(0.2)
        yield url
    finally:
        stop_process(proc, timeout=30)
        log.close()


def _show(console: Console, title: str, rows: list[dict[str, Any]]) -> None:
    table = Table(title=title)
    columns = list(rows[0]) if rows else ["(no rows)"]
    for c in columns:
        table.add_column(plain(c))
    for r in rows:
        table.add_row(*(plain(r.get(c)) for c in columns))
    print_table(table, console)


def demo_command(data_dir: DataDirOption = None) -> None:
    """Run the main job end to end: gateway, two clients, landing, dbt on Spark, DuckDB query."""
    run_demo(data_dir or load_config().data_dir)


def run_demo(data_dir: Path) -> None:
    """Run the whole flow once under ``data_dir`` and print what each stage produced."""
    console = Console()
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = os.environ.get("LAKESYNC_JWT_SECRET") or secrets.token_hex(32)
    config = data_dir / "demo.yaml"
    config.write_text(yaml.safe_dump({"gateways": {GATEWAY: {"schemas": [TODOS]}}}))
    run_tag = secrets.token_hex(3)

    def token(sub: str, role: str = "client") -> str:
        return mint_token(secret, sub, GATEWAY, role=role)

    console.rule("1. gateway")
    with _gateway(data_dir, config, secret) as url:
        console.print(f"gateway {GATEWAY!r} serving at {url}")
        clients = data_dir / "demo-clients"
        clients.mkdir(exist_ok=True)
        opts: dict[str, Any] = {"url": url, "gateway_id": GATEWAY, "schemas": [TODOS]}
        with (
            LakeSyncClient(str(clients / f"alice-{run_tag}.db"), token=token("alice"), **opts) as a,
            LakeSyncClient(str(clients / f"bob-{run_tag}.db"), token=token("bob"), **opts) as b,
        ):
            console.rule("2. offline edits, then sync")
            ids = [f"{run_tag}-{i}" for i in range(1, 4)]
            a.insert("todos", ids[0], {"title": "Buy milk", "done": False, "owner": "alice"})
            a.insert("todos", ids[1], {"title": "Walk dog", "done": False, "owner": "alice"})
            a.insert("todos", ids[2], {"title": "Call mum", "done": False, "owner": "alice"})
            a.sync()
            b.sync()
            # Offline on both sides: different columns of one row, and a delete.
            a.update("todos", ids[0], {"title": "Buy oat milk"})
            b.update("todos", ids[0], {"done": True})
            b.delete("todos", ids[2])
            for c in (a, b, a):
                c.sync()
            sql = "select row_id, title, done, owner from todos order by row_id"
            _show(console, "alice's replica", a.query(sql))
            _show(console, "bob's replica", b.query(sql))
            if a.query(sql) != b.query(sql):
                raise LakeSyncError("the replicas did not converge")
            console.print("[green]replicas converged[/green]")

        console.rule("3. hot log → Iceberg landing table")
        reply = httpx.post(
            f"{url}/v1/admin/flush/{GATEWAY}",
            headers={"Authorization": f"Bearer {token('demo-admin', 'admin')}"},
            timeout=120,
        )
        reply.raise_for_status()
        console.print(plain(f"flushed: {reply.json()}"))

    console.rule("4. dbt on Spark: column-level LWW merge")
    # The lake the demo's gateway flushed into: its configuration, this data dir.
    cfg = load_config(config)
    settings = LakeSettings.from_config(cfg, data_dir)
    with console.status("starting Spark") as status:

        def on_event(event: PipelineEvent) -> None:
            if isinstance(event, NodeProgress) and event.status == "started":
                status.update(plain(f"dbt: {event.node}"))

        result = run_and_ship(
            settings, cfg, schemas=[parse_schema(TODOS)], observer=on_event
        ).built
    console.print(plain(
        f"merged {result.rows_merged} deltas, updated {', '.join(result.tables_updated) or '-'} "
        f"in {result.elapsed_s:.1f} s"
    ))
    console.rule("5. analytics.todos, read with DuckDB")
    result_q = run_query(
        settings,
        exp.select(*(col(c) for c in ("row_id", "title", "done", "owner")))
        .from_(sql_table("analytics", "todos"))
        .where(exp.Like(this=col("row_id"), expression=exp.Literal.string(f"{run_tag}-%")))
        .order_by(col("row_id"))
        .sql(dialect="duckdb"),
    )
    _show(
        console,
        "analytics.todos",
        [dict(zip(result_q.columns, r, strict=True)) for r in result_q.rows],
    )
