"""A real gateway process (``python -m lakesync.api``) on a loopback port: the one harness of the
end-to-end tests and the benchmarks."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from lakesync.tokens import mint_token
from tests.api.helpers import SECRET

ROOT = Path(__file__).resolve().parents[1]
_PORT_TAKEN = "address already in use"


def process_running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, exited but not reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"  # the state follows the (command)


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_RESERVED_RANGE = (20_000, 32_000)  # below Linux's ephemeral range (32768-60999)
_RESERVATIONS = Path("/tmp/lakesync-test-ports")
_held: list[Any] = []  # the lock files of this process's reserved ports, open while it lives


def reserved_port() -> int:
    """A loopback port free now and kept for this process while it lives, for a server that
    stops and starts again on the same port (a killed gateway, a restarted PostgreSQL).

    :func:`free_port` draws from the ephemeral range, where any outgoing connection, of this
    process or of another test run on the machine, may take the port while its server is down.
    This one comes from below that range and is locked (``flock`` on a file per port) so that
    concurrent runs never pick the same one; the lock goes with the process."""
    _RESERVATIONS.mkdir(exist_ok=True)
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(*_RESERVED_RANGE)
        lock = (_RESERVATIONS / str(port)).open("a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                lock.close()
                continue
        _held.append(lock)
        return port
    raise RuntimeError("no free port to reserve")


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Serve an ASGI app (a gateway on a store the test also holds) over real HTTP from a
    thread of this process; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        # uvicorn exits its thread when it cannot bind: fail instead of waiting for ever.
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()


class ServerProcess:
    """``python -m lakesync.api`` with its own data dir; ``env`` adds or overrides variables (the
    JWT
    secret is :data:`SECRET` unless ``env`` sets ``LAKESYNC_JWT_SECRET``), ``config`` is passed
    as ``--config``. The port (``port``, else a :func:`free_port`) stays the same across
    :meth:`restart`."""

    def __init__(
        self, data_dir: Path, env: dict[str, str] | None = None, config: Path | None = None,
        port: int | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.port = free_port() if port is None else port
        self.extra_env = env or {}
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"gateway-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def secret(self) -> str:
        return self.extra_env.get("LAKESYNC_JWT_SECRET", SECRET)

    def token(self, sub: str, gw: str, **claims: Any) -> str:
        """A token this gateway accepts (``role``, ``ttl_s`` and other claims as keywords)."""
        return mint_token(self.secret, sub=sub, gw=gw, **claims)

    def start(self, timeout: float = 60.0) -> ServerProcess:
        """Start the process and wait until ``/ready`` answers 200. A restart reuses the port,
        which an outgoing connection may hold for a moment: a launch that finds it taken is
        tried again."""
        for _ in range(5):
            if self._launch(timeout):
                return self
            time.sleep(0.5)
        raise RuntimeError(f"gateway port {self.port} stayed taken:\n{self._log_tail()}")

    def spawn(self) -> int:
        """Start the process without waiting for it; returns where its output starts in
        :attr:`log_path`."""
        env = {**os.environ, "LAKESYNC_JWT_SECRET": SECRET, **self.extra_env}
        env.pop("LAKESYNC_CONFIG", None)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            logged = log.tell()
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lakesync.api",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--data-dir",
                    str(self.data_dir),
                    *(["--config", str(self.config)] if self.config is not None else []),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        return logged

    def _launch(self, timeout: float) -> bool:
        logged = self.spawn()
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                with open(self.log_path, "rb") as log:
                    log.seek(logged)
                    if _PORT_TAKEN in log.read().decode(errors="replace").lower():
                        return False
                raise RuntimeError(f"gateway exited early:\n{self._log_tail()}")
            try:
                if httpx.get(f"{self.url}/ready", timeout=1).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"gateway not ready:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def children(self) -> list[int]:
        """The pids of the process's running children (its pipeline worker once started), read
        from ``/proc`` (each thread's own: the worker is started by the gateway's pipeline
        thread)."""
        assert self.proc is not None
        tasks = Path(f"/proc/{self.proc.pid}/task")
        return [int(pid) for children in tasks.glob("*/children")
                for pid in children.read_text().split()]

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        """SIGTERM and wait: the graceful path. Returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise
        return int(self.proc.returncode)

    def restart(self) -> None:
        """Stop gracefully and start again on the same port and data dir."""
        self.stop()
        self.start()

    def __enter__(self) -> ServerProcess:
        if self.proc is not None and self.proc.poll() is None:
            # Already started: a second launch would find the port served by the first (its
            # readiness check answered by it) and leave that process running unowned.
            return self
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()


@contextmanager
def serving(
    proc: subprocess.Popen[bytes], url: str, answers: Callable[[str], bool], log: Path,
    what: str, timeout: float,
) -> Iterator[str]:
    """Yield ``url`` once ``answers(url)`` (within ``timeout`` seconds, else a RuntimeError with
    the tail of ``log`` naming ``what``); stop ``proc`` afterwards (SIGTERM, then SIGKILL)."""
    try:
        deadline = time.monotonic() + timeout
        while not answers(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{what} did not start:\n{text}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
