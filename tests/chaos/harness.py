"""A chaos run: N ``python -m lakesync.api`` processes on one PostgreSQL hot-log store of the
run's own (the Iceberg catalog in the same PostgreSQL, one shared warehouse, the landing flush
running, sync rules ``team = jwt:team`` on), under the faults of :func:`make_schedule`. The
gateways' lake lanes run as an operator would run them, on short intervals: the landing flush
every second, checkpoints and hot-log trimming every second with a hot-log retention of
``retention`` seconds, and, when ``pipeline`` is set, a pipeline run (Spark, on the warm worker
of the process that leads the lake's jobs) every ``pipeline`` seconds, asked for as
``lakesync pipeline run`` does (``POST /v1/admin/lake/run``, on each process in turn until the
leader takes it; the scheduled pipeline would wait a whole interval again each time the lead
moves, which a fault every few seconds does). Its runs publish the checkpoints the trimming
waits for: pulls from before a trim answer 410 ``CURSOR_EXPIRED`` and clients re-sync from the
checkpoint. Without the pipeline, ``models`` rebuilds its merged models with a stand-in
(:mod:`tests.chaos.lake_models`) every ``models`` seconds, so the checkpoint and trimming lanes
have something to publish.

A run's ports (its PostgreSQL's and its gateways', which stay the same across restarts) are
:func:`~tests.gateway_process.reserved_port` ports and its files live in a directory of its
own, so several runs go on at once on one machine.

Each gateway reaches PostgreSQL through its own :class:`~tests.tcp_proxy.TcpProxy` (a partition
of that process alone) and clients reach each gateway through another (a partition between
clients and that process). The load: raw pushers (httpx, keep-alive, a failed batch retried on
the next process until acknowledged; each acknowledged delta recorded with its time) and library
clients (:mod:`tests.chaos.client_worker`, HTTP and WebSocket transports, in processes of their
own, their wall clocks set back for a ``client_skew`` fault through a control file each reads);
an operator calls the admin flush on a random process every few seconds.

At the end (:meth:`ChaosRun.run`): every acknowledged delta is in the landing table exactly
once, and in the hot log at most once and unless trimmed, every process's state (pulled as an
admin, from the checkpoint when the log was trimmed) and every replica equal the reference merge,
a new library client of each team (its first sync through the checkpoint once the log was
trimmed) holds its view, no client sees a row outside its view, no response was a 500, no
process exited by itself; the figures are the longest time with no acknowledged write while one
gateway was faulted and the time from the last fault healing to convergence, with what the lake
lanes did (pipeline runs, checkpoints published, hot-log entries trimmed).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import psycopg
import yaml

from lakesync.client import Backoff, LakeSyncClient
from lakesync.delta import RowDelta
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.worker import RunReply, decode_line
from lakesync.merge import merge_state
from tests.api.helpers import Gateway, Replica, auth, now_hlc, token
from tests.chaos.checks import Rows, differences, longest_stall, lost_and_duplicated, outside_view
from tests.chaos.client_worker import COLUMNS, SCHEMAS
from tests.chaos.lake_models import write_models
from tests.chaos.schedule import GATEWAY_FAULTS, Fault, fault_counts, make_schedule
from tests.gateway_process import ROOT, ServerProcess, reserved_port
from tests.pg_cluster import PgCluster, started_cluster
from tests.tcp_proxy import TcpProxy
from tests.wire_json import as_json

__all__ = ["AVAILABILITY", "CONVERGENCE", "DURABILITY", "PRIVACY", "ChaosResult", "ChaosRun",
           "Violation"]

DURABILITY = "durability"  # an acknowledged write lost or stored twice
CONVERGENCE = "convergence"  # a process or replica not equal to the reference merge in time
PRIVACY = "privacy"  # a client saw a row outside its view
AVAILABILITY = "availability"  # a 500, a process that exited by itself, a stall over the bound
Violation = tuple[str, str]
"""A broken invariant: its kind (one of the four above) and what was seen."""

TEAMS = ("red", "blue")
RULES = {
    "version": 1,
    "buckets": [{"name": "team", "tables": ["todos"],
                 "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]}],
}
PG_SCHEMA = "lakesync"
BATCH = 10
RAW_ROWS = 40  # rows per raw pusher: later batches overwrite earlier ones


@dataclass
class ChaosResult:
    """What a run found: its figures and every broken invariant (empty when all held)."""

    seed: int
    faults: list[Fault]
    acked: int
    longest_stall: float
    convergence: float | None
    violations: list[Violation] = field(default_factory=list)
    logs: Path | None = None
    skipped: dict[str, int] = field(default_factory=dict)
    """Faults of the schedule this host cannot inject, by kind (a disk without root)."""
    check_seconds: float = 0.0
    """How long the last convergence check took (the convergence time includes it)."""
    lake: dict[str, int] = field(default_factory=dict)
    """What the gateways' lake lanes did: pipeline runs by outcome, checkpoints published,
    pulls answered 410 ``CURSOR_EXPIRED``, checkpoints downloaded, hot-log entries trimmed."""

    def figures(self) -> str:
        """The run's figures, one per line."""
        converged = "never" if self.convergence is None else (
            f"{self.convergence:.1f} s (the last check took {self.check_seconds:.1f} s)")
        return "\n".join([
            f"seed {self.seed}: {len(self.faults)} faults {fault_counts(self.faults)}"
            + (f", skipped here {self.skipped}" if self.skipped else ""),
            f"deltas acknowledged: {self.acked}",
            "lake: " + ", ".join(f"{k} {v}" for k, v in self.lake.items()),
            f"longest stall with one process faulted: {self.longest_stall:.1f} s",
            f"convergence after the last fault healed: {converged}",
            f"invariants broken: {len(self.violations)}",
            *(f"  - [{kind}] {text}" for kind, text in self.violations),
        ])


