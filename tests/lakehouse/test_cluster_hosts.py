"""Acceptance: a Spark standalone cluster of separate hosts.

The master, two workers, the driver and the store (S3, the PostgreSQL Iceberg catalog, the
PostgreSQL and MariaDB destinations) each run in a network namespace of their own
(``tests/netns.py``), so every connection between them crosses the test network as it would
between machines; the test process itself is the gateway host that lands the deltas. The
workers cannot see the driver's or the store's files (an empty tmpfs over them in their mount
namespace): whatever the executors read or write, they reach over the network.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pymysql
import pytest

from lakesync.config import load_config
from lakesync.delta import RowDelta
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations.factory import mysql_params
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.catalog import open_catalog
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.object_store import S3FILEIO
from lakesync.lakehouse.settings import LakeSettings
from tests.netns import Host, Network, network, wait_for
from tests.rest_catalog import rest_catalog_server

from .conftest import append_in_order
from .test_shipping import COLUMNS, SCHEMA, expected, live_rows, random_history

pytestmark = [pytest.mark.spark, pytest.mark.dbt, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MASTER_PORT, MASTER_UI, WORKER_PORT, WORKER_UI = 7077, 8080, 7078, 8081


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class Cluster:
    """A master and two workers on hosts of their own, a driver host, and their files."""

    master: Host
    workers: list[Host]
    driver: Host
    root: Path
    net: Network

    @property
    def url(self) -> str:
        return f"spark://{self.master.ip}:{MASTER_PORT}"

    @property
    def driver_dir(self) -> Path:
        """The driver host's own files (the data dir lives here): hidden from the workers."""
        return self.root / "driver"

    def driver_env(self) -> dict[str, str]:
        """The environment of a process on the driver host: this checkout's code, no
        ``LAKESYNC_*`` of the test run's and no ``SPARK_LOCAL_IP`` (Spark picks the host's
        address, as on a machine of a real cluster)."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("LAKESYNC_") and k != "SPARK_LOCAL_IP"}
        return {**env, "PYTHONPATH": str(ROOT)}

    def apps(self) -> set[str]:
        """Ids of the applications whose executors ran on the workers so far."""
        return {app.name for w in self.workers
                for app in (self.root / w.name / "work").glob("app-*")}

    def tasks_by_worker(self, app_id: str) -> dict[str, int]:
        """Tasks each worker's executors finished for ``app_id`` (from the executors' logs in
        the worker's work dir)."""
        return {
            w.name: sum(
                log.read_text(errors="replace").count("Finished task")
                for log in (self.root / w.name / "work" / app_id).glob("*/stderr")
            )
            for w in self.workers
        }

    def worker_sees(self, path: Path) -> list[str]:
        """What the first worker's process finds in ``path`` (its mount namespace's view)."""
        pid = self.workers[0].pids()[0]
        seen = self.workers[0].run(["nsenter", "-t", str(pid), "-m", "ls", "-A", str(path)])
        assert seen.returncode == 0, seen.stderr
        return seen.stdout.split()


