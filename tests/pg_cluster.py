"""A private PostgreSQL server of a test's own (initdb as the ``postgres`` user in a temporary
directory, on a free port), for what the shared test server must not see: server-start
settings, a restart or a crash. Skips where the PostgreSQL binaries or root are missing (fails
under CI)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.gateway_process import free_port, reserved_port

__all__ = ["PgCluster", "postgres_bin", "private_postgres", "started_cluster"]


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL server's ``bin`` directory, or None."""
    for version in sorted(Path("/usr/lib/postgresql").glob("*"), reverse=True):
        if (version / "bin" / "initdb").exists():
            return version / "bin"
    return None


class PgCluster:
    """A PostgreSQL server in ``base`` (its data dir and socket dir) on ``port``, with the
    ``-c`` settings of ``options``; trust authentication for ``postgres`` on loopback. ``port``:
    a :func:`~tests.gateway_process.free_port` unless given."""

    def __init__(self, bindir: Path, base: Path, options: str = "", port: int | None = None
                 ) -> None:
        self._bindir = bindir
        self._base = base
        self.port = free_port() if port is None else port
        self._options = f"-p {self.port} -k {base} -c listen_addresses=127.0.0.1 {options}"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", str(self._bindir / tool), *args],
                       check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self._run("initdb", "-D", str(self._base / "data"), "-A", "trust", "-U", "postgres")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run("pg_ctl", "-D", str(self._base / "data"), "-w", "-l",
                  str(self._base / "log"), "-o", self._options, "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: sessions are ended; ``immediate``: a crash)."""
        self._run("pg_ctl", "-D", str(self._base / "data"), "-w", "-m", mode, "stop")


@contextmanager
def private_postgres(options: str = "") -> Iterator[PgCluster]:
    """A started :class:`PgCluster`, stopped and removed afterwards."""
    if postgres_bin() is None or shutil.which("runuser") is None or os.geteuid() != 0:
        reason = "needs the PostgreSQL server binaries and root (to run initdb as postgres)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    base = Path(tempfile.mkdtemp(prefix="lakesync-pg-"))
    cluster = started_cluster(base, options)
    try:
        yield cluster
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):  # stopped already
            cluster.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


def started_cluster(base: Path, options: str = "", *, reserve: bool = False) -> PgCluster:
    """A :class:`PgCluster` made (initdb) in ``base`` and started; raises RuntimeError where the
    PostgreSQL binaries or root are missing. ``reserve``: on a
    :func:`~tests.gateway_process.reserved_port`, which no other process takes while the server
    restarts."""
    bindir = postgres_bin()
    if bindir is None or shutil.which("runuser") is None or os.geteuid() != 0:
        raise RuntimeError("needs the PostgreSQL server binaries and root (initdb as postgres)")
    base.mkdir(parents=True, exist_ok=True)
    shutil.chown(base, "postgres")
    cluster = PgCluster(bindir, base, options, reserved_port() if reserve else None)
    cluster.init()
    cluster.start()
    return cluster
