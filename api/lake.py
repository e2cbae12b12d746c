"""The gateway's edge to the lake: the landing flusher and the scheduled pipeline.

``lakesync up`` runs the :class:`~lakesync.lake.landing.LandingFlusher` next to the gateway (the
landing table's single writer) every ``flush_interval`` seconds and on
``POST /v1/admin/flush/{gw}``, and, if ``pipeline_interval`` is set, a ``lakesync pipeline run``
subprocess on that schedule (Spark stays out of the gateway process). Without the ``pipeline``
extra the gateway still serves; the flush route then reports that nothing was flushed.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import anyio.to_thread

from api.settings import GatewaySettings
from api.store import HotLog

if TYPE_CHECKING:
    from lakesync.lake.landing import LandingFlusher

__all__ = ["lake_jobs"]

_log = logging.getLogger(__name__)

Flusher = Callable[[str], Awaitable[None]]


def _landing_flusher(settings: GatewaySettings, store: HotLog) -> LandingFlusher | None:
    try:
        from lakesync.lake.bootstrap import init_catalog_tables
        from lakesync.lake.catalog import open_catalog
        from lakesync.lake.landing import LandingFlusher
        from lakesync.lake.settings import LakeSettings

        lake = LakeSettings.from_env(settings.data_dir)
        init_catalog_tables(lake)
        return LandingFlusher(open_catalog(lake), store, mark_flushed=store.mark_flushed)
    except ModuleNotFoundError as exc:
        _log.warning("landing flusher off: missing %s (pip install 'lakesync[pipeline]')", exc.name)
        return None


def _pipeline_loop(settings: GatewaySettings, stop: threading.Event) -> None:
    command = [sys.executable, "-m", "lakesync.cli", "pipeline", "run"]
    command += ["--data-dir", str(settings.data_dir)]
    while not stop.wait(settings.pipeline_interval):
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            _log.error("scheduled pipeline run failed:\n%s", done.stderr[-4000:])


@contextmanager
def lake_jobs(settings: GatewaySettings, store: HotLog) -> Iterator[Flusher | None]:
    """Run the lake's background jobs while the block runs; yield the admin flush callable."""
    landing = _landing_flusher(settings, store)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    flusher: Flusher | None = None
    if landing is not None:
        flush = landing.flush

        async def flusher(gw: str) -> None:
            await anyio.to_thread.run_sync(flush)

        if settings.flush_interval > 0:
            threads.append(
                threading.Thread(
                    target=landing.run,
                    args=(stop,),
                    kwargs={"interval_s": settings.flush_interval},
                    name="landing-flusher",
                    daemon=True,
                )
            )
        if settings.pipeline_interval > 0:
            threads.append(
                threading.Thread(
                    target=_pipeline_loop, args=(settings, stop), name="pipeline", daemon=True
                )
            )
    for t in threads:
        t.start()
    try:
        yield flusher
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
