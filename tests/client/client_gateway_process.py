"""A real gateway (``python -m api``) in a subprocess, for end-to-end client tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesync.tokens import mint_token

ROOT = Path(__file__).resolve().parents[2]
SECRET = "client-e2e-secret-client-e2e-secret-0123"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Gateway:
    """A gateway subprocess on a free port with its own data directory."""

    data_dir: Path
    port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"gateway-{self.port}.log"

    def start(self) -> None:
        # A restart reuses the port, which another process may hold for a moment (an outgoing
        # connection's ephemeral port): a gateway that exits at once is started again.
        for _ in range(5):
            if self._launch():
                return
            time.sleep(0.5)
        pytest.fail(f"the gateway did not start:\n{self.log_path.read_text()[-3000:]}")

    def _launch(self) -> bool:
        env = {
            **os.environ,
            "LAKESYNC_JWT_SECRET": SECRET,
            "LAKESYNC_DATA_DIR": str(self.data_dir),
            "LAKESYNC_WS_RATE_LIMIT": "0",
        }
        env.pop("LAKESYNC_CONFIG", None)
        cmd = [sys.executable, "-m", "api", "--host", "127.0.0.1", "--port", str(self.port)]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [*cmd, "--data-dir", str(self.data_dir)],
                env=env,
                cwd=self.data_dir.parent,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                self.proc = None
                return False
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the gateway did not answer:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    @staticmethod
    def token(sub: str, gw: str, **kw: Any) -> str:
        return mint_token(SECRET, sub=sub, gw=gw, **kw)
