"""The lake's SQL endpoint: an authenticating, read-only front door before Spark's own Thrift
server, speaking the HiveServer2 protocol.

BI tools (Superset, Metabase, DBeaver, Tableau), beeline, PyHive and dbt's ``thrift`` method
connect with a ``jdbc:hive2://host:port/`` or ``hive://host:port/`` URL, a user name and a
token of the gateway's JWT secret as the password (``lakesync token --role analyst``), and
query ``analytics.<table>``, ``lakesync.landing`` and Iceberg's time travel
(``VERSION AS OF``).

Two processes serve it. Spark's ``HiveThriftServer2`` (from the PySpark install, started with
``spark-submit`` and the pipeline's own settings, :func:`lakesync.lakehouse.spark.lake_spark_conf`,
so it sees the lake the pipeline writes) listens on a private loopback port and lets in only a
client that knows a key written fresh at each start (its ``CUSTOM`` authentication, a class
compiled here from ``java/FrontDoorAuthenticator.java``); its environment holds no secret of the
deployment (:func:`thrift_server_env`) and it refuses path-based sources
(``spark.sql.runSQLOnFiles=false``). In front of it, in this process, the front door
(:mod:`lakesync.lakehouse.hive_proxy`) checks each client's token and each statement
(:mod:`lakesync.sql_guard`) before Spark sees them.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import ipaddress
import logging
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from lakesync.delta import validate_gateway_id
from lakesync.errors import AuthError, ForbiddenError, LakeSyncError, ValidationError
from lakesync.lakehouse.catalog import open_catalog, require_lake
from lakesync.lakehouse.hive_proxy import Authenticate, HiveProxy
from lakesync.lakehouse.process_env import free_loopback_port, stop_process
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.spark import driver_environment, lake_spark_conf
from lakesync.tokens import verify_token

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

__all__ = [
    "DEFAULT_GATEWAY",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "SqlServer",
    "SqlServerError",
    "analyst_authenticator",
    "check_bind_address",
    "thrift_server_argv",
    "thrift_server_env",
]

log = logging.getLogger("lakesync.sql_server")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 10000  # HiveServer2's own default, what BI tools propose
DEFAULT_GATEWAY = "lakesync"
"""The gateway id analysts' tokens name by default: the endpoint serves the whole lake, every
gateway's rows, like the deployment-wide admin routes (``lakesync status``)."""
CLIENT_DEFAULT_DATABASE = "default"
THRIFT_SERVER_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
AUTHENTICATOR_CLASS = "lakesync.FrontDoorAuthenticator"
_AUTHENTICATOR_SOURCE = Path(__file__).with_name("java") / "FrontDoorAuthenticator.java"
# The Thrift server needs a Hive metastore for its own session catalog; the lake's tables live in
# the Iceberg catalog, so an in-memory Derby is enough and leaves no metastore_db/ behind.
_METASTORE = "jdbc:derby:memory:lakesync_sql_server;create=true"
# Hive settings an operator may add with --hiveconf: tuning only. Who gets in, on which port and
# transport, is the front door's to decide.
_HIVECONF_ALLOWED = (
    "hive.server2.idle.", "hive.server2.session.check.interval",
    "hive.server2.thrift.min.worker.threads", "hive.server2.thrift.max.worker.threads",
    "hive.server2.thrift.worker.keepalive.time", "hive.server2.async.exec.",
    "hive.server2.thrift.resultset.", "hive.server2.close.session.on.disconnect",
)
# The Thrift server's environment: what a JVM and Spark need, and the standard AWS credential
# variables (an S3 warehouse without keys in the lake's settings reads them); nothing else of
# the caller's (the JWT secret, database DSNs, ${VAR} secrets stay out).
_ENV_KEPT = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR", "JAVA_HOME"})
_ENV_KEPT_PREFIXES = ("LC_", "SPARK_", "PYSPARK_", "HADOOP_", "AWS_")
_NAMESPACES_TTL = 5.0