def _alive_workers(master: Host) -> int:
    try:
        url = f"http://{master.ip}:{MASTER_UI}/json/"
        with urllib.request.urlopen(url, timeout=5) as r:
            state = json.load(r)
    except OSError:
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Master, two 1-core workers and a driver host on a test network; the workers' processes
    cannot see the driver's files (nor the store host's, ``root/store``)."""
    # Not pytest's tmp dir: that is private to root, and a store host's PostgreSQL runs as the
    # postgres user.
    root = Path(tempfile.mkdtemp(prefix="lakesync-hosts-"))
    root.chmod(0o755)
    home = _spark_home()
    spark_class = str(home / "bin" / "spark-class")
    try:
        with network() as net:
            master = net.add_host("master")
            workers = [net.add_host(f"worker{i}") for i in range(2)]
            driver = net.add_host("driver")
            for host in (master, *workers, driver):
                (root / host.name).mkdir()
            (root / "store").mkdir()

            def env(host: Host) -> dict[str, str]:
                return {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": host.ip,
                        "PYSPARK_PYTHON": sys.executable, "SPARK_LOG_DIR": str(root / host.name)}

            master.popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", master.ip,
                 "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI)],
                log=root / "master" / "daemon.log", env=env(master),
            )
            url = f"spark://{master.ip}:{MASTER_PORT}"
            for w in workers:
                w.popen(
                    [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", w.ip,
                     "--port", str(WORKER_PORT), "--webui-port", str(WORKER_UI), "--cores", "1",
                     "--memory", "1g", "--work-dir", str(root / w.name / "work"), url],
                    log=root / w.name / "daemon.log", env=env(w),
                    hide=[root / "driver", root / "store"],
                )
            try:
                wait_for("two ALIVE workers", lambda: _alive_workers(master) == 2, timeout=180)
            except AssertionError:
                logs = [(root / h.name / "daemon.log") for h in (master, *workers)]
                raise AssertionError("\n".join(p.read_text()[-1500:] for p in logs)) from None
            yield Cluster(master, workers, driver, root, net)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run_on_driver(cluster: Cluster, code: str, timeout: float = 600) -> str:
    """Run Python ``code`` on the driver host; its stdout (fails with its output otherwise)."""
    done = cluster.driver.run(
        [sys.executable, "-c", code], env=cluster.driver_env(), timeout=timeout,
        cwd=cluster.driver_dir,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done.stdout


DRIVER_PORT, BLOCK_MANAGER_PORT = 40100, 40101


def test_a_lake_session_on_a_driver_host_runs_its_tasks_on_both_workers(cluster: Cluster) -> None:
    # lakesync's own session: on a cluster it must not bind the driver to loopback, where the
    # executors on other machines cannot connect back to it; lake.spark_driver_host and the
    # fixed ports (a firewall's holes) are the ones the executors use.
    out = _run_on_driver(cluster, f"""
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.spark import spark_session
env = {{"LAKESYNC_SPARK_MASTER": {cluster.url!r}, "LAKESYNC_SPARK_CORES_MAX": "2",
       "LAKESYNC_SPARK_EXECUTOR_MEMORY": "512m",
       "LAKESYNC_SPARK_DRIVER_HOST": {cluster.driver.ip!r},
       "LAKESYNC_SPARK_DRIVER_PORT": "{DRIVER_PORT}",
       "LAKESYNC_SPARK_BLOCK_MANAGER_PORT": "{BLOCK_MANAGER_PORT}"}}
spark = spark_session(LakeSettings.from_env({str(cluster.driver_dir / "lake")!r}, env=env))
print("app", spark.sparkContext.applicationId)
print("driver", spark.conf.get("spark.driver.host"), spark.conf.get("spark.driver.port"))
print("sum", spark.range(0, 1000000, numPartitions=16).selectExpr("sum(id)").first()[0])
spark.stop()
""", timeout=300)
    assert re.search(r"^sum 499999500000$", out, re.M), out
    assert re.search(rf"^driver {re.escape(cluster.driver.ip)} {DRIVER_PORT}$", out, re.M), out
    app = re.search(r"^app (\S+)$", out, re.M)
    assert app is not None, out
    tasks = cluster.tasks_by_worker(app[1])
    assert sum(tasks.values()) >= 16 and all(tasks.values()), tasks
    # Every executor connected back to the driver on the fixed port.
    driver = f"CoarseGrainedScheduler@{cluster.driver.ip}:{DRIVER_PORT}"
    logs = [log.read_text(errors="replace") for w in cluster.workers
            for log in (cluster.root / w.name / "work" / app[1]).glob("*/stderr")]
    assert logs and all(driver in log for log in logs), [log[-2000:] for log in logs]
    # The workers' processes do not see the driver's files, which are there.
    assert (cluster.driver_dir / "lake").is_dir()
    assert cluster.worker_sees(cluster.driver_dir) == []


S3_KEY, S3_SECRET, BUCKET = "lakesync", "lakesync-secret", "lake"
S3_PORT, PG_PORT, MY_PORT = 9000, 5432, 3306


@dataclass
class Store:
    """The third host: S3 (S3Proxy on its files), PostgreSQL (the Iceberg catalog and a
    destination) and MariaDB (a destination)."""

    host: Host
    files: Path

    @property
    def s3_endpoint(self) -> str:
        return f"http://{self.host.ip}:{S3_PORT}"

    def pg_url(self, database: str) -> str:
        return f"postgresql://postgres@{self.host.ip}:{PG_PORT}/{database}"

    def mysql_url(self, database: str) -> str:
        return f"mysql://root@{self.host.ip}:{MY_PORT}/{database}"


def _s3proxy_jar() -> Path:
    """S3Proxy's jar where ``scripts/services.sh`` puts it (it downloads it once)."""
    found = (Path(sys.prefix) / "share" / "s3proxy").glob("s3proxy-*-jar-with-dependencies.jar")
    jars = sorted(found)
    if not jars:
        pytest.skip("no S3Proxy jar in .venv/share/s3proxy: run scripts/services.sh")
    return jars[-1]


