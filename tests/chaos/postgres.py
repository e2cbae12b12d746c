"""A PostgreSQL cluster of the chaos run's own, in a temporary directory on a free port, so the
run can restart or crash it without disturbing the shared server (initdb and pg_ctl as the
``postgres`` user, as scripts/services.sh does)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.gateway_process import free_port

__all__ = ["PrivatePostgres", "postgres_bin"]


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL server's ``bin`` directory, or None."""
    for version in sorted(Path("/usr/lib/postgresql").glob("*"), reverse=True):
        if (version / "bin" / "initdb").exists():
            return version / "bin"
    return None


class PrivatePostgres:
    """``initdb`` in ``base`` and start on a free loopback port; :meth:`stop` with a mode and
    :meth:`start` again make a restart (``fast``) or a crash (``immediate``)."""

    def __init__(self, base: Path) -> None:
        bindir = postgres_bin()
        if bindir is None or shutil.which("runuser") is None or os.geteuid() != 0:
            raise RuntimeError("needs the PostgreSQL server binaries and root (initdb as postgres)")
        self._bin = bindir
        self.base = base
        self.data = base / "pgdata"
        self.port = free_port()
        base.mkdir(parents=True, exist_ok=True)
        shutil.chown(base, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self.start()

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", str(self._bin / tool), *args],
                       check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        """Start and wait until it accepts connections."""
        options = (f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1"
                   " -c max_connections=300")
        self._run("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.base / "postgres.log"),
                  "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m mode`` (``fast``: sessions ended cleanly; ``immediate``: a crash,
        recovered at the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-m", mode, "stop")