class SqlServerError(LakeSyncError):
    """The SQL endpoint could not start (port taken, Spark failed): the message says why."""


def check_bind_address(host: str, allow_remote: bool, authenticated: bool = True) -> None:
    """Refuse a non-loopback ``host`` unless ``allow_remote``; without authentication
    (``authenticated`` false) a non-loopback ``host`` is refused whatever the flags."""
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False  # a host name: it may resolve to anything
    if loopback:
        return
    if not authenticated:
        raise ValidationError(
            f"refusing to serve the lake without authentication on {host!r}: --no-auth "
            "serves loopback only; drop --no-auth and give analysts tokens "
            "(lakesync token --role analyst)"
        )
    if not allow_remote:
        raise ValidationError(
            f"refusing to serve the lake on {host!r}, which is not a loopback address; pass "
            "--allow-remote to listen there (clients sign in with a token; consider TLS "
            "through a tunnel or proxy, the HiveServer2 protocol sends it in the clear)"
        )


def analyst_authenticator(jwt_secrets: Sequence[str], gateway: str) -> Authenticate:
    """The check of a client's credentials: the password is a token of gateway ``gateway``
    signed with one of ``jwt_secrets``, of role ``analyst`` or ``admin``; the session's user is
    the token's ``sub``, whatever user name the client sent."""
    validate_gateway_id(gateway)
    if not jwt_secrets:
        raise AuthError("no JWT secret configured; set LAKESYNC_JWT_SECRET")

    def authenticate(user: str, password: str) -> str:
        if password.count(".") != 2:  # none, or a password rather than a JWT
            raise AuthError(
                f"send a token of gateway {gateway!r} as the password "
                f"(lakesync token --sub NAME --gw {gateway} --role analyst)"
            )
        claims = verify_token(password, jwt_secrets, gateway)
        if claims["role"] not in ("analyst", "admin"):
            raise ForbiddenError(
                f"a {claims['role']} token does not read the lake; mint one with --role analyst"
            )
        return str(claims["sub"])

    return authenticate


def _anyone(user: str, password: str) -> str:
    """``--no-auth``: every client is let in under the user name it sent."""
    return user or "anonymous"


def _check_hiveconf(item: str) -> None:
    key, sep, _ = item.partition("=")
    if not sep:
        raise ValidationError(f"--hiveconf {item!r} must look like KEY=VALUE")
    if not key.startswith(_HIVECONF_ALLOWED):
        raise ValidationError(
            f"--hiveconf {key} is not one the SQL endpoint takes: it decides authentication, "
            f"ports and transport itself; allowed: {', '.join(_HIVECONF_ALLOWED)}"
        )


def thrift_server_argv(
    spark_home: Path,
    conf: Mapping[str, str],
    host: str,
    port: int,
    hiveconf: Sequence[str] = (),
    authenticator: tuple[Path, Path] | None = None,
) -> list[str]:
    """The ``spark-submit`` command line of a Thrift server with the Spark settings ``conf``,
    listening on ``host:port``; ``hiveconf`` are extra Hive settings ``KEY=VALUE`` (tuning
    only: see ``_HIVECONF_ALLOWED``). ``authenticator`` is ``(jar, key file)``: the server then
    lets in only a client whose password is the file's key."""
    for item in hiveconf:
        _check_hiveconf(item)
    confs = {
        **conf,
        "spark.app.name": "lakesync-sql-server",
        "spark.hadoop.javax.jdo.option.ConnectionURL": _METASTORE,
        # No `select * from text.`/etc/passwd``: the lake's tables only.
        "spark.sql.runSQLOnFiles": "false",
        # No ${env:…}, ${system:…}, ${spark:…} substituted into statements.
        "spark.sql.variable.substitute": "false",
    }
    classpath = conf.get("spark.jars", "").replace(",", os.pathsep)
    if authenticator is not None:
        jar, keyfile = authenticator
        classpath = os.pathsep.join(p for p in (classpath, str(jar)) if p)
        options = conf.get("spark.driver.extraJavaOptions", "")
        key_option = f"-Dlakesync.sql.keyfile={keyfile}"
        confs["spark.driver.extraJavaOptions"] = f"{options} {key_option}".strip()
    if classpath:
        # Also on the driver's own class path: closing a client's session closes Hive's session
        # class loader, and with it the loader of spark.jars, so the next session's query would
        # fail with NoClassDefFoundError on an Iceberg class.
        confs["spark.driver.extraClassPath"] = classpath
    argv = [str(spark_home / "bin" / "spark-submit"), "--class", THRIFT_SERVER_CLASS]
    for key, value in confs.items():
        argv += ["--conf", f"{key}={value}"]
    hive = [*hiveconf, f"hive.server2.thrift.port={port}", f"hive.server2.thrift.bind.host={host}",
            "hive.server2.transport.mode=binary", "hive.server2.enable.doAs=false"]
    if authenticator is not None:
        hive += ["hive.server2.authentication=CUSTOM",
                 f"hive.server2.custom.authentication.class={AUTHENTICATOR_CLASS}"]
    for item in hive:
        argv += ["--hiveconf", item]
    return [*argv, "spark-internal"]


