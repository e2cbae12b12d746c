"""No credential of the lake in any log or error, through its failures: a real gateway process
and the command line (``lakesync query``, ``lakesync pipeline run``), their warehouse on an S3
server of the test's own (S3Proxy accepting only the test's keys) behind a
:class:`~tests.fault_proxy.FaultProxy`, their catalog an Iceberg REST catalog server behind an
OAuth2 client-credentials check (:class:`~tests.rest_catalog.AuthProxy`). They run while the
store is unreachable, then with a refused S3 secret and a refused catalog secret; the secrets
(right and wrong) are in none of stdout, stderr, the log files or the error bodies. A short S3
access key id (a word like ``lakesync``) masks nothing else in the gateway's log."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import httpx
import pytest

from lakesync.lakehouse.object_store import S3FILEIO
from lakesync.redaction import MASK as REDACTED
from tests.api.helpers import auth, delta, token
from tests.conftest import (
    S3_ACCESS_KEY_ID,
    S3_ENDPOINT,
    S3_SECRET_ACCESS_KEY,
    fresh_s3_bucket,
    s3_lake_env,
)
from tests.fault_proxy import FaultProxy
from tests.gateway_process import ROOT, ServerProcess
from tests.rest_catalog import AuthProxy, rest_catalog_server
from tests.s3_server import s3_server
from tests.wire_json import as_json

pytestmark = [pytest.mark.slow]

ADMIN = auth(token("ops", role="admin"))


@dataclass
class Secrets:
    """The credentials of the test's lake, and the wrong ones it also tries."""

    access_key_id: str = f"AKID{uuid.uuid4().hex[:16].upper()}"
    secret_access_key: str = f"s3-secret-{uuid.uuid4().hex}"
    wrong_secret_access_key: str = f"wrong-s3-secret-{uuid.uuid4().hex}"
    rest_client_secret: str = f"rest-secret-{uuid.uuid4().hex}"
    wrong_rest_client_secret: str = f"wrong-rest-secret-{uuid.uuid4().hex}"

    def all(self) -> list[str]:
        return [self.access_key_id, self.secret_access_key, self.wrong_secret_access_key,
                self.rest_client_secret, self.wrong_rest_client_secret]


@dataclass
class SecretLake:
    """The lake's environment (right credentials) and its store's proxy."""

    env: dict[str, str]
    store: FaultProxy
    secrets: Secrets


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[SecretLake]:
    secrets = Secrets()
    with s3_server(tmp_path / "s3", secrets.access_key_id, secrets.secret_access_key) as s3, \
            FaultProxy(s3) as store:
        boto3.client("s3", endpoint_url=s3, aws_access_key_id=secrets.access_key_id,
                     aws_secret_access_key=secrets.secret_access_key,
                     region_name="us-east-1").create_bucket(Bucket="lake")
        server_env = {
            "CATALOG_IO__IMPL": S3FILEIO, "CATALOG_S3_ENDPOINT": s3,
            "CATALOG_S3_PATH__STYLE__ACCESS": "true", "CATALOG_CLIENT_REGION": "us-east-1",
            "CATALOG_S3_ACCESS__KEY__ID": secrets.access_key_id,
            "CATALOG_S3_SECRET__ACCESS__KEY": secrets.secret_access_key,
        }
        credential = f"lakesync-client:{secrets.rest_client_secret}"
        with rest_catalog_server(tmp_path / "rest", "s3://lake/w", server_env) as uri, \
                AuthProxy(uri, f"token-{uuid.uuid4().hex}", credential) as rest:
            env = {
                "LAKESYNC_WAREHOUSE": "s3://lake/w",
                "LAKESYNC_S3_ENDPOINT": store.url,
                "LAKESYNC_S3_REGION": "us-east-1",
                "LAKESYNC_S3_PATH_STYLE": "true",
                "LAKESYNC_S3_ACCESS_KEY_ID": secrets.access_key_id,
                "LAKESYNC_S3_SECRET_ACCESS_KEY": secrets.secret_access_key,
                "LAKESYNC_CATALOG_URI": rest.uri,
                "LAKESYNC_CATALOG_CREDENTIAL": credential,
            }
            yield SecretLake(env, store, secrets)


def _cli(args: list[str], env: dict[str, str], data: Path) -> subprocess.CompletedProcess[str]:
    """``lakesync ARGS --data-dir DATA`` in a process of its own (this worktree's code)."""
    import os

    full = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    full.pop("LAKESYNC_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "lakesync.cli", *args, "--data-dir", str(data)],
        env=full, capture_output=True, text=True, timeout=600, cwd=ROOT, check=False,
    )


