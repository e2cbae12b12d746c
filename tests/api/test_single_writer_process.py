"""One landing writer per lake, with real ``lakesync up`` processes: a second one
on an embedded data dir is refused; on one PostgreSQL store, processes elect one flusher and one
pipeline scheduler, and landing stays exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog
from lakesync.lakehouse.settings import LakeSettings
from tests.api.helpers import SECRET, auth, delta, token
from tests.conftest import PG_DSN, drop_pg_schema, fresh_pg_schema, require_postgres
from tests.gateway_process import ServerProcess, free_port
from tests.wire_json import as_json

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
LEADS = "this gateway process (pid"


def test_a_second_lakesync_up_on_one_data_dir_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "LAKESYNC_JWT_SECRET": SECRET}
    env.pop("LAKESYNC_CONFIG", None)
    with ServerProcess(data) as first:
        assert first.proc is not None
        command = [sys.executable, "-m", "lakesync.cli", "up", "--data-dir", str(data)]
        second = subprocess.run(
            [*command, "--port", str(free_port())],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert second.returncode == 2, second.stderr
        assert f"in use by another lakesync process (pid {first.proc.pid}" in second.stderr
        assert str(data / "lakesync.lock") in second.stderr
        assert "Traceback" not in second.stderr
        assert httpx.get(f"{first.url}/ready").status_code == 200  # the first one serves on
    # The lock dies with its process: the data dir is free again.
    ServerProcess(data).start().stop()


def _landed(data: Path) -> Counter[str]:
    table = open_catalog(LakeSettings.from_env(data, env={})).load_table(LANDING_IDENTIFIER)
    return Counter(
        r["delta_id"] for r in table.scan(selected_fields=("delta_id",)).to_arrow().to_pylist()
    )


@pytest.mark.postgres
def test_processes_on_one_postgres_store_elect_one_flusher_and_land_once(tmp_path: Path) -> None:
    require_postgres()
    schema = fresh_pg_schema()
    data = tmp_path / "data"  # one lake (catalog and warehouse) for both processes
    env = {
        "LAKESYNC_STORE_URL": PG_DSN,
        "LAKESYNC_PG_SCHEMA": schema,
        "LAKESYNC_FLUSH_INTERVAL": "0.2",
        "LAKESYNC_PIPELINE_INTERVAL": "3600",  # elected, never due during the test
    }
    servers = [ServerProcess(data, env).start(), ServerProcess(data, env).start()]
    acked: list[str] = []
    lock = threading.Lock()
    try:

        def pusher(n: int) -> None:
            server = servers[n % 2]
            client = f"c{n}"
            with httpx.Client(base_url=server.url, headers=auth(token(client)), timeout=30) as h:
                for i in range(15):
                    batch = [delta("INSERT", f"{client}-{i}-{j}", client, v=j) for j in range(20)]
                    body = {"clientId": client, "deltas": [as_json(d) for d in batch]}
                    r = h.post("/v1/sync/gw1/push", json=body)
                    assert r.status_code == 200, r.text
                    with lock:
                        acked.extend(d.delta_id for d in batch)
                    # Admin flushes on both processes race the elected one's scheduled flushes.
                    admin = auth(token("ops", role="admin"))
                    assert h.post("/v1/admin/flush/gw1", headers=admin).status_code == 200

        threads = [threading.Thread(target=pusher, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(acked) == 4 * 15 * 20
        for server in servers:
            r = httpx.post(
                f"{server.url}/v1/admin/flush/gw1", headers=auth(token("ops", role="admin"))
            )
            assert r.status_code == 200, r.text
        landed = _landed(data)
        assert set(landed.values()) == {1}, "a delta landed twice"
        assert set(landed) == set(acked)

        logs = [s.log_path.read_text() for s in servers]
        for job in ("scheduled landing flush", "scheduled pipeline and compaction"):
            leaders = [i for i, log in enumerate(logs) if f"{job}: {LEADS}" in log]
            assert len(leaders) == 1, f"{job}: {len(leaders)} leaders"
        leader = next(i for i, log in enumerate(logs) if f"scheduled landing flush: {LEADS}" in log)

        # The leader goes: the other process takes the scheduled flush over (no admin flush).
        servers[leader].stop()
        other = servers[1 - leader]
        late = [delta("INSERT", f"late-{i}", "z", v=i) for i in range(5)]
        r = httpx.post(
            f"{other.url}/v1/sync/gw1/push",
            headers=auth(token("z")),
            json={"clientId": "z", "deltas": [as_json(d) for d in late]},
        )
        assert r.status_code == 200, r.text
        deadline = time.monotonic() + 30
        while not all(_landed(data)[d.delta_id] == 1 for d in late):
            assert time.monotonic() < deadline, "the surviving process never flushed"
            time.sleep(0.3)
        assert f"scheduled landing flush: {LEADS} {other.proc.pid if other.proc else 0}" in (
            other.log_path.read_text()
        )
    finally:
        for server in servers:
            server.stop()
        drop_pg_schema(schema)