def thrift_server_env(
    settings: LakeSettings, env: Mapping[str, str], spark_home: Path
) -> dict[str, str]:
    """The environment of the Thrift server process: of ``env``, only what a JVM and Spark
    need (``_ENV_KEPT``: no JWT secret, no DSN, no variable a ``${VAR}`` reference names), with
    Spark's home and this interpreter for Python workers; ``SPARK_LOCAL_IP`` pinned to loopback
    only for a local master (:func:`~lakesync.lakehouse.spark.driver_environment`; a variable
    in ``env`` wins), so on a cluster the executors can reach the driver."""
    kept = {k: v for k, v in env.items() if k in _ENV_KEPT or k.startswith(_ENV_KEPT_PREFIXES)}
    return {**driver_environment(settings), **kept, "SPARK_HOME": str(spark_home),
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


def _authenticator_jar(spark_home: Path, workdir: Path) -> Path:
    """The Thrift server's authenticator as a jar, compiled with the JDK's ``javac`` against
    PySpark's Thrift server classes (once per source: the jar's name holds its hash)."""
    source = _AUTHENTICATOR_SOURCE.read_bytes()
    jar = workdir / f"front-door-{hashlib.sha256(source).hexdigest()[:12]}.jar"
    if jar.exists():
        return jar
    javac = Path(os.environ.get("JAVA_HOME", "/nonexistent")) / "bin" / "javac"
    javac_cmd = str(javac) if javac.exists() else "javac"
    classes = workdir / "front-door-classes"
    classpath = os.pathsep.join(str(j) for j in (spark_home / "jars").glob("*.jar"))
    try:
        done = subprocess.run(
            [javac_cmd, "-nowarn", "--release", "8", "-cp", classpath, "-d", str(classes),
             str(_AUTHENTICATOR_SOURCE)],
            capture_output=True, text=True, check=False, timeout=300,
        )
    except FileNotFoundError:
        raise SqlServerError(
            "the SQL endpoint needs a JDK's javac to build its authenticator; install one "
            "(Debian: apt-get install default-jdk-headless) or set JAVA_HOME to a JDK"
        ) from None
    if done.returncode != 0:
        raise SqlServerError(f"javac could not build the SQL endpoint's authenticator: "
                             f"{done.stderr.strip()[:500]}")
    partial = jar.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w") as out:
        for path in sorted(classes.rglob("*.class")):
            out.write(path, path.relative_to(classes).as_posix())
    partial.replace(jar)
    return jar


def _write_key(path: Path) -> str:
    """A fresh random key in ``path``, readable by this user only."""
    key = secrets.token_urlsafe(32)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(key)
    return key


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


class _LakeNamespaces:
    """The lake's namespaces, read from its catalog at most every few seconds (a pipeline run
    may add one); the last answer stands while the catalog does not answer."""

    def __init__(self, settings: LakeSettings) -> None:
        self._settings = settings
        self._catalog: Catalog | None = None  # opened once, again after a failure
        self._lock = threading.Lock()
        self._known: frozenset[str] = frozenset({CLIENT_DEFAULT_DATABASE})
        self._read_at = float("-inf")

    def __call__(self) -> Collection[str]:
        with self._lock:
            if time.monotonic() - self._read_at < _NAMESPACES_TTL:
                return self._known
            try:
                if self._catalog is None:
                    self._catalog = open_catalog(self._settings)
                listed = self._catalog.list_namespaces()
                self._known = frozenset(".".join(ns) for ns in listed)
            except Exception as exc:  # an outage: keep the last answer
                self._catalog = None
                log.warning("the SQL endpoint could not list the lake's namespaces: %s", exc)
            self._read_at = time.monotonic()
            return self._known


class SqlServer:
    """The SQL endpoint for the lake of ``settings`` on ``host:port``: ``start()`` returns when
    it accepts connections, ``stop()`` (or leaving the ``with`` block) ends it. ``authenticate``
    checks each client (:func:`analyst_authenticator`); None lets anyone in (``--no-auth``,
    loopback only)."""

    def __init__(
        self,
        settings: LakeSettings,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        hiveconf: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        authenticate: Authenticate | None = None,
    ) -> None:
        check_bind_address(host, allow_remote=True, authenticated=authenticate is not None)
        self.settings = settings
        self.host = host
        self.port = port
        self.log_path = settings.data_dir / "sql-server.log"
        self._hiveconf = tuple(hiveconf)
        self._env = dict(os.environ if env is None else env)
        self._authenticate = authenticate or _anyone
        self._proc: subprocess.Popen[bytes] | None = None
        self._door: HiveProxy | None = None

    @property
    def url(self) -> str:
        """The JDBC URL clients connect with (``hive://host:port/default`` for SQLAlchemy)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"jdbc:hive2://{host}:{self.port}/default"

    @property
    def pid(self) -> int | None:
        """The Thrift server's process id while it runs."""
        return None if self._proc is None or self._proc.poll() is not None else self._proc.pid

    def start(self, timeout: float = 180.0) -> None:
        """Start Spark's Thrift server, wait until it answers, then open the front door.

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
        workdir = self.settings.data_dir / "sql-server"
        workdir.mkdir(parents=True, exist_ok=True)  # derby.log and Spark's scratch files
        jar = _authenticator_jar(home, workdir)
        keyfile = workdir / "front-door.key"
        key = _write_key(keyfile)
        backend_port = free_loopback_port()
        conf = lake_spark_conf(self.settings, self.log_path)
        argv = thrift_server_argv(home, conf, "127.0.0.1", backend_port, self._hiveconf,
                                  (jar, keyfile))
        env = thrift_server_env(self.settings, self._env, home)
        with (workdir / "spark-submit.out").open("ab") as out:
            # Its own process group: a Ctrl-C of the terminal reaches the CLI, which stops it.
            self._proc = subprocess.Popen(
                argv, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not _answers("127.0.0.1", backend_port):
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
                    f"the Thrift server did not answer within {timeout:.0f} s; see "
                    f"{self.log_path}"
                )
            time.sleep(0.25)
        self._door = HiveProxy(self.host, self.port, backend_port, key, self._authenticate,
                               _LakeNamespaces(self.settings))
        try:
            self._door.start()
        except OSError as exc:
            self.stop()
            raise SqlServerError(
                f"cannot serve SQL on {self.host}:{self.port}: {exc.strerror or exc}; choose "
                "another port with --port"
            ) from None

    def wait(self) -> int:
        """Block until the Thrift server exits; its exit code."""
        if self._proc is None:
            return 0
        return self._proc.wait()

    def stop(self, timeout: float = 30.0) -> None:
        """Close the front door, then stop the Thrift server: SIGTERM (Spark's shutdown hooks
        close the sessions), then kill."""
        door, self._door = self._door, None
        if door is not None:
            door.stop()
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
