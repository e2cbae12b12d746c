"""How a command finds the data dir's gateway to hand its run to (``<data dir>/gateway.json``),
and when it runs in its own process instead: ``--in-process``, no gateway, a gateway gone (its
pid dead, or its address silent), another configuration file. The hand-over itself, on a real
gateway and Spark worker: ``tests/lakehouse/test_cli_handover.py``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lakesync.api.datadir import GATEWAY_FILE, GatewayAddress, advertise, running_gateway
from lakesync.cli.handover import find_gateway, hand_over, lake_job
from lakesync.config import load_config
from tests.api.helpers import SECRET
from tests.gateway_process import free_port


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_the_gateway_file_lives_while_the_gateway_serves(tmp_path: Path) -> None:
    me = GatewayAddress("http://127.0.0.1:1", pid=1, config=None)  # pid 1 is alive
    with advertise(tmp_path, me) as path:
        assert path == tmp_path / GATEWAY_FILE
        assert running_gateway(tmp_path) == me
    assert not (tmp_path / GATEWAY_FILE).exists()


def test_a_newer_gateways_file_is_left_alone(tmp_path: Path) -> None:
    newer = GatewayAddress("http://127.0.0.1:2", pid=1)
    with advertise(tmp_path, GatewayAddress("http://127.0.0.1:1", pid=1)):
        (tmp_path / GATEWAY_FILE).write_bytes(b'{"url":"http://127.0.0.1:2","pid":1}')
    assert running_gateway(tmp_path) == newer


@pytest.mark.parametrize("content", [b"", b"not json", b'{"url": "x"}'])
def test_an_unreadable_file_is_no_gateway(tmp_path: Path, content: bytes) -> None:
    (tmp_path / GATEWAY_FILE).write_bytes(content)
    assert running_gateway(tmp_path) is None


def test_the_file_of_a_gateway_gone_is_no_gateway(tmp_path: Path) -> None:
    (tmp_path / GATEWAY_FILE).write_bytes(b'{"url":"http://127.0.0.1:1","pid":%d}' % _dead_pid())
    assert running_gateway(tmp_path) is None


def test_a_command_runs_here_unless_the_gateway_serves_its_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = tmp_path / "lakesync.yaml"
    config_file.write_text("server:\n  port: 1\n", encoding="utf-8")
    config = load_config(config_file, env={"LAKESYNC_JWT_SECRET": SECRET})
    url = f"http://127.0.0.1:{free_port()}"
    with advertise(tmp_path, GatewayAddress(url, 1, str(config_file.resolve()))):
        assert find_gateway(tmp_path, config, in_process=True) is None
        found = find_gateway(tmp_path, config, in_process=False)
        assert found is not None and found.address.url == url
        # Its address does not answer: the command runs here, saying why.
        assert hand_over(found, "pipeline", lambda event: None) is None
        assert "does not answer" in capsys.readouterr().err
        # Another configuration file (or none), or no secret to ask with: here too.
        other = load_config(None, env={"LAKESYNC_JWT_SECRET": SECRET})
        assert find_gateway(tmp_path, other, in_process=False) is None
        assert "with the configuration" in capsys.readouterr().err
        unsigned = load_config(config_file, env={})
        assert find_gateway(tmp_path, unsigned, in_process=False) is None
        assert "LAKESYNC_JWT_SECRET is not set" in capsys.readouterr().err
    assert find_gateway(tmp_path, config, in_process=False) is None  # no gateway: here


def test_one_function_decides_where_a_commands_job_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = tmp_path / "lakesync.yaml"
    config_file.write_text("server:\n  port: 1\n", encoding="utf-8")
    config = load_config(config_file, env={"LAKESYNC_JWT_SECRET": SECRET})
    url = f"http://127.0.0.1:{free_port()}"
    with advertise(tmp_path, GatewayAddress(url, 1, str(config_file.resolve()))):
        # A job of the warm worker goes to the gateway serving the data dir ...
        build = lake_job("build", tmp_path, config, in_process=False)
        assert not build.runs_here and build.gateway is not None
        # ... unless --in-process; tiering needs no Spark and always runs here.
        assert lake_job("compact", tmp_path, config, in_process=True).runs_here
        assert lake_job("tier", tmp_path, config, in_process=False).runs_here
        # The gateway's address does not answer: the job runs here, saying why.
        ran = build.run(lambda event: None, here=lambda: "here", handed=lambda reply: "there")
        assert ran == "here"
        assert "does not answer" in capsys.readouterr().err
