"""A real gateway process (``python -m api``) on a loopback port, for end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

from tests.api.helpers import SECRET


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``python -m api`` with its own data dir; ``env`` adds or overrides variables."""

    def __init__(self, data_dir: Path, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.extra_env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"gateway-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ServerProcess:
        """Start the process and wait until ``/ready`` answers 200."""
        env = {**os.environ, "LAKESYNC_JWT_SECRET": SECRET, **self.extra_env}
        env.pop("LAKESYNC_CONFIG", None)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "api",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--data-dir",
                    str(self.data_dir),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=Path(__file__).resolve().parents[2],
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited early:\n{self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"gateway not ready:\n{self.log_path.read_text()[-3000:]}")

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

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
