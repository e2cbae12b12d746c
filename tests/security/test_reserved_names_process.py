"""Reserved names are refused where a schema is registered: the admin schema
route of a real ``lakesync up`` answers 422 SCHEMA_ERROR naming the name and why, and a
``lakesync.yaml`` declaring one keeps the gateway from starting, naming the file and gateway."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.helpers import auth, token
from tests.gateway_process import ServerProcess

pytestmark = pytest.mark.slow

# Each refused column name, with what its error says about why.
REFUSED_COLUMNS = {
    "_deleted": "an Iceberg metadata column",
    "_position": "staging tables keep each row's lake position",
    "_lakesync_deleted": "the change sets flag deleted rows",
    "_file": "an Iceberg metadata column",
    "_pos": "an Iceberg metadata column",
    "_Spec_Id": "an Iceberg metadata column",
    "_partition": "an Iceberg metadata column",
    "_change_type": "an Iceberg metadata column",
    "row_id": "keys rows by it",
    "synced_at": "when a row was shipped",
    "_lakesync_later": "names starting with '_lakesync_' belong to LakeSync",
}
REFUSED_TABLES = ["lakesync_stage_todos", "lakesync_watermarks", "LakeSync_Tiering"]


def test_the_admin_route_refuses_every_reserved_name_naming_it_and_why(tmp_path: Path) -> None:
    admin = auth(token("ops", role="admin"))
    with ServerProcess(tmp_path / "data") as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
        for name, why in REFUSED_COLUMNS.items():
            columns = [{"name": "title", "type": "string"}, {"name": name, "type": "boolean"}]
            r = http.post("/v1/admin/schema/gw1", json={"table": "todos", "columns": columns},
                          headers=admin)
            assert r.status_code == 422, (name, r.text)
            body = r.json()
            assert body["code"] == "SCHEMA_ERROR"
            assert f"column name {name!r} of table 'todos' is reserved" in body["error"]
            assert why in body["error"]
        for table in REFUSED_TABLES:
            columns = [{"name": "title", "type": "string"}]
            r = http.post("/v1/admin/schema/gw1", json={"table": table, "columns": columns},
                          headers=admin)
            assert r.status_code == 422, (table, r.text)
            assert r.json()["code"] == "SCHEMA_ERROR"
            assert f"table name {table!r} is reserved" in r.json()["error"]
            assert "staging and bookkeeping tables" in r.json()["error"]
        # Nothing refused was stored; an ordinary schema still registers.
        ok = {"table": "todos", "columns": [{"name": "deleted", "type": "boolean"}]}
        assert http.post("/v1/admin/schema/gw1", json=ok, headers=admin).status_code == 200


@pytest.mark.parametrize(
    ("table", "column", "named"),
    [("todos", "_deleted", "column name '_deleted'"),
     ("lakesync_stage_todos", "title", "table name 'lakesync_stage_todos'")],
)
def test_a_config_file_declaring_a_reserved_name_keeps_the_gateway_from_starting(
    tmp_path: Path, table: str, column: str, named: str
) -> None:
    config = tmp_path / "lakesync.yaml"
    config.write_text(
        "gateways:\n"
        "  gw1:\n"
        "    schemas:\n"
        f"      - table: {table}\n"
        f"        columns: [{{name: {column}, type: string}}]\n",
        encoding="utf-8",
    )
    gw = ServerProcess(tmp_path / "data", config=config)
    with pytest.raises(RuntimeError, match="gateway exited early") as failed:
        gw.start()
    message = " ".join(str(failed.value).split())  # the log wraps long lines
    assert f"{config}: gateway 'gw1': {named}" in message
    assert "is reserved" in message