def _answers(check: Callable[[], object]) -> bool:
    try:
        check()
    except Exception:  # not up yet, whatever the client says
        return False
    return True


@pytest.fixture(scope="module")
def store(cluster: Cluster) -> Store:
    """S3, PostgreSQL and MariaDB on a host of their own, listening on its address only; their
    files (``root/store``) are hidden from the workers."""
    host = cluster.net.add_host("store")
    files = cluster.root / "store"
    store = Store(host, files)
    # S3Proxy's filesystem backend: a bucket is a directory.
    (files / "s3" / BUCKET).mkdir(parents=True)
    conf = files / "s3proxy.conf"
    conf.write_text(
        f"s3proxy.endpoint={store.s3_endpoint}\ns3proxy.authorization=aws-v2-or-v4\n"
        f"s3proxy.identity={S3_KEY}\ns3proxy.credential={S3_SECRET}\n"
        f"jclouds.provider=filesystem-nio2\njclouds.filesystem.basedir={files / 's3'}\n"
    )
    host.popen(["java", "-Xmx256m", "-jar", str(_s3proxy_jar()), "--properties", str(conf)],
               log=files / "s3proxy.log")

    pg = files / "pg"
    pg.mkdir()
    shutil.chown(pg, "postgres")
    bin_dir = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
    as_postgres = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--"]
    subprocess.run([*as_postgres, str(bin_dir / "initdb"), "-D", str(pg), "-U", "postgres",
                    "--auth=trust"], check=True, capture_output=True, timeout=120)
    with (pg / "pg_hba.conf").open("a") as hba:
        hba.write("host all all 0.0.0.0/0 trust\n")  # the other hosts of the test network
    host.popen([*as_postgres, str(bin_dir / "postgres"), "-D", str(pg), "-p", str(PG_PORT),
                "-k", str(pg), "-c", f"listen_addresses={host.ip}"], log=files / "pg.log")

    maria = files / "mariadb"
    subprocess.run(["mariadb-install-db", f"--datadir={maria}",
                    "--auth-root-authentication-method=normal"],
                   check=True, capture_output=True, timeout=120)
    host.popen(["mariadbd", "--user=root", f"--datadir={maria}", f"--socket={maria}/sock",
                f"--port={MY_PORT}", f"--bind-address={host.ip}"], log=files / "mariadb.log")

    wait_for("PostgreSQL on the store host",
             lambda: _answers(lambda: psycopg.connect(store.pg_url("postgres")).close()))
    wait_for("MariaDB on the store host", lambda: _answers(
        lambda: pymysql.connect(unix_socket=str(maria / "sock"), user="root").close()))
    wait_for("S3 on the store host", lambda: _http_answers(store.s3_endpoint))
    with psycopg.connect(store.pg_url("postgres"), autocommit=True) as con:
        con.execute("create database catalog")
    # root may connect only from the store host itself: let the other hosts in.
    my = pymysql.connect(unix_socket=str(maria / "sock"), user="root")
    with my.cursor() as cur:
        cur.execute("create user 'root'@'%'")
        cur.execute("grant all on *.* to 'root'@'%'")
    my.close()
    return store



def _http_answers(url: str) -> bool:
    """Whether an HTTP server answers at ``url``, whatever the status (S3 refuses an
    anonymous listing with 403)."""
    try:
        urllib.request.urlopen(url, timeout=5).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


GW = "gw_hosts"


def _write_config(cluster: Cluster, store: Store, name: str, catalog: dict[str, str]) -> Path:
    """The driver host's ``lakesync.yaml`` (``name``: its lake, bucket prefix and destination
    databases): the cluster, ``catalog``'s keys, the S3 warehouse and the destinations, all on
    other hosts (README "Scale-out" has the same keys)."""
    schemas = [{"table": SCHEMA.table, "columns": [{"name": n, "type": t} for n, t in COLUMNS]}]
    doc = {
        "data_dir": str(cluster.driver_dir / name),
        "lake": {
            "spark_master": cluster.url,
            "spark_cores_max": 2,
            "spark_executor_memory": "1g",
            **catalog,
            "warehouse": f"s3://{BUCKET}/{name}",
            "s3_endpoint": store.s3_endpoint,
            "s3_region": "us-east-1",
            "s3_path_style": True,
            "s3_access_key_id": S3_KEY,
            "s3_secret_access_key": S3_SECRET,
        },
        "gateways": {GW: {"schemas": schemas}},
        "destinations": {
            "pg": {"kind": "postgres", "url": store.pg_url(name), "gateway": GW},
            "maria": {"kind": "mysql", "url": store.mysql_url(name), "gateway": GW,
                      "delete": "hard"},
        },
    }
    path = cluster.driver_dir / f"{name}.yaml"
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return path


