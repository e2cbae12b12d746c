"""The one place the lakehouse sets process environment variables, briefly and under a lock;
and how it stops a child process it started.

Two libraries the lakehouse runs in process read settings only from ``os.environ``:

- dbt: each ``dbtRunner().invoke`` copies ``os.environ`` into its invocation context
  (dbt-core's ``preflight``), and ``env_var()`` in ``profiles.yml`` and the macros reads that
  copy; there is no argument to hand it an environment. Passing the settings as ``--vars``
  instead would write them (the catalog password too) into ``target/run_results.json``, and a
  plain ``dbt`` run of the project reads the same ``env_var()`` names.
- PySpark: the session's Python worker executable (``PYSPARK_PYTHON``) and the JVM's bind
  address (``SPARK_LOCAL_IP``) are read from the environment when the session starts.

:func:`process_environment` sets the given variables for the duration of its block and then
restores every one of them, holding a process-wide lock meanwhile, so two threads never see each
other's values and the process's environment is unchanged after a pipeline run. The lock is the
module's only state: the environment it guards is per process.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

__all__ = ["free_loopback_port", "process_environment", "stop_process"]

_lock = threading.RLock()
"""Held while :func:`process_environment` has the environment changed (reentrant: dbt-spark
may start the Spark session inside a dbt invocation)."""


@contextmanager
def process_environment(values: Mapping[str, str], *, override: bool = True) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` while the block runs (``override=False`` keeps a
    variable the process already has), then restore each variable as it was."""
    with _lock:
        saved = {key: os.environ.get(key) for key in values}
        for key, value in values.items():
            if override or saved[key] is None:
                os.environ[key] = value
        try:
            yield
        finally:
            for key, old in saved.items():
                if old is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = old


def stop_process(proc: subprocess.Popen[Any], timeout: float) -> None:
    """Stop a child process: SIGTERM (its shutdown hooks run), up to ``timeout`` seconds to
    exit, then SIGKILL; it is reaped either way. Nothing happens if it has already exited."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
