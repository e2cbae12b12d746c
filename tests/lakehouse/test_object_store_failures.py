"""The lake on object storage when the store fails: a real gateway process whose warehouse is on
the local S3 server, reached through a :class:`~tests.fault_proxy.FaultProxy` that holds or cuts
the flush's requests at a chosen one (never a chosen moment).

- SIGKILLed mid-flush (a data file's upload held, the commit's metadata file held, or written
  with its answer held; and through a REST catalog whose commit is applied but never answered),
  then started again: the landing table holds every acknowledged delta exactly once.
- The store unreachable or hanging mid-flush: the flush fails in bounded time, saying which store
  to check, the gateway keeps accepting pushes, and once the store is back the scheduled flush
  lands everything exactly once.
- A gateway started while its store is down serves all the same and lands once it is back; so
  does one started while its REST catalog is unreachable, then refusing its credential.
- ``lakesync query`` with the store or the REST catalog cut says what to check in one line.
- The store failing only the data uploads (back by the commit): no gateway is held back as if
  its rows were bad, nothing lands late.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesync.delta import RowDelta
from lakesync.hlc import HLC
from lakesync.hotlog.sqlite import SqliteHotLog
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import (
    HELD_PROPERTY,
    LANDED_LATE_PROPERTY,
    LANDING_IDENTIFIER,
    open_catalog,
)
from lakesync.lakehouse.landing import LandingFlusher
from lakesync.lakehouse.object_store import ObjectStoreError
from lakesync.lakehouse.settings import LakeSettings
from tests.api.helpers import auth, token
from tests.conftest import (
    S3_ENDPOINT,
    S3_SECRET_ACCESS_KEY,
    fresh_s3_bucket,
    s3_lake_env,
)
from tests.fault_proxy import FaultProxy, Request
from tests.gateway_process import ROOT, ServerProcess
from tests.lakehouse.outage import landed, push
from tests.rest_catalog import AuthProxy, rest_catalog_server, s3_catalog_env

from .conftest import append_in_order

pytestmark = [pytest.mark.slow]

ADMIN = auth(token("ops", role="admin"))


@pytest.fixture
def s3() -> Iterator[FaultProxy]:
    """A fresh bucket's S3 server behind a proxy of this test's own."""
    fresh_s3_bucket()  # skips (fails under CI) without the S3 server
    with FaultProxy(S3_ENDPOINT) as proxy:
        yield proxy


def _lake_env(proxy: FaultProxy) -> dict[str, str]:
    return {**s3_lake_env(fresh_s3_bucket()), "LAKESYNC_S3_ENDPOINT": proxy.url}


def _flush(gw: ServerProcess, timeout: float = 120) -> httpx.Response:
    return httpx.post(f"{gw.url}/v1/admin/flush/gw1", headers=ADMIN, timeout=timeout)


def _flush_in_background(gw: ServerProcess) -> threading.Thread:
    """Ask for a flush from a thread (its answer never comes when the gateway is killed)."""

    def ask() -> None:
        with contextlib.suppress(httpx.HTTPError):
            _flush(gw)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread


def _landing_write(kind: str) -> Callable[[Request], bool]:
    """Picks the landing flush's upload of a data file (``data``) or of the commit's table
    metadata (``metadata``): its first request (pyarrow uploads in parts) or, ``metadata-done``,
    the last one (the object exists once the server acts on it)."""

    def pick(request: Request) -> bool:
        method, path = request
        if "/landing/" not in path:
            return False
        if kind == "data":
            return method == "POST" and path.endswith("?uploads") and ".parquet" in path
        if kind == "metadata":
            return method == "POST" and path.endswith(".metadata.json?uploads")
        return method == "POST" and ".metadata.json?uploadId=" in path

    return pick


def _wait(event: threading.Event, what: str, gw: ServerProcess, timeout: float = 120) -> None:
    if not event.wait(timeout):
        pytest.fail(f"{what} did not happen within {timeout:.0f} s; gateway log:\n"
                    f"{gw.log_path.read_text(errors='replace')[-3000:]}")


@pytest.mark.parametrize("window", ["data", "metadata", "metadata-done"])
def test_gateway_killed_mid_flush_to_s3_lands_each_delta_exactly_once(
    tmp_path: Path, s3: FaultProxy, window: str
) -> None:
    env = {**_lake_env(s3), "LAKESYNC_FLUSH_INTERVAL": "0"}  # flushes only when asked
    data = tmp_path / "data"
    gw = ServerProcess(data, env=env).start()
    try:
        acked = push(gw, "alice", 30)
        s3.hold(_landing_write(window), response=window == "metadata-done")
        _flush_in_background(gw)
        _wait(s3.held, f"the flush's {window} upload", gw)
        gw.kill()
        s3.release()  # a held upload goes on without its writer, as a slow store's would
        gw.start()
        acked += push(gw, "bob", 20)
        assert _flush(gw).status_code == 200
    finally:
        gw.stop()
    found = landed(LakeSettings.from_env(data, env=env))
    assert found == Counter(acked), "a delta is lost or landed twice"


def test_gateway_killed_while_a_rest_catalog_commit_goes_unanswered(tmp_path: Path) -> None:
    """The REST catalog applies the landing commit but its answer never reaches the gateway,
    killed meanwhile: the restarted gateway finds rows and position committed together and
    lands nothing twice."""
    bucket = fresh_s3_bucket()
    with rest_catalog_server(tmp_path / "rest", f"s3://{bucket}/lake", s3_catalog_env()) as uri, \
            FaultProxy(uri) as rest:
        env = {**s3_lake_env(bucket), "LAKESYNC_CATALOG_URI": rest.url,
               "LAKESYNC_FLUSH_INTERVAL": "0"}
        data = tmp_path / "data"
        gw = ServerProcess(data, env=env).start()
        try:
            acked = push(gw, "alice", 30)
            rest.hold(lambda r: r == ("POST", "/v1/namespaces/lakesync/tables/landing"),
                      response=True)
            _flush_in_background(gw)
            _wait(rest.held, "the landing commit", gw)
            time.sleep(1)  # the catalog applies it meanwhile: its answer is what waits
            gw.kill()
            rest.release()
            gw.start()
            acked += push(gw, "bob", 20)
            assert _flush(gw).status_code == 200
        finally:
            gw.stop()
        found = landed(LakeSettings.from_env(data, env=env))
    assert found == Counter(acked), "a delta is lost or landed twice"


def _eventually(check: Callable[[], Any], what: str, gw: ServerProcess,
                timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := check():
            return got
        time.sleep(0.5)
    pytest.fail(f"{what} did not happen within {timeout:.0f} s; gateway log:\n"
                f"{gw.log_path.read_text(errors='replace')[-3000:]}")


@pytest.mark.parametrize("outage", ["unreachable", "hanging"])
def test_a_flush_during_a_store_outage_fails_then_lands_exactly_once(
    tmp_path: Path, s3: FaultProxy, outage: str
) -> None:
    """The store goes away (connections reset and refused) or hangs (requests never answered)
    as the flush starts writing: that flush fails in bounded time, pushes go on being
    acknowledged, and once the store is back the scheduled flush lands every delta once."""
    env = {**_lake_env(s3), "LAKESYNC_FLUSH_INTERVAL": "1"}
    data = tmp_path / "data"
    settings = LakeSettings.from_env(data, env=env)
    with ServerProcess(data, env=env) as gw:
        acked = push(gw, "alice", 30)
        _eventually(lambda: sum(landed(settings).values()) == 30, "the first flush", gw)
        s3.hold(_landing_write("data"))
        acked += push(gw, "alice", 30, start=30)
        _wait(s3.held, "the next flush's upload", gw)
        if outage == "unreachable":
            s3.release()
            s3.cut()
        else:
            s3.hold(lambda r: True)  # everything from now on hangs
        started = time.monotonic()
        r = _flush(gw, timeout=300)  # waits for the scheduled flush going on, then fails too
        assert (r.status_code, r.json()["code"]) == (502, "OBJECT_STORE_ERROR"), r.text
        assert time.monotonic() - started < 240, "a flush hung on the store"
        acked += push(gw, "bob", 20)  # the hot log takes pushes all along
        if outage == "unreachable":
            s3.restore()
        else:
            s3.release()
        _eventually(lambda: landed(settings) == Counter(acked),
                    "every acknowledged delta landed once", gw)
        time.sleep(2)  # two more scheduled flushes: nothing lands twice
        assert landed(settings) == Counter(acked)



def test_a_store_failing_the_data_uploads_holds_no_gateway_back(
    tmp_path: Path, s3: FaultProxy
) -> None:
    """The store resets every data file upload while the commit's metadata still goes through
    (as a store coming back between the two would): that is the store's failure, not one
    gateway's bad rows. The flush fails whole, naming the store, and holds no gateway back;
    once the uploads go through every delta lands once, none late (a late landing makes the
    next pipeline run rebuild every model in full)."""
    settings = LakeSettings.from_env(tmp_path / "data", env=_lake_env(s3))
    init_catalog_tables(settings)
    log = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
    entries = [(f"gw{i % 2}", RowDelta.create("INSERT", "todos", f"r{i}", "c1", {"n": i}, 1000 + i))
               for i in range(12)]
    append_in_order(log, entries)
    flusher = LandingFlusher(open_catalog(settings), log)
    s3.fail(lambda r: ".parquet" in r[1])
    with pytest.raises(ObjectStoreError, match=r"could not be reached.*lake\.s3_endpoint"):
        flusher.flush()
    assert s3.held.is_set()
    s3.release()
    result = flusher.flush()
    assert (result.rows, result.held) == (12, ())
    assert landed(settings) == Counter(d.delta_id for _, d in entries)
    table = open_catalog(settings).load_table(LANDING_IDENTIFIER)
    for snapshot in table.snapshots():
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        assert HELD_PROPERTY not in summary and LANDED_LATE_PROPERTY not in summary
    log.close()


def test_a_gateway_started_during_a_store_outage_serves_and_lands_once_it_is_back(
    tmp_path: Path, s3: FaultProxy
) -> None:
    """Restarted (say after a crash) while its object store is down, a gateway still starts and
    acknowledges pushes into its hot log; flushes fail saying which store to check, and once
    the store is back the scheduled flush lands every delta once."""
    env = {**_lake_env(s3), "LAKESYNC_FLUSH_INTERVAL": "1"}
    data = tmp_path / "data"
    settings = LakeSettings.from_env(data, env=env)
    s3.cut()
    with ServerProcess(data, env=env) as gw:
        acked = push(gw, "alice", 20)
        r = _flush(gw)
        assert (r.status_code, r.json()["code"]) == (502, "OBJECT_STORE_ERROR"), r.text
        s3.restore()
        _eventually(lambda: landed(settings) == Counter(acked),
                    "every acknowledged delta landed once", gw)
    assert "could not be reached" in gw.log_path.read_text()


def test_a_gateway_started_while_its_rest_catalog_is_down_serves_and_lands_once_it_is_back(
    tmp_path: Path,
) -> None:
    """Started while its REST catalog is unreachable, then while the catalog refuses its
    credential, a gateway still serves: pushes are acknowledged, flushes fail saying which
    catalog and which key to check (502 ``CATALOG_ERROR``, one log line each, no secret), and
    once the catalog answers again the scheduled flush lands every delta once; so again when
    the catalog goes away after that."""
    bucket = fresh_s3_bucket()
    secret = f"rest-secret-{uuid.uuid4().hex}"
    with rest_catalog_server(tmp_path / "rest", f"s3://{bucket}/lake", s3_catalog_env()) as uri, \
            AuthProxy(uri, f"token-{uuid.uuid4().hex}", f"lakesync:{secret}") as auth_proxy, \
            FaultProxy(auth_proxy.uri) as rest:
        env = {**s3_lake_env(bucket), "LAKESYNC_CATALOG_URI": rest.url,
               "LAKESYNC_CATALOG_CREDENTIAL": f"lakesync:{secret}",
               "LAKESYNC_FLUSH_INTERVAL": "1"}
        data = tmp_path / "data"
        settings = LakeSettings.from_env(data, env=env)
        rest.cut()
        with ServerProcess(data, env=env) as gw:
            acked = push(gw, "alice", 20)
            r = _flush(gw)
            assert (r.status_code, r.json()["code"]) == (502, "CATALOG_ERROR"), r.text
            auth_proxy.client_secret = "rotated"  # the catalog now refuses the credential
            rest.restore()
            acked += push(gw, "bob", 10)
            _eventually(lambda: "refused the lake's credentials" in gw.log_path.read_text(),
                        "a flush refused by the catalog", gw)
            r = _flush(gw)
            assert (r.status_code, r.json()["code"]) == (502, "CATALOG_ERROR"), r.text
            auth_proxy.client_secret = secret
            _eventually(lambda: landed(settings) == Counter(acked),
                        "every acknowledged delta landed once", gw)
            # The catalog goes away again once open: the same, and the same line.
            rest.cut()
            acked += push(gw, "carol", 10)
            r = _flush(gw)
            assert (r.status_code, r.json()["code"]) == (502, "CATALOG_ERROR"), r.text
            rest.restore()
            _eventually(lambda: landed(settings) == Counter(acked),
                        "every acknowledged delta landed once", gw)
            time.sleep(2)  # two more scheduled flushes: nothing lands twice
            assert landed(settings) == Counter(acked)
    log = gw.log_path.read_text()
    assert f"cannot reach the REST catalog at {rest.url}" in log
    assert "check lake.catalog_credential" in log
    assert "Traceback" not in log
    assert secret not in log


def _query(env: dict[str, str], data: Path) -> subprocess.CompletedProcess[str]:
    """``lakesync query`` of the landing table in a process of its own (this worktree's code)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
    return subprocess.run(
        [sys.executable, "-m", "lakesync.cli", "query", "--format", "json",
         "select count(*) as n from landing", "--data-dir", str(data)],
        env={**full, **env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=300, cwd=ROOT, check=False,
    )


def test_query_with_the_store_or_the_rest_catalog_down_says_what_to_check(
    tmp_path: Path, s3: FaultProxy
) -> None:
    """``lakesync query`` with the object store cut, then with the REST catalog cut, exits 1
    with one line saying what failed and which key to check: no traceback, no secret."""
    bucket = fresh_s3_bucket()
    with rest_catalog_server(tmp_path / "rest", f"s3://{bucket}/lake", s3_catalog_env()) as uri, \
            FaultProxy(uri) as rest:
        env = {**s3_lake_env(bucket), "LAKESYNC_S3_ENDPOINT": s3.url,
               "LAKESYNC_CATALOG_URI": rest.url}
        data = tmp_path / "data"
        log = SqliteHotLog(tmp_path / "hot.sqlite3", HLC())
        append_in_order(log, [("gw1", RowDelta.create("INSERT", "todos", f"r{i}", "c1",
                                                      {"n": i}, 1000 + i)) for i in range(5)])
        LandingFlusher(open_catalog(LakeSettings.from_env(data, env=env)), log).flush()
        log.close()
        ok = _query(env, data)
        assert (ok.returncode, ok.stdout.strip()) == (0, '{"n": 5}'), ok.stderr
        outs = []
        s3.cut()
        outs.append(_query(env, data))
        s3.restore()
        rest.cut()
        outs.append(_query(env, data))
    store, catalog = outs
    assert store.returncode == 1, store.stderr
    assert f"the lake's object store (s3://{bucket}/lake at {s3.url}) could not be reached" \
        in store.stderr and "lake.s3_endpoint" in store.stderr, store.stderr
    assert catalog.returncode == 2, catalog.stderr  # a setting to check, as every ConfigError
    assert f"cannot reach the REST catalog at {rest.url}" in catalog.stderr
    assert "lake.catalog_uri" in catalog.stderr, catalog.stderr
    for out in outs:
        assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: "), out.stderr
        assert S3_SECRET_ACCESS_KEY not in out.stderr + out.stdout
