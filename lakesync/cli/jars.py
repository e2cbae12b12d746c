"""Spark's jars, downloaded the first time a command starts Spark on a machine: the command's
progress line says so (how much, that it happens once) instead of a silent "starting Spark"
of a minute or more."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, TaskID

from lakesync.cli.output import plain, printable
from lakesync.lakehouse.bootstrap import fetch_jars, missing_jars
from lakesync.lakehouse.settings import MAVEN_CENTRAL, SPARK_JARS, MavenJar

__all__ = ["ProgressLine", "Say", "fetch_spark_jars", "say_on"]

Say = Callable[[str, bool], None]
"""Shows a line of the download: ``news`` for its start and end (worth a line in a log), not
for the byte counts in between (a terminal's progress line only)."""


def _mb(size: int) -> str:
    return f"{size / 1e6:.0f} MB"


def fetch_spark_jars(
    jars_dir: Path,
    say: Say,
    jars: tuple[MavenJar, ...] = SPARK_JARS,
    repository: str = MAVEN_CENTRAL,
) -> None:
    """Download those of ``jars`` missing from ``jars_dir`` now, telling ``say`` as it goes;
    nothing is said when all are there (every run after the first)."""
    missing = missing_jars(jars_dir, jars)
    if not missing:
        return
    total = sum(jar.size for jar in missing)
    started = time.monotonic()
    received: dict[str, int] = {}

    def progress(jar: MavenJar, done: int) -> None:
        received[jar.file_name] = done
        say(f"downloading Spark's jars (once): {_mb(sum(received.values()))} of {_mb(total)}, "
            f"{jar.file_name}", False)

    say(f"downloading Spark's jars ({len(missing)} files, {_mb(total)}) into {jars_dir}: once, "
        "later runs use them", True)
    fetch_jars(jars_dir, tuple(missing), repository, progress)
    say(f"Spark's jars downloaded in {time.monotonic() - started:.0f} s: starting Spark", True)


def say_on(console: Console, describe: Callable[[str], None] | None) -> Say:
    """How a command shows the download: ``describe`` sets its progress line's text in a
    terminal (None elsewhere: then each news line is printed on ``console``)."""

    def say(line: str, news: bool) -> None:
        if describe is not None:
            describe(printable(line))
        elif news:
            console.print(plain(line), soft_wrap=True)

    return say


class ProgressLine:
    """A command's view whose progress bar's text says what happens (set by the subclass in a
    terminal: ``_progress`` and its ``_task``; None elsewhere), with the steps before Spark
    starts shown on it."""

    _console: Console
    _progress: Progress | None
    _task: TaskID | None

    def preparing(self, line: str, news: bool) -> None:
        """A step before Spark starts (downloading its jars, :func:`fetch_spark_jars`)."""
        say_on(self._console, self._describe if self._progress is not None else None)(line, news)

    def _describe(self, text: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=text)
            self._progress.refresh()
