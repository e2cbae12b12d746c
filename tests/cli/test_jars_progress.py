"""The first command that starts Spark on a machine downloads its jars (about 126 MB): the
progress line says so, with the bytes so far and that it happens once, and a piped run logs a
line when it starts and ends; with the jars in place nothing is said. Jars from a local HTTP
server playing Maven Central, shown through ``lakesync pipeline run``'s view."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from rich.console import Console

from lakesync.cli.jars import fetch_spark_jars
from lakesync.cli.lake import RunView
from lakesync.lakehouse.settings import SPARK_JARS
from tests.lakehouse.test_bootstrap import JAR, PINNED, maven_repository

FILES = {"/maven2/org/example/thing/1.0/thing-1.0.jar": JAR}


def _download(jars: Path, terminal: bool) -> str:
    err = io.StringIO()
    console = Console(file=err, force_terminal=terminal, width=160)
    with maven_repository(FILES) as repo, contextlib.ExitStack() as stack:
        view = RunView(stack, ships=False, console=console)
        fetch_spark_jars(jars, view.preparing, (PINNED,), repo)
    return err.getvalue()


def test_a_terminal_run_says_it_downloads_sparks_jars_once(tmp_path: Path) -> None:
    shown = _download(tmp_path / "jars", terminal=True)
    assert "downloading Spark's jars (1 files" in shown and "once" in shown
    assert "thing-1.0.jar" in shown  # the jar coming in, with the bytes so far
    assert (tmp_path / "jars" / "thing-1.0.jar").read_bytes() == JAR
    assert "downloading" not in _download(tmp_path / "jars", terminal=True)  # then: never


def test_a_piped_run_logs_the_download_in_two_lines(tmp_path: Path) -> None:
    lines = _download(tmp_path / "jars", terminal=False).splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("downloading Spark's jars (1 files, 0 MB) into ")
    assert lines[0].endswith(": once, later runs use them")
    assert lines[1].startswith("Spark's jars downloaded in ") and "starting Spark" in lines[1]
    assert _download(tmp_path / "jars", terminal=False) == ""


def test_the_pinned_jars_state_their_size() -> None:
    assert all(jar.size > 0 for jar in SPARK_JARS)
    assert 100e6 < sum(jar.size for jar in SPARK_JARS) < 150e6