@contextmanager
def _catalog(store: Store, kind: str) -> Iterator[dict[str, str]]:
    """The ``lake:`` keys of a catalog on the store host: PostgreSQL over JDBC, or a REST
    catalog server (Apache Iceberg's) whose warehouse is the same bucket."""
    if kind == "jdbc":
        yield {"catalog_uri": f"jdbc:postgresql://{store.host.ip}:{PG_PORT}/catalog",
               "catalog_user": "postgres"}
        return
    server_env = {
        "CATALOG_IO__IMPL": S3FILEIO, "CATALOG_S3_ENDPOINT": store.s3_endpoint,
        "CATALOG_S3_PATH__STYLE__ACCESS": "true", "CATALOG_CLIENT_REGION": "us-east-1",
        "CATALOG_S3_ACCESS__KEY__ID": S3_KEY, "CATALOG_S3_SECRET__ACCESS__KEY": S3_SECRET,
    }
    warehouse = f"s3://{BUCKET}/{kind}"
    with rest_catalog_server(store.files / "rest", warehouse, server_env, host=store.host) as uri:
        yield {"catalog_uri": uri}


def _lake_files(root: Path) -> list[Path]:
    """Iceberg data and metadata files under ``root``."""
    return [p for p in root.rglob("*")
            if p.suffix in (".parquet", ".avro") or p.name.endswith(".metadata.json")]


@pytest.mark.timeout(1800)  # two pipeline runs of a cold cluster take minutes on a loaded machine
@pytest.mark.parametrize("kind", ["jdbc", "rest"])
def test_pipeline_run_on_the_cluster_merges_and_ships_through_s3_and_the_catalog(
    cluster: Cluster, store: Store, kind: str
) -> None:
    with psycopg.connect(store.pg_url("postgres"), autocommit=True) as con:
        con.execute(f"create database {kind}")
    my = pymysql.connect(**mysql_params(store.mysql_url("mysql")))
    with my.cursor() as cur:
        cur.execute(f"create database {kind}")
    my.close()
    with _catalog(store, kind) as catalog:
        _run_and_check(cluster, store, _write_config(cluster, store, kind, catalog), kind)


def _run_and_check(cluster: Cluster, store: Store, config: Path, name: str) -> None:
    settings = LakeSettings.from_config(load_config(config, env={}))
    # The test's own namespace is the gateway host: it lands the deltas (pyiceberg over S3).
    bootstrap(settings)
    gateway_dir = cluster.root / "gateway" / name
    gateway_dir.mkdir(parents=True)
    log = SqliteHotLog(gateway_dir / "hotlog.sqlite3", HLC())
    pg = DestinationSpec("postgres", store.pg_url(name), GW, name="pg")
    maria = DestinationSpec("mysql", store.mysql_url(name), GW, delete="hard", name="maria")
    rng = random.Random(24)
    landed: list[RowDelta] = []
    before = cluster.apps()
    try:
        for run, base in enumerate([1030, 1000]):  # the second batch is late
            batch = random_history(rng, 120, base)
            append_in_order(log, [(GW, d) for d in batch])
            LandingFlusher(open_catalog(settings), log).flush()
            landed += batch
            done = cluster.driver.run(
                [sys.executable, "-m", "lakesync.cli", "pipeline", "run", "--no-tests",
                 "--config", str(config)],
                env=cluster.driver_env(), cwd=cluster.driver_dir, timeout=900,
            )
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
            assert live_rows(pg) == expected(landed, "postgres"), f"run {run}"
            assert live_rows(maria) == expected(landed), f"run {run}"
    finally:
        log.close()

    # The merge ran on both workers' executors ...
    apps = cluster.apps() - before
    tasks = {w.name: sum(cluster.tasks_by_worker(app)[w.name] for app in apps)
             for w in cluster.workers}
    assert len(apps) == 2 and all(tasks.values()), (apps, tasks)  # one application per run
    # ... which could reach the lake only over the network: they do not see the driver's
    # files, and every data and metadata file is in the bucket, none on the driver host.
    assert cluster.worker_sees(cluster.driver_dir) == []
    assert _lake_files(cluster.driver_dir) == []
    assert _lake_files(store.files / "s3" / BUCKET / name)
