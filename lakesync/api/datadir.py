"""One ``lakesync up`` per data dir on the embedded store: a lock file held while it runs.

The embedded SQLite hot log and the landing flusher assume a single gateway process per data
dir (a second one would run a second flusher into the same landing table). ``lakesync up``
therefore takes an exclusive ``flock`` on ``<data dir>/lakesync.lock`` for its lifetime; the
kernel drops it when the process ends, even on ``kill -9``, so a stale file never blocks a
restart. Several gateway processes share one data dir only with a PostgreSQL store, which elects
the process that runs each lake job instead (``lakesync.lakehouse.schedule``).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lakesync.errors import ConfigError

__all__ = ["LOCK_FILE", "hold_data_dir"]

LOCK_FILE = "lakesync.lock"


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