def _push(gw: ServerProcess, n: int, start: int) -> None:
    batch = [delta("INSERT", f"r{i}", "alice", v=i) for i in range(start, start + n)]
    r = httpx.post(f"{gw.url}/v1/sync/gw1/push", headers=auth(token("alice")), timeout=30,
                   json={"clientId": "alice", "deltas": [as_json(d) for d in batch]})
    assert r.status_code == 200, r.text


def test_no_secret_in_any_log_or_error_through_store_and_catalog_failures(
    tmp_path: Path, lake: SecretLake
) -> None:
    data = tmp_path / "data"
    said: list[str] = []  # every output, error body and message the test saw
    query = ["query", "--format", "json", "select count(*) as n from landing"]

    # Working: the lake is there and the landing table holds rows.
    with ServerProcess(data, env={**lake.env, "LAKESYNC_FLUSH_INTERVAL": "1"}) as gw:
        _push(gw, 5, 0)
        r = httpx.post(f"{gw.url}/v1/admin/flush/gw1", headers=ADMIN, timeout=120)
        assert r.status_code == 200, r.text
        # The store unreachable: flushes fail (scheduled and asked for), the gateway logs why.
        lake.store.cut()
        _push(gw, 5, 5)
        r = httpx.post(f"{gw.url}/v1/admin/flush/gw1", headers=ADMIN, timeout=300)
        assert r.status_code >= 500, r.text
        said.append(r.text)
        out = _cli(query, lake.env, data)
        assert out.returncode != 0, out.stdout
        said += [out.stdout, out.stderr]
        lake.store.restore()

    # Refused credentials: a wrong S3 secret, then a wrong catalog secret.
    wrong_s3 = {**lake.env, "LAKESYNC_S3_SECRET_ACCESS_KEY": lake.secrets.wrong_secret_access_key}
    wrong_rest = {**lake.env, "LAKESYNC_CATALOG_CREDENTIAL":
                  f"lakesync-client:{lake.secrets.wrong_rest_client_secret}"}
    for n, env in enumerate((wrong_s3, wrong_rest)):
        gw = ServerProcess(data, env=env)
        try:
            gw.start()
            _push(gw, 5, 10 + 5 * n)  # something to flush
            r = httpx.post(f"{gw.url}/v1/admin/flush/gw1", headers=ADMIN, timeout=300)
            assert r.status_code >= 500, r.text
            said.append(r.text)
            assert gw.stop() == 0
        except RuntimeError as exc:  # it may refuse to start: what it says is checked below
            said.append(str(exc))
        for args in (query, ["pipeline", "run", "--in-process", "--no-tests"]):
            out = _cli(args, env, data)
            assert out.returncode != 0, out.stdout
            said += [out.stdout, out.stderr]
        if env is wrong_s3:  # the run says what to check
            assert "refused the lake's credentials" in out.stdout + out.stderr, out.stderr

    logs = [p for p in data.rglob("*") if p.is_file() and p.suffix in (".log", ".json", "")]
    said += [p.read_text(errors="replace") for p in [*logs, *tmp_path.glob("gateway-*.log")]]
    for text in said:
        for secret in lake.secrets.all():
            assert secret not in text, f"a credential leaked:\n{text[-3000:]}"


def test_a_short_access_key_id_masks_no_module_name_and_the_secret_stays_masked(
    tmp_path: Path,
) -> None:
    """The test S3 server's key id is ``lakesync``: the gateway's log (started while the store
    is down, so it logs the store's errors with their paths) keeps every ``lakesync`` of module
    names and paths, and masks the secret access key wherever it shows (here a request path)."""
    bucket = fresh_s3_bucket()
    assert S3_ACCESS_KEY_ID == "lakesync"
    with FaultProxy(S3_ENDPOINT) as store:
        store.cut()
        env = {**s3_lake_env(bucket), "LAKESYNC_S3_ENDPOINT": store.url}
        with ServerProcess(tmp_path / "data", env=env) as gw:
            r = httpx.post(f"{gw.url}/v1/admin/flush/gw1", headers=ADMIN, timeout=120)
            assert r.status_code == 502, r.text
            httpx.get(f"{gw.url}/v1/sync/gw1/{S3_SECRET_ACCESS_KEY}", timeout=30)
    lines = [json.loads(line) for line in gw.log_path.read_text().splitlines()
             if line.startswith("{")]
    said = "\n".join(f"{line['msg']}\n{line.get('exc', '')}\n{line.get('path', '')}"
                     for line in lines)
    assert "lakesync/landing" in said or "lakesync.landing" in said, said[-3000:]
    assert f"/v1/sync/gw1/{REDACTED}" in said, said[-3000:]
    assert S3_SECRET_ACCESS_KEY not in gw.log_path.read_text()
    assert said.count(REDACTED) == said.count(f"/v1/sync/gw1/{REDACTED}"), said[-3000:]
