"""The test network of ``tests/netns.py``: hosts reach each other and the test's namespace over
the bridge, hidden directories are empty on a host only, and everything is gone afterwards, also
when the test fails inside."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.netns import Network, network, wait_for

SERVE = [sys.executable, "-m", "http.server", "8000", "--bind"]


def _fetch(net: Network, client: str, url: str) -> subprocess.CompletedProcess[str]:
    host = next(h for h in net.hosts if h.name == client)
    return host.run([sys.executable, "-c", f"import urllib.request as u; "
                     f"print(u.urlopen({url!r}, timeout=10).read().decode())"], timeout=60)


def _leftovers(tag: str) -> str:
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    return "\n".join(line for line in (namespaces + links).splitlines() if tag in line)


def test_hosts_reach_each_other_and_hidden_dirs_are_empty_there(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    (served / "hello.txt").write_text("over the wire")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "data").write_text("local only")
    with network() as net:
        tag = net.bridge.removeprefix("lsbr")
        server, client = net.add_host("server"), net.add_host("client")
        proc = server.popen([*SERVE, server.ip], log=tmp_path / "server.log", cwd=served)
        wait_for("the http server", lambda: server.reachable(8000), timeout=60)
        assert server.reachable(8000)  # from the test's namespace, through the bridge
        got = _fetch(net, "client", f"http://{server.ip}:8000/hello.txt")
        assert got.returncode == 0 and got.stdout.strip() == "over the wire", got.stderr
        # Only the host's own interfaces: the machine's loopback is not the server's.
        local = _fetch(net, "client", "http://127.0.0.1:8000/hello.txt")
        assert local.returncode != 0
        seen = client.run(["ls", "-A", str(secret)], hide=[secret])
        assert seen.returncode == 0 and seen.stdout == "", seen
        assert (secret / "data").read_text() == "local only"  # still there for the machine
        assert _leftovers(tag)
    assert proc.poll() is not None
    assert _leftovers(tag) == ""


def test_a_failing_test_still_removes_its_network(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), network() as net:
        tag = net.bridge.removeprefix("lsbr")
        host = net.add_host("lonely")
        proc = host.popen(["sleep", "600"], log=tmp_path / "sleep.log")
        raise RuntimeError("boom")
    assert proc.wait(timeout=60) != 0
    assert _leftovers(tag) == ""
