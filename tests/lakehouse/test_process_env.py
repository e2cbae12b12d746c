"""The one place the lakehouse sets process environment variables restores them, one block at a
time (dbt and PySpark read their settings only from the environment)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from lakesync.lakehouse.process_env import process_environment, stop_process


def test_the_block_sees_the_values_and_the_environment_is_restored_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LAKESYNC_TEST_KEPT", "user")
    monkeypatch.delenv("LAKESYNC_TEST_NEW", raising=False)
    before = dict(os.environ)
    with process_environment({"LAKESYNC_TEST_KEPT": "lake", "LAKESYNC_TEST_NEW": "x"}):
        assert os.environ["LAKESYNC_TEST_KEPT"] == "lake"
        assert os.environ["LAKESYNC_TEST_NEW"] == "x"
    assert dict(os.environ) == before
    with pytest.raises(RuntimeError), process_environment({"LAKESYNC_TEST_NEW": "y"}):
        raise RuntimeError("a failed dbt run restores it too")
    assert dict(os.environ) == before


def test_a_variable_the_user_set_wins_without_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKESYNC_TEST_KEPT", "user")
    monkeypatch.delenv("LAKESYNC_TEST_NEW", raising=False)
    with process_environment(
        {"LAKESYNC_TEST_KEPT": "lake", "LAKESYNC_TEST_NEW": "x"}, override=False
    ):
        assert os.environ["LAKESYNC_TEST_KEPT"] == "user"
        assert os.environ["LAKESYNC_TEST_NEW"] == "x"
    assert os.environ["LAKESYNC_TEST_KEPT"] == "user"
    assert "LAKESYNC_TEST_NEW" not in os.environ


def test_two_threads_never_see_each_others_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAKESYNC_TEST_NEW", raising=False)
    seen: list[tuple[str, str | None]] = []

    def run(value: str) -> None:
        for _ in range(20):
            with process_environment({"LAKESYNC_TEST_NEW": value}):
                time.sleep(0.001)  # another thread would write here without the lock
                seen.append((value, os.environ.get("LAKESYNC_TEST_NEW")))

    threads = [threading.Thread(target=run, args=(v,)) for v in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 40
    assert all(value == read for value, read in seen)
    assert "LAKESYNC_TEST_NEW" not in os.environ


def test_stop_process_kills_a_child_that_ignores_sigterm() -> None:
    """A child that ignores SIGTERM is killed once the timeout passes, and reaped."""
    code = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    stop_process(proc, timeout=0.5)
    assert proc.returncode == -9


def test_stop_process_lets_a_child_exit_on_sigterm_and_leaves_an_exited_one() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    stop_process(proc, timeout=60)
    assert proc.returncode == -15
    stop_process(proc, timeout=60)  # already exited: nothing to do
    assert proc.returncode == -15
