"""The lake's SQL endpoint: Spark's own Thrift server speaking the HiveServer2 protocol.

BI tools (Superset, Metabase, DBeaver, Tableau), beeline, PyHive and dbt's ``thrift`` method
connect to it with a ``jdbc:hive2://host:port/`` or ``hive://host:port/`` URL and query
``analytics.<table>``, ``lakesync.landing`` and Iceberg's time travel (``VERSION AS OF``).
The server is ``org.apache.spark.sql.hive.thriftserver.HiveThriftServer2`` from the PySpark
install, started with ``spark-submit`` and the pipeline's own settings
(:func:`lakesync.lakehouse.spark.lake_spark_conf`), so it sees the lake the pipeline writes.

Authentication is the Thrift server's: by default ``NONE`` (SASL PLAIN, any user name, no
password checked), so the server binds loopback unless told otherwise; ``LDAP``, ``KERBEROS``
and ``CUSTOM`` are set with ``--hiveconf hive.server2.authentication=...`` (Hive's settings).
"""

from __future__ import annotations

import errno
import importlib.util
import ipaddress
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from lakesync.errors import LakeSyncError, ValidationError
from lakesync.lakehouse.catalog import open_catalog, require_lake
from lakesync.lakehouse.process_env import stop_process
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.spark import driver_environment, lake_spark_conf

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "SqlServer",
    "SqlServerError",
    "check_bind_address",
    "thrift_server_argv",
    "thrift_server_env",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 10000  # HiveServer2's own default, what BI tools propose
CLIENT_DEFAULT_DATABASE = "default"
THRIFT_SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
# The Thrift server needs a Hive metastore for its own session catalog; the lake's tables live in
# the Iceberg catalog, so an in-memory Derby is enough and leaves no metastore_db/ behind.
_METASTORE = "jdbc:derby:memory:lakesync_sql_server;create=true"


class SqlServerError(LakeSyncError):
    """The SQL endpoint could not start (port taken, Spark failed): the message says why."""


def check_bind_address(host: str, allow_remote: bool) -> None:
    """Refuse a non-loopback ``host`` unless ``allow_remote``: the default authentication
    accepts any user name, so listening beyond this machine must be asked for explicitly."""
    if host == "localhost" or allow_remote:
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False  # a host name: it may resolve to anything
    if not loopback:
        raise ValidationError(
            f"refusing to serve the lake on {host!r}, which is not a loopback address: the "
            "Thrift server's default authentication (NONE) accepts any user; pass "
            "--allow-remote (and consider --hiveconf hive.server2.authentication=LDAP)"
        )


def thrift_server_argv(
    spark_home: Path,
    conf: Mapping[str, str],
    host: str,
    port: int,
    hiveconf: Sequence[str] = (),
) -> list[str]:
    """The ``spark-submit`` command line of a Thrift server with the Spark settings ``conf``,
    listening on ``host:port``; ``hiveconf`` are extra Hive settings ``KEY=VALUE``, after ours
    so they win."""
    confs = {
        **conf,
        "spark.app.name": "lakesync-sql-server",
        "spark.hadoop.javax.jdo.option.ConnectionURL": _METASTORE,
    }
    if conf.get("spark.jars"):
        # Also on the driver's own class path: closing a client's session closes Hive's session
        # class loader, and with it the loader of spark.jars, so the next session's query would
        # fail with NoClassDefFoundError on an Iceberg class.
        confs["spark.driver.extraClassPath"] = conf["spark.jars"].replace(",", os.pathsep)
    argv = [str(spark_home / "bin" / "spark-submit"), "--class", THRIFT_SERVER_CLASS]
    for key, value in confs.items():
        argv += ["--conf", f"{key}={value}"]
    hive = [f"hive.server2.thrift.port={port}", f"hive.server2.thrift.bind.host={host}",
            *hiveconf]
    for item in hive:
        if "=" not in item:
            raise ValidationError(f"--hiveconf {item!r} must look like KEY=VALUE")
        argv += ["--hiveconf", item]
    return [*argv, "spark-internal"]