def _mount_small_disk(path: Path) -> bool:
    """A 1 GiB tmpfs at ``path`` (the lake's warehouse), so a fault can fill it without
    filling the machine's disk; False where mounting is not allowed (not root)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    mount = ["mount", "-t", "tmpfs", "-o", "size=1g", "chaos-warehouse", str(path)]
    return subprocess.run(mount, capture_output=True, check=False).returncode == 0


class _Gateway:
    def __init__(self, base: Path, n: int, pg: PgCluster, env: dict[str, str],
                 config: Path) -> None:
        self.pg_proxy = TcpProxy(("127.0.0.1", pg.port))
        dsn_port = f"127.0.0.1:{self.pg_proxy.port}/postgres"
        self.server = ServerProcess(base / f"gw{n}" / "data", {
            **env,
            "LAKESYNC_STORE_URL": f"postgresql://postgres@{dsn_port}",
            "LAKESYNC_CATALOG_URI": f"jdbc:postgresql://{dsn_port}",
        }, config, port=reserved_port())
        self.server.start()
        self.client_proxy = TcpProxy(("127.0.0.1", self.server.port))
        self.killed = False

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_proxy.port}"


class ChaosRun:
    """One run in a fresh temporary directory; :meth:`run` then :meth:`close`.

    ``converge_within``: seconds from the last fault healing (and the load stopping) by which
    every process and replica must equal the reference merge; ``stall_bound``: the longest
    time with no acknowledged write allowed while one gateway process is faulted;
    ``pipeline``: seconds between pipeline runs (0: none); ``models``: seconds between
    rebuilds of the merged models by the stand-in instead (0: none; with neither, no
    checkpoint is published and nothing is trimmed); ``retention``: the hot-log retention,
    seconds.
    """

    def __init__(self, seed: int, duration: float, *, gateways: int = 3, pushers: int = 4,
                 clients: int = 2, converge_within: float = 30.0,
                 stall_bound: float = 10.0, pipeline: float = 0.0,
                 retention: float = 10.0, models: float = 0.0) -> None:
        self.seed, self.duration, self.converge_within = seed, duration, converge_within
        self.stall_bound = stall_bound
        self.pipeline, self.retention, self.models = pipeline, retention, models
        self.lake_runs: Counter[str] = Counter()
        self.check_seconds = 0.0  # how long the last convergence check took
        self.schedule = make_schedule(seed, duration, gateways=gateways, clients=clients,
                                      pushers=pushers)
        self.base = Path(tempfile.mkdtemp(prefix=f"lakesync-chaos-{seed}-"))
        self.base.chmod(0o755)  # PostgreSQL's own user reaches its directory inside
        self.violations: list[Violation] = []
        self.pg_healed: list[float] = []
        self.active = "none"  # the fault in effect, named in the violations it causes
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.acks: list[tuple[float, int]] = []  # (seconds into the run, gateway)
        self.acked: dict[str, RowDelta] = {}
        self.skew = [0] * pushers
        self.windows: list[tuple[float, float]] = []
        self.skipped: Counter[str] = Counter()
        self.gateways: list[_Gateway] = []
        self.workers: list[subprocess.Popen[bytes] | None] = [None] * clients
        self.pushers = pushers
        self.t0 = time.monotonic()
        self.pg = started_cluster(self.base / "pg", "-c max_connections=300", reserve=True)
        self.disk = _mount_small_disk(self.base / "warehouse")
        try:
            self._start_gateways(gateways)
        except BaseException:
            self.close(keep=True)
            raise
        self.clients = [self._client_spec(n) for n in range(clients)]

    def _start_gateways(self, gateways: int) -> None:
        config = self.base / "lakesync.yaml"
        gateway = {"schemas": SCHEMAS, "rules": RULES}
        config.write_text(yaml.safe_dump({"gateways": {"gw1": gateway}}))
        env = {
            "LAKESYNC_PG_SCHEMA": PG_SCHEMA,
            "LAKESYNC_CATALOG_USER": "postgres",
            "LAKESYNC_WAREHOUSE": f"file://{self.base / 'warehouse'}",
            "LAKESYNC_FLUSH_INTERVAL": "1",
            "LAKESYNC_PIPELINE_INTERVAL": "0",
            "LAKESYNC_HOT_LOG_RETENTION": str(self.retention),
        }
        self._lake_env = {**env, "LAKESYNC_CATALOG_URI": f"jdbc:postgresql://127.0.0.1:"
                                                        f"{self.pg.port}/postgres"}
        for n in range(gateways):
            self.gateways.append(_Gateway(self.base, n, self.pg, env, config))

    # -- load ---------------------------------------------------------------------------------

    def _now(self) -> float:
        return time.monotonic() - self.t0

    def _client_spec(self, n: int) -> dict[str, Any]:
        name, team = f"lib{n}", TEAMS[n % len(TEAMS)]
        (self.base / "clients").mkdir(exist_ok=True)
        return {
            "name": name, "team": team,
            "token": token(name, team=team, ttl_s=86_400),
            "transport": ("http", "websocket")[n % 2],
            "urls": [g.client_url for g in self.gateways],
            "replica": str(self.base / "clients" / f"{name}.db"),
            "log": str(self.base / "clients" / f"{name}.writes"),
            "clock": str(self.base / "clients" / f"{name}.clock"),
        }

    def _start_worker(self, n: int) -> None:
        with (self.base / "clients" / f"lib{n}.log").open("ab") as out:
            self.workers[n] = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.client_worker", json.dumps(self.clients[n])],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)

    def _violation(self, kind: str, text: str) -> None:
        with self._lock:
            if (kind, text) not in self.violations:
                self.violations.append((kind, text))

    def _push_loop(self, p: int) -> None:
        name, team = f"raw{p}", TEAMS[p % len(TEAMS)]
        headers = auth(token(name, team=team, ttl_s=86_400))
        sessions = [httpx.Client(base_url=g.client_url, headers=headers, timeout=5.0)
                    for g in self.gateways]
        at, n = p % len(self.gateways), 0
        try:
            while not self._stop.is_set():
                batch = []
                for _ in range(BATCH):
                    op: Literal["INSERT", "UPDATE"] = "INSERT" if n < RAW_ROWS else "UPDATE"
                    hlc = now_hlc(-self.skew[p] * 60_000)
                    cols = {"team": team, "v": n, "title": f"p{n}"}
                    batch.append(RowDelta.create(op, "todos", f"{name}-{n % RAW_ROWS}", name,
                                                 cols, hlc))
                    n += 1
                body = {"clientId": name, "deltas": [as_json(d) for d in batch]}
                while True:  # until acknowledged, on whichever process answers
                    try:
                        r = sessions[at].post("/v1/sync/gw1/push", json=body)
                    except httpx.HTTPError:
                        r = None
                    if r is not None and r.status_code == 200:
                        with self._lock:
                            self.acks.append((self._now(), at))
                            self.acked.update((d.delta_id, d) for d in batch)
                        break
                    if r is not None and r.status_code >= 500 and r.status_code not in (502,
                                                                                         503):
                        self._violation(AVAILABILITY, f"push answered {r.status_code} at "
                                        f"{self._now():.1f} s (fault in effect: "
                                        f"{self.active}): {r.text[:200]}")
                    elif r is not None and r.status_code not in (429, 502, 503):
                        self._violation(AVAILABILITY,
                                        f"push refused {r.status_code}: {r.text[:200]}")
                        return
                    at = (at + 1) % len(self.gateways)
                    time.sleep(0.05)
        finally:
            for s in sessions:
                s.close()

    def _operator_loop(self) -> None:
        rng = random.Random(self.seed)
        headers = auth(token("ops", role="admin"))
        while not self._stop.wait(2.0):
            g = rng.randrange(len(self.gateways))
            with contextlib.suppress(httpx.HTTPError):
                r = httpx.post(f"{self.gateways[g].server.url}/v1/admin/flush/gw1",
                               headers=headers, timeout=10)
                if r.status_code >= 500 and r.status_code not in (502, 503):
                    self._violation(AVAILABILITY, f"admin flush on gw{g} answered "
                                    f"{r.status_code} at {self._now():.1f} s (fault in "
                                    f"effect: {self.active}; {self._since_pg_restart()})")

    def _pipeline_loop(self) -> None:
        """``pipeline`` seconds after each run that succeeded (5 s after one that did not: a run
        meets a fault more often than not), ask for a pipeline run (without dbt's data tests)
        on each process in turn until one leads the lake's jobs and runs it; counts the
        outcomes."""
        headers = auth(token("ops", role="admin"))
        at, wait = 0, self.pipeline
        while not self._stop.wait(wait):
            for _ in range(2 * len(self.gateways)):
                if self._stop.is_set():
                    return
                g = self.gateways[at]
                outcome = self._lake_run(g.server.url, headers, at)
                if outcome is not None:
                    self.lake_runs[outcome] += 1
                    wait = self.pipeline if outcome == "ok" else 5.0
                    break
                at = (at + 1) % len(self.gateways)
                self._stop.wait(1.0)

    def _models_loop(self) -> None:
        """Every ``models`` seconds, the stand-in's merged models (a rebuild that fails under a
        fault is counted and tried again next time)."""
        settings = LakeSettings.from_env(self.base / "lake", env=self._lake_env)
        while not self._stop.wait(self.models):
            try:
                self.lake_runs["stand-in ok" if write_models(settings) else "stand-in idle"] += 1
            except Exception:
                self.lake_runs["stand-in failed"] += 1

    def _lake_run(self, url: str, headers: dict[str, str], n: int) -> str | None:
        """One ``POST /v1/admin/lake/run`` of a pipeline run: ``ok``, ``failed``, or
        ``interrupted`` (the request failed: its process faulted meanwhile); None when another
        process leads the lake's jobs."""
        reply: RunReply | None = None
        try:
            with httpx.stream("POST", f"{url}/v1/admin/lake/run", headers=headers,
                              json={"job": "pipeline", "tests": False},
                              timeout=httpx.Timeout(10.0, read=900.0)) as r:
                if r.status_code >= 500 and r.status_code not in (502, 503):
                    self._violation(AVAILABILITY, f"pipeline run on gw{n} answered "
                                    f"{r.status_code} at {self._now():.1f} s (fault in effect: "
                                    f"{self.active})")
                    return "interrupted"
                if r.status_code == 404:  # this process runs no worker: another leads
                    return None
                if r.status_code != 200:
                    return "interrupted"
                for line in r.iter_lines():
                    item = decode_line(line) if line.strip() else None
                    if isinstance(item, RunReply):
                        reply = item
        except (httpx.HTTPError, ValueError):
            return "interrupted"
        if reply is None:
            return "interrupted"
        if not reply.ok and "another gateway process" in (reply.error or ""):
            return None  # the lead moved while the run waited
        return "ok" if reply.ok else "failed"

    def _since_pg_restart(self) -> str:
        if not self.pg_healed:
            return "PostgreSQL never restarted"
        return f"PostgreSQL last back at {self.pg_healed[-1]:.1f} s"

    # -- faults -------------------------------------------------------------------------------

    def _check_processes(self) -> None:
        for n, g in enumerate(self.gateways):
            assert g.server.proc is not None
            code = g.server.proc.poll()
            if not g.killed and code is not None:
                self._violation(AVAILABILITY, f"gateway {n} exited by itself (code {code}) at "
                                f"{self._now():.1f} s")
                g.killed = True
                self._start(n)
                g.killed = False

    def _start(self, n: int) -> None:
        """Start gateway ``n`` again; a start that fails is a violation, and is tried again."""
        for _ in range(10):
            try:
                self.gateways[n].server.start()
                return
            except RuntimeError as e:
                why = str(e).strip().splitlines()[-1][:300]
                self._violation(AVAILABILITY, f"gateway {n} failed to start at "
                                f"{self._now():.1f} s: {why}")
        raise RuntimeError(f"gateway {n} failed to start ten times")

    def _inject(self, f: Fault) -> None:
        g = self.gateways[f.target] if f.kind in GATEWAY_FAULTS else None
        start = self._now()
        self.active = f"{f.kind} of {f.target}"
        try:
            self._fault(f, g)
        finally:
            self.active = "none"
        if g is not None:
            self.windows.append((start, self._now()))

    def _fault(self, f: Fault, g: _Gateway | None) -> None:
        if f.kind == "kill" and g is not None:
            g.killed = True
            g.server.kill()
            self._stop.wait(f.duration)
            self._start(f.target)
            g.killed = False
        elif f.kind == "pause" and g is not None:
            assert g.server.proc is not None
            g.server.proc.send_signal(signal.SIGSTOP)
            self._stop.wait(f.duration)
            g.server.proc.send_signal(signal.SIGCONT)
        elif f.kind in ("cut_pg", "cut_clients") and g is not None:
            proxy = g.pg_proxy if f.kind == "cut_pg" else g.client_proxy
            proxy.freeze()
            self._stop.wait(f.duration)
            proxy.thaw()
        elif f.kind in ("pg_fast", "pg_immediate"):
            self.pg.stop(f.kind.removeprefix("pg_"))
            self._stop.wait(f.duration)
            self.pg.start()
            self.pg_healed.append(self._now())
        elif f.kind == "client_kill":
            worker = self.workers[f.target]
            if worker is not None:
                worker.kill()
                worker.wait()
            self._stop.wait(f.duration)
            self._start_worker(f.target)
        elif f.kind == "disk_full":
            if not self.disk:
                self.skipped[f.kind] += 1
                return
            filler = self.base / "warehouse" / ".filler"
            with filler.open("wb") as out:
                free = os.statvfs(filler).f_bavail * os.statvfs(filler).f_frsize
                with contextlib.suppress(OSError):
                    os.posix_fallocate(out.fileno(), 0, max(free, 1))
            self._stop.wait(f.duration)
            filler.unlink()
        elif f.kind == "skew":
            self.skew[f.target] = f.arg
            self._stop.wait(f.duration)
            self.skew[f.target] = 0
        elif f.kind == "client_skew":
            clock = Path(self.clients[f.target]["clock"])
            clock.write_text(f"{-f.arg}\n")
            self._stop.wait(f.duration)
            clock.write_text("0\n")

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> ChaosResult:
        """Load, inject the schedule, heal, stop the load, check; returns the result (the
        logs dir is kept, and named, when an invariant broke)."""
        threads = [threading.Thread(target=self._push_loop, args=(p,), daemon=True)
                   for p in range(self.pushers)]
        threads.append(threading.Thread(target=self._operator_loop, daemon=True))
        if self.pipeline > 0:  # not waited for at the end: a run may be going on
            threading.Thread(target=self._pipeline_loop, daemon=True).start()
        elif self.models > 0:
            threading.Thread(target=self._models_loop, daemon=True).start()
        for n in range(len(self.clients)):
            self._start_worker(n)
        self.t0 = time.monotonic()
        for t in threads:
            t.start()
        for f in self.schedule:
            self._stop.wait(max(0.0, f.t - self._now()))
            self._check_processes()
            self._inject(f)
        self._stop.wait(max(0.0, self.duration - self._now()))
        self._check_processes()
        self._stop.set()
        for t in threads:
            t.join(120)
            if t.is_alive():
                self._violation(AVAILABILITY, "a pusher never had its last batch acknowledged")
        for worker in self.workers:
            if worker is not None:
                worker.kill()
                worker.wait()
        convergence = self._converge(self._now())
        self._check_processes()
        stall = longest_stall((t for t, _ in self.acks), self.windows)
        if stall > self.stall_bound:
            self._violation(AVAILABILITY, f"no write acknowledged for {stall:.1f} s while one "
                            f"process was faulted (bound {self.stall_bound:.0f} s)")
        return ChaosResult(self.seed, self.schedule, len(self.acked), stall, convergence,
                           list(self.violations), self.base if self.violations else None,
                           dict(self.skipped), self.check_seconds, self._lake_figures())

    def _lake_figures(self) -> dict[str, int]:
        """What the lake lanes did, from the gateways' logs and the hot log."""
        text = "".join(g.server.log_path.read_text(errors="replace") for g in self.gateways)
        return {
            **{f"models rebuilt ({k})" if k.startswith("stand-in") else f"pipeline runs {k}": v
               for k, v in sorted(self.lake_runs.items())},
            "checkpoints published": text.count("checkpoint of 'gw1' published"),
            "pulls answered 410": text.count('"path": "/v1/sync/gw1/pull", "status": 410'),
            "checkpoints downloaded": text.count(
                '"path": "/v1/sync/gw1/checkpoint", "status": 200'),
            "hot-log entries trimmed": max(0, self._landed_count - sum(self._stored().values())),
        }

    # -- checks -------------------------------------------------------------------------------

    def _stored(self) -> Counter[str]:
        with psycopg.connect(self.pg.dsn, autocommit=True) as conn:
            rows = conn.execute(f"SELECT delta_id FROM {PG_SCHEMA}.log WHERE gw = 'gw1'")
            return Counter(r[0] for r in rows)

    _landed_count = 0

    def _landed(self) -> Counter[str]:
        """The landing table's delta ids, after an admin flush of what the hot log holds."""
        r = httpx.post(f"{self.gateways[0].server.url}/v1/admin/flush/gw1",
                       headers=auth(token("ops", role="admin")), timeout=60)
        r.raise_for_status()
        settings = LakeSettings.from_env(self.base / "lake", env=self._lake_env)
        table = open_catalog(settings).load_table(LANDING_IDENTIFIER)
        rows = table.scan(selected_fields=("delta_id",)).to_arrow().to_pylist()
        self._landed_count = len(rows)
        return Counter(row["delta_id"] for row in rows)

    def _pulled(self, url: str, tok: str, client: str) -> Rows:
        """What ``client`` holds after pulling everything from the start, through the
        checkpoint when the start was trimmed (410)."""
        replica = Replica()
        with httpx.Client(base_url=url, timeout=30) as h:
            gateway = Gateway(h)
            if gateway.pull_page(tok, client, 0, 1).status_code == 410:
                gateway.load_checkpoint(tok, replica)
            gateway.sync(tok, client, replica, limit=10_000)
        return replica.rows()

    def _final_sync(self, spec: dict[str, Any], at: int) -> Rows:
        url = self.gateways[at % len(self.gateways)].client_url
        with LakeSyncClient(spec["replica"], url=url, gateway_id="gw1", token=spec["token"],
                            schemas=SCHEMAS, transport=spec["transport"], timeout=10.0,
                            backoff=Backoff(base=0.2, cap=2.0, max_retries=3)) as c:
            c.sync()
            c.sync()  # the second cycle pulls what the first one's push left behind
            assert c.queue_depth == 0, "the outbox is not empty after a sync"
            names = ", ".join(col["name"] for col in COLUMNS)
            return {("todos", r["row_id"]): {k: r[k] for k in ("team", "v", "title")}
                    for r in c.query(f"select row_id, {names} from todos")}

    def _problems(self) -> list[Violation]:
        problems: list[Violation] = []
        landed, stored = self._landed(), self._stored()
        # Trimming removes landed deltas from the hot log, so an acknowledged delta missing from
        # it is lost only if it did not land either: the landing check below says so.
        duplicated = {d for d, n in stored.items() if n > 1}
        if duplicated:
            problems.append((DURABILITY, f"hot log: {len(duplicated)} acknowledged deltas stored "
                            f"twice (e.g. {sorted(duplicated)[:3]})"))
        lost, duplicated = lost_and_duplicated(self.acked.keys(), landed)
        if lost or duplicated:
            some = sorted(lost | duplicated)[:3]
            problems.append((DURABILITY, f"landing table: {len(lost)} acknowledged deltas missing, "
                            f"{len(duplicated)} landed twice (e.g. {some})"))
        reference = merge_state(self.acked.values())
        admin = token("checker", role="admin")
        states = [self._pulled(g.server.url, admin, "checker") for g in self.gateways]
        for n, state in enumerate(states):
            raw = {k: v for k, v in state.items() if k[1].startswith("raw")}
            for line in differences(reference, raw):
                problems.append((CONVERGENCE, f"gateway {n} differs from the reference merge: "
                                 f"{line}"))
            if n and state != states[0]:
                problems.extend((CONVERGENCE, f"gateway {n} differs from gateway 0: {line}")
                                for line in differences(states[0], state))
        for n, spec in enumerate([*self.clients, *self._newcomers()]):
            replica = self._final_sync(spec, n)
            team = spec["team"]
            view = {k: v for k, v in states[0].items() if v.get("team") == team}
            problems.extend((CONVERGENCE, f"{spec['name']}'s replica differs from its view: {line}")
                            for line in differences(view, replica))
            problems.extend((PRIVACY, f"{spec['name']} holds {key} outside its view")
                            for key in outside_view(replica, "team", team))
            written: dict[str, int] = {}
            log = Path(spec["log"])
            for line in (log.read_text() if log.exists() else "").split("\n"):
                if line:
                    row, value = line.split()
                    written[row] = max(written.get(row, -1), int(value))
            for row, v in written.items():
                got = states[0].get(("todos", row), {}).get("v", -1)
                if got < v:
                    problems.append((DURABILITY, f"{spec['name']}'s write {row} v={v} lost "
                                     f"(gateway: {got})"))
        for team in TEAMS:
            viewer = f"viewer-{team}"
            for n, g in enumerate(self.gateways):
                seen = self._pulled(g.server.url, token(viewer, team=team), viewer)
                problems.extend((PRIVACY, f"a {team} client pulled {key} from gateway {n}")
                                for key in outside_view(seen, "team", team))
        return problems

    def _newcomers(self) -> list[dict[str, Any]]:
        """A new library client per client of the run (its team, its transport) with an empty
        replica each time: its first sync goes through the checkpoint once the log was
        trimmed."""
        specs = []
        for spec in self.clients:
            name = f"new-{spec['name']}"
            replica = self.base / "clients" / f"{name}.db"
            for path in replica.parent.glob(f"{name}.db*"):
                path.unlink()
            specs.append({**spec, "name": name, "replica": str(replica),
                          "token": token(name, team=spec["team"], ttl_s=86_400),
                          "log": str(self.base / "clients" / f"{name}.writes")})
        return specs

    def _converge(self, healed: float) -> float | None:
        """Check until every invariant holds or ``converge_within`` seconds after ``healed``
        (every fault healed and the load stopped); returns how long it took (to the end of the
        check that found everything converged), or None. The checks themselves take seconds
        on a loaded machine (:attr:`check_seconds`): a check that started within the bound
        and passes is in time."""
        deadline = healed + self.converge_within
        problems: list[Violation] = []
        while True:
            started = self._now()
            try:
                problems = self._problems()
            except Exception as e:  # a check that cannot run yet is retried
                problems = [(CONVERGENCE, f"checks failed: {type(e).__name__}: {e}")]
            self.check_seconds = self._now() - started
            if not problems and started <= deadline:
                return self._now() - healed
            if started > deadline:
                self.violations.extend(problems[:20])
                self._violation(CONVERGENCE, f"no convergence within "
                                f"{self.converge_within:.0f} s of the last fault healing")
                return None
            time.sleep(1.0)

    def close(self, keep: bool = False) -> None:
        """Stop every process and proxy of the run; delete its directory unless ``keep``."""
        for worker in self.workers:
            if worker is not None and worker.poll() is None:
                worker.kill()
                worker.wait()
        for g in self.gateways:
            assert g.server.proc is not None
            with contextlib.suppress(OSError):
                g.server.proc.send_signal(signal.SIGCONT)
            children = g.server.children()  # its pipeline worker, if it runs one
            with contextlib.suppress(subprocess.TimeoutExpired):  # killed then: go on
                g.server.stop()
            for pid in children:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            g.client_proxy.close()
            g.pg_proxy.close()
        with contextlib.suppress(subprocess.CalledProcessError):
            self.pg.stop("immediate")
        if self.disk:
            subprocess.run(["umount", "-l", str(self.base / "warehouse")], check=False)
        if not keep:
            shutil.rmtree(self.base, ignore_errors=True)
