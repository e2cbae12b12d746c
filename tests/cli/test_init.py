"""``lakesync init``: the starter files load (and so do the parts shown commented out), existing
files are kept unless ``--force``, and in an empty directory ``lakesync init`` then ``lakesync
up`` serves a gateway a client syncs through."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from lakesync.cli.init import STARTER_CONFIG, write_starter
from lakesync.cli.main import main
from lakesync.client import LakeSyncClient
from lakesync.config import load_config
from tests.gateway_process import ROOT, free_port


def _uncommented(text: str) -> str:
    """The starter config with its commented-out destination and connector switched on."""
    out = []
    for line in text.splitlines():
        body = line[2:] if line.startswith("# ") else None
        on = body is not None and (body.startswith("  ") or body.split(":")[0] in {
            "destinations", "connectors"})
        out.append(body if on and body is not None else line)
    return "\n".join(out) + "\n"


def test_the_starter_config_loads_with_and_without_its_commented_parts(tmp_path: Path) -> None:
    written = write_starter(tmp_path)
    assert [p.name for p in written] == ["lakesync.yaml", ".env"]
    config = load_config(tmp_path / "lakesync.yaml", env={})
    assert list(config.gateways) == ["app"] and not config.destinations and not config.connectors
    assert config.gateways["app"].rules is not None
    full = tmp_path / "full.yaml"
    full.write_text(_uncommented(STARTER_CONFIG))
    env = {"WAREHOUSE_URL": "postgresql://u@h/db", "SHOP_DSN": "postgresql://u@h/shop"}
    config = load_config(full, env=env)
    assert list(config.destinations) == ["warehouse"] and list(config.connectors) == ["shop"]
    secret = (tmp_path / ".env").read_text().split("LAKESYNC_JWT_SECRET=")[1].strip()
    assert len(secret) >= 32
    assert stat.S_IMODE((tmp_path / ".env").stat().st_mode) == 0o600


def test_init_keeps_existing_files_unless_forced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("MINE=1\n")
    assert main(["init"]) == 2
    assert ".env already exist" in capsys.readouterr().err
    assert (tmp_path / ".env").read_text() == "MINE=1\n"
    assert not (tmp_path / "lakesync.yaml").exists()
    assert main(["init", "--force"]) == 0
    out = capsys.readouterr().out
    assert "LAKESYNC_JWT_SECRET=" in (tmp_path / ".env").read_text()
    commands = [line for line in out.splitlines() if line.startswith("  ")]
    assert len(commands) == 3 and "lakesync up" in commands[1]


@pytest.mark.slow
def test_init_then_up_serves_a_gateway_a_client_syncs_through(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("LAKESYNC_CONFIG", "LAKESYNC_JWT_SECRET", "LAKESYNC_DATA_DIR"):
        env.pop(name, None)
    cli = [sys.executable, "-m", "lakesync.cli.main"]
    done = subprocess.run([*cli, "init"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    # `set -a; . ./.env; set +a`, as init says
    for line in (tmp_path / ".env").read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    port = free_port()
    log = (tmp_path / "up.log").open("wb")
    gateway = subprocess.Popen([*cli, "up", "--port", str(port)], cwd=tmp_path, env=env,
                               stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            assert gateway.poll() is None, (tmp_path / "up.log").read_text()
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "up.log").read_text()
            time.sleep(0.2)
        minted = subprocess.run([*cli, "token", "--sub", "alice", "--gw", "app"], cwd=tmp_path,
                                env=env, capture_output=True, text=True, timeout=60, check=True)
        token = minted.stdout.strip()
        todos = {"table": "todos", "columns": [{"name": "title", "type": "string"},
                                               {"name": "done", "type": "boolean"},
                                               {"name": "owner", "type": "string"}]}
        with LakeSyncClient(str(tmp_path / "a.db"), url=url, gateway_id="app",
                            token=token, schemas=[todos]) as a:
            a.upsert("todos", "t1", {"title": "first", "done": False, "owner": "alice"})
            a.sync()
        with LakeSyncClient(str(tmp_path / "b.db"), url=url, gateway_id="app",
                            token=token, schemas=[todos]) as b:
            b.sync()
            assert b.query("select title, owner from todos") == [
                {"title": "first", "owner": "alice"}
            ]
    finally:
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(timeout=60)
        log.close()
