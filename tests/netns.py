"""Separate hosts on one machine: Linux network namespaces joined by a bridge, for tests of
deployments that span machines (a Spark cluster whose executors reach the lake only over the
network).

:func:`network` yields a :class:`Network`; each :meth:`Network.add_host` is a namespace with its
own address on one /24 behind a bridge in the test's own namespace (which holds the subnet's
``.1``, so the test process reaches every host and every host reaches it). Hosts get no default
route: anything off the subnet (the machine's loopback services, DNS) fails at once instead of
timing out, so a host cannot use what a real separate machine would not have. A host's processes
can also get directories hidden from them (an empty tmpfs over each, in a mount namespace of
their own), so a "host" cannot read another one's files through the shared disk.

Everything made is removed when the ``with`` block ends, also on failure: the processes started
through :meth:`Host.popen` (their whole process group), the namespaces, veths and bridge. Without
root or ``ip``/``unshare`` (or where namespaces cannot be made), :func:`network` skips the test
with the reason.
"""

from __future__ import annotations

import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

__all__ = ["Host", "Network", "NetworkError", "network", "wait_for"]


def wait_for(what: str, check: Callable[[], bool], timeout: float = 120.0) -> None:
    """Poll ``check`` until it is true; fail naming ``what`` after ``timeout`` seconds (generous:
    a loaded CI machine starts JVMs slowly)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


class NetworkError(RuntimeError):
    """An ``ip`` command failed (the message has its stderr)."""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass
class Host:
    """One network namespace: a machine with the address :attr:`ip` on the test network."""

    name: str
    netns: str
    ip: str
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    def command(self, args: Sequence[str], hide: Sequence[Path] = ()) -> list[str]:
        """``args`` as a command line that runs in this host's namespace, with each directory of
        ``hide`` covered by an empty tmpfs in a mount namespace of the command's own (private
        propagation: the host's view never leaks back to the machine)."""
        mounts = "".join(
            f"mount -t tmpfs -o size=1m,mode=0755 lakesync-hidden {shlex.quote(str(p))} || "
            "exit 97; "
            for p in hide
        )
        return [
            "ip", "netns", "exec", self.netns,
            "unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", mounts + 'exec "$@"', "sh", *args,
        ]

    def popen(
        self,
        args: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
        hide: Sequence[Path] = (),
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``args`` on this host (stdout and stderr to ``log``), in a process group of its
        own that the network ends with it."""
        out: IO[Any] = log.open("ab")
        try:
            proc = subprocess.Popen(
                self.command(args, hide), env=dict(env) if env is not None else None,
                stdout=out, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True,
            )
        finally:
            out.close()
        self._procs.append(proc)
        return proc

    def run(
        self,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        hide: Sequence[Path] = (),
        timeout: float = 600.0,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``args`` on this host to the end; its output is captured (text). Past
        ``timeout`` its whole process group is killed (a JVM it started too) and
        :class:`subprocess.TimeoutExpired` raised."""
        with subprocess.Popen(
            self.command(args, hide), env=dict(env) if env is not None else None,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
            start_new_session=True,
        ) as proc:
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                raise
            finally:
                _signal_group(proc, signal.SIGKILL)  # what it left running
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def pids(self) -> list[int]:
        """Process ids of the commands started with :meth:`popen` that still run."""
        return [p.pid for p in self._procs if p.poll() is None]

    def reachable(self, port: int) -> bool:
        """Whether something on this host accepts TCP connections on ``port`` (seen from the
        test's own namespace, through the bridge)."""
        try:
            with socket.create_connection((self.ip, port), timeout=2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        """End every process started on this host: SIGTERM to its group, SIGKILL after 30 s."""
        for proc in self._procs:
            _signal_group(proc, signal.SIGTERM)
        for proc in self._procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=30)
            # The group may outlive its leader (a daemon's children, e.g. Spark's executors).
            _signal_group(proc, signal.SIGKILL)
        self._procs.clear()


def _signal_group(proc: subprocess.Popen[Any], sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class Network:
    """A bridge in the test's namespace (address :attr:`gateway`) and the hosts behind it."""

    def __init__(self, stack: ExitStack) -> None:
        # Names are unique per test process: interface names have at most 15 characters.
        self._tag = f"{os.getpid() % 100_000:05d}"
        self._stack = stack
        self._subnet = _free_subnet()
        self.bridge = f"lsbr{self._tag}"
        self.gateway = f"{self._subnet}.1"
        self.hosts: list[Host] = []
        _ip("link", "add", self.bridge, "type", "bridge", "forward_delay", "0")
        stack.callback(_ip_quiet, "link", "del", self.bridge)
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        # Fail here, where network() turns it into a skip, if namespaces cannot be made.
        probe = f"lakesync-{self._tag}-probe"
        _ip("netns", "add", probe)
        _ip("netns", "del", probe)

    def add_host(self, name: str) -> Host:
        """A new namespace ``name`` joined to the bridge by a veth pair, with loopback up."""
        index = len(self.hosts)
        host = Host(name, f"lakesync-{self._tag}-{name}", f"{self._subnet}.{10 + index}")
        veth = f"lsv{self._tag}x{index}"
        _ip("netns", "add", host.netns)
        self._stack.callback(_ip_quiet, "netns", "del", host.netns)
        self._stack.callback(host.stop)  # runs first: a namespace outlives its processes
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
        self._stack.callback(_ip_quiet, "link", "del", veth)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", host.netns, "addr", "add", f"{host.ip}/24", "dev", "eth0")
        _ip("-n", host.netns, "link", "set", "eth0", "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")
        self.hosts.append(host)
        return host


def _ip_quiet(*args: str) -> None:
    """``ip`` for clean-up: what is already gone is fine."""
    subprocess.run(["ip", *args], capture_output=True, timeout=30, check=False)


def _free_subnet() -> str:
    """A 10.213.X /24 no interface of this machine uses (tests may run side by side)."""
    used = subprocess.run(
        ["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    candidates = [f"10.213.{x}" for x in random.sample(range(1, 255), 254)]
    return next(c for c in candidates if f" {c}." not in used)


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "unshare", "mount") if shutil.which(tool) is None]
    if missing:
        return f"network namespaces need {', '.join(missing)} on PATH"
    return None


@contextmanager
def network() -> Iterator[Network]:
    """A fresh test network; hosts are added with :meth:`Network.add_host`. Skips the test when
    this machine cannot make namespaces (not root, no ``ip``, no CAP_SYS_ADMIN)."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    with ExitStack() as stack:
        try:
            net = Network(stack)
        except NetworkError as exc:
            pytest.skip(f"cannot make a test network here: {exc}")
        yield net
