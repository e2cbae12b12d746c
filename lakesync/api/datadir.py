"""One ``lakesync up`` per data dir on the embedded store: a lock file held while it runs.

The embedded SQLite hot log and the landing flusher assume a single gateway process per data
dir (a second one would run a second flusher into the same landing table). ``lakesync up``
therefore takes an exclusive ``flock`` on ``<data dir>/lakesync.lock`` for its lifetime; the
kernel drops it when the process ends, even on ``kill -9``, so a stale file never blocks a
restart. Several gateway processes share one data dir only with a PostgreSQL store, which elects
the process that runs each lake job instead (``lakesync.lakehouse.schedule``).

While it serves with its pipeline worker, ``lakesync up`` also writes ``<data dir>/gateway.json``
(:func:`advertise`): its URL, pid and configuration file, so ``lakesync pipeline run``,
``materialise`` and ``compact`` on the same data dir find it (:func:`running_gateway`) and hand
their run to its warm worker instead of starting a JVM of their own.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

from lakesync.errors import ConfigError

__all__ = [
    "GATEWAY_FILE", "LOCK_FILE", "GatewayAddress", "advertise", "hold_data_dir", "running_gateway"
]

LOCK_FILE = "lakesync.lock"

GATEWAY_FILE = "gateway.json"
"""Where a serving ``lakesync up`` says how to reach it, in its data dir."""


class GatewayAddress(msgspec.Struct, frozen=True):
    """How to reach the gateway serving a data dir: its base URL (a loopback address when it
    listens on every interface), its process id and the configuration file it runs with (None:
    none, the environment's settings)."""

    url: str
    pid: int
    config: str | None = None


@contextmanager
def advertise(data_dir: Path, address: GatewayAddress) -> Iterator[Path]:
    """Write ``address`` to the data dir's :data:`GATEWAY_FILE` for the block (yields its path),
    then remove it unless another process has written its own since."""
    path = data_dir / GATEWAY_FILE
    partial = path.with_name(f".{GATEWAY_FILE}.{os.getpid()}")
    partial.write_bytes(msgspec.json.encode(address))
    partial.replace(path)  # readers never see half a file
    try:
        yield path
    finally:
        if running_gateway(data_dir, alive=lambda pid: True) == address:
            path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def running_gateway(
    data_dir: Path, alive: Callable[[int], bool] = _alive
) -> GatewayAddress | None:
    """The address the data dir's gateway advertised, if its process is ``alive``; None when no
    gateway serves the data dir (no file, a stale one of a process gone, or an unreadable one).
    Whether the address answers is the caller's first request."""
    with contextlib.suppress(OSError, msgspec.DecodeError):
        found = msgspec.json.decode((data_dir / GATEWAY_FILE).read_bytes(), type=GatewayAddress)
        if alive(found.pid):
            return found
    return None


@contextmanager
def hold_data_dir(data_dir: Path) -> Iterator[Path]:
    """Hold the data dir's lock file for the block (yields its path); raise
    :class:`ConfigError` naming the holder's pid, the dir and what to do when another process
    holds it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            raise ConfigError(
                f"the data dir {data_dir} is in use by another lakesync process (pid {holder}, "
                f"lock file {path}); stop that process first or give this one another "
                "--data-dir (several gateway processes can share a data dir only with a "
                "postgresql:// store_url)"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield path
    finally:
        os.close(fd)  # releases the lock
