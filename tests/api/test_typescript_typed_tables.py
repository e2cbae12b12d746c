"""A table with typed columns still syncs through the TypeScript client's semantics:
a node replica applying its documented rules (tests/js/replica.js: the original five types,
values as JSON.parse holds them, column-level LWW, hasMore paging, deltaIds from
fast-json-stable-stringify) reads the new types as the design says (integer → number, a string
beyond ±2^53; decimal, timestamp, date, bytes → strings), and its writes of the canonical forms
reach a Python client as Python values."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesync.api.app import create_app
from lakesync.client import LakeSyncClient
from tests.api.helpers import auth, make_settings, token
from tests.gateway_process import serve_in_thread
from tests.lakesync.js_oracle import JS_DIR, SETUP_HINT

SCHEMA: dict[str, Any] = {
    "table": "orders",
    "columns": [
        {"name": "id", "type": "integer"},
        {"name": "small", "type": "integer"},
        {"name": "amount", "type": "decimal", "precision": 38, "scale": 9},
        {"name": "at", "type": "timestamp"},
        {"name": "day", "type": "date"},
        {"name": "blob", "type": "bytes"},
        {"name": "note", "type": "string"},
    ],
}


def _node_replica(url: str, sub: str, writes: list[dict[str, Any]]) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed; the TypeScript-semantics replica needs node >= 18")
    if not (JS_DIR / "node_modules" / "fast-json-stable-stringify").is_dir():
        pytest.fail(f"tests/js/node_modules is missing; run the setup (`{SETUP_HINT}`)")
    proc = subprocess.run(
        [node, str(JS_DIR / "replica.js"), url, "gw1", token(sub), sub],
        input=json.dumps({"writes": writes}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows: dict[str, Any] = json.loads(proc.stdout)["rows"]
    return rows


@pytest.mark.slow
def test_a_typed_table_syncs_through_the_typescript_semantics(tmp_path: Path) -> None:
    with serve_in_thread(create_app(make_settings(tmp_path))) as url:
        r = httpx.post(
            f"{url}/v1/admin/schema/gw1", json=SCHEMA, headers=auth(token("root", role="admin"))
        )
        assert r.status_code == 200, r.text
        with LakeSyncClient(
            str(tmp_path / "py.db"),
            url=url,
            gateway_id="gw1",
            token=token("py"),
            schemas=[SCHEMA],
        ) as py:
            py.insert(
                "orders",
                "p1",
                {
                    "id": 2**62 + 1,
                    "small": 42,
                    "amount": Decimal("-12345678901234567890123456789.000000001"),
                    "at": dt.datetime(
                        1960, 2, 29, 23, 59, 59, 999999, tzinfo=dt.timezone(dt.timedelta(hours=-5))
                    ),
                    "day": dt.date(1901, 12, 13),
                    "blob": b"\x00\x01\xfe\xff",
                    "note": "héllo",
                },
            )
            py.sync(retries=0)
            assert py.status.queue_depth == 0

            # The TS replica reads each new type as the original type its encoding fits.
            ts_row = {
                "id": "-9223372036854775808",
                "small": 2**53,
                "amount": "0.500000000",
                "at": "2024-02-29T00:00:00.000001Z",
                "day": "9999-12-31",
                "blob": "",
            }
            writes = [
                {
                    "op": "INSERT",
                    "table": "orders",
                    "rowId": "t1",
                    "columns": [{"column": k, "value": v} for k, v in ts_row.items()],
                }
            ]
            rows = _node_replica(url, "ts", writes)
            assert rows["orders/p1"] == {
                "id": "4611686018427387905",
                "small": 42,
                "amount": "-12345678901234567890123456789.000000001",
                "at": "1960-03-01T04:59:59.999999Z",
                "day": "1901-12-13",
                "blob": "AAH+/w==",
                "note": "héllo",
            }
            assert rows["orders/t1"] == ts_row

            # A TS write of a typed column in a non-canonical form is refused, as for anyone.
            bad = [
                {
                    "op": "INSERT",
                    "table": "orders",
                    "rowId": "t2",
                    "columns": [{"column": "amount", "value": "0.5"}],
                }
            ]
            with pytest.raises(AssertionError, match="push: 400"):
                _node_replica(url, "ts", bad)

            # The Python client reads the TS replica's canonical writes as Python values.
            py.sync(retries=0)
            assert py.get("orders", "t1") == {
                "id": -(2**63),
                "small": 2**53,
                "amount": Decimal("0.500000000"),
                "at": dt.datetime(2024, 2, 29, 0, 0, 0, 1, tzinfo=dt.UTC),
                "day": dt.date(9999, 12, 31),
                "blob": b"",
            }