def thrift_server_env(
    settings: LakeSettings, env: Mapping[str, str], spark_home: Path
) -> dict[str, str]:
    """The environment of the Thrift server process: ``env`` with Spark's home and this
    interpreter for Python workers; ``SPARK_LOCAL_IP`` pinned to loopback only for a local
    master (:func:`~lakesync.lakehouse.spark.driver_environment`; a variable in ``env`` wins),
    so on a cluster the executors can reach the driver."""
    return {**driver_environment(settings), **env, "SPARK_HOME": str(spark_home),
            "PYSPARK_PYTHON": sys.executable}


def _ensure_default_namespace(settings: LakeSettings) -> None:
    """Create the lake's empty ``default`` namespace if missing: JDBC clients, PyHive and BI
    tools open every session with ``USE default``, which the lake (Spark's default catalog)
    must answer. Refuses a data dir with no lake first."""
    require_lake(settings)
    open_catalog(settings).create_namespace_if_not_exists(CLIENT_DEFAULT_DATABASE)


def _spark_home() -> Path:
    """The PySpark install, which ships ``bin/spark-submit`` and the Thrift server's jars."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("No module named 'pyspark'", name="pyspark")
    return Path(spec.origin).parent


def _port_free(host: str, port: int) -> OSError | None:
    """None if ``host:port`` can be bound now, else the error that binding it raised."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc
    return None


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


class SqlServer:
    """One Thrift server process for the lake of ``settings``; ``start()`` returns when it
    accepts connections, ``stop()`` (or leaving the ``with`` block) ends it."""

    def __init__(
        self,
        settings: LakeSettings,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        hiveconf: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.host = host
        self.port = port
        self.log_path = settings.data_dir / "sql-server.log"
        self._hiveconf = tuple(hiveconf)
        self._env = dict(os.environ if env is None else env)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The JDBC URL clients connect with (``hive://host:port/default`` for SQLAlchemy)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"jdbc:hive2://{host}:{self.port}/default"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return None if self._proc is None or self._proc.poll() is not None else self._proc.pid

    def start(self, timeout: float = 180.0) -> None:
        """Start the server and wait until it accepts connections on its port.

        Raises :class:`SqlServerError` when the port is taken, or when Spark exits or does not
        answer within ``timeout`` seconds (naming its log).
        """
        taken = _port_free(self.host, self.port)
        if taken is not None:
            reason = "in use" if taken.errno == errno.EADDRINUSE else taken.strerror or taken
            raise SqlServerError(
                f"cannot serve SQL on {self.host}:{self.port}: the address is {reason}; "
                "stop what listens there or choose another port with --port"
            )
        _ensure_default_namespace(self.settings)
        home = _spark_home()
        conf = lake_spark_conf(self.settings, self.log_path)
        argv = thrift_server_argv(home, conf, self.host, self.port, self._hiveconf)
        env = thrift_server_env(self.settings, self._env, home)
        workdir = self.settings.data_dir / "sql-server"
        workdir.mkdir(parents=True, exist_ok=True)  # derby.log and Spark's scratch files
        with (workdir / "spark-submit.out").open("ab") as out:
            # Its own process group: a Ctrl-C of the terminal reaches the CLI, which stops it.
            self._proc = subprocess.Popen(
                argv, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        connect_host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        connect_host = "::1" if connect_host == "::" else connect_host
        while not _answers(connect_host, self.port):
            code = self._proc.poll()
            if code is not None:
                self._proc = None
                raise SqlServerError(
                    f"the Thrift server exited with code {code} before serving; see "
                    f"{self.log_path} and {workdir / 'spark-submit.out'}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise SqlServerError(
                    f"the Thrift server did not answer on {self.host}:{self.port} within "
                    f"{timeout:.0f} s; see {self.log_path}"
                )
            time.sleep(0.25)

    def wait(self) -> int:
        """Block until the server exits; its exit code."""
        if self._proc is None:
            return 0
        return self._proc.wait()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server: SIGTERM (Spark's shutdown hooks close the sessions), then kill."""
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc, timeout)

    def __enter__(self) -> SqlServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
