"""Settings from lakesync.config and the environment; gateways declared in lakesync.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
from litestar.testing import TestClient

from api.app import create_app
from api.settings import GatewaySettings
from lakesync.config import load_config
from lakesync.errors import ConfigError
from tests.api.helpers import Gateway, Replica, delta, token

YAML = """
gateways:
  shop:
    schemas:
      - table: todos
        columns: [{name: owner, type: string}, {name: title, type: string}]
    rules:
      version: 1
      buckets: [{name: mine, filters: [{column: owner, op: eq, value: "jwt:sub"}]}]
"""


def test_settings_read_config_and_environment(tmp_path: Path) -> None:
    env = {
        "LAKESYNC_JWT_SECRET": "a" * 40,
        "LAKESYNC_DATA_DIR": str(tmp_path),
        "LAKESYNC_RATE_LIMIT": "5",
        "LAKESYNC_BACKPRESSURE_BYTES": "1000",
        "LAKESYNC_PG_SCHEMA": "gw_schema",
    }
    settings = GatewaySettings.from_config(load_config(None, env), env)
    assert settings.data_dir == tmp_path and settings.jwt_secrets == ("a" * 40,)
    assert settings.rate_limit == 5 and settings.backpressure_bytes == 1000
    assert settings.pg_schema == "gw_schema" and settings.max_deltas == 10_000
    with pytest.raises(ConfigError, match="LAKESYNC_RATE_LIMIT"):
        GatewaySettings.from_config(load_config(None, env), env | {"LAKESYNC_RATE_LIMIT": "x"})


def test_gateways_from_the_config_file_are_applied_at_startup(tmp_path: Path) -> None:
    path = tmp_path / "lakesync.yaml"
    path.write_text(YAML)
    env = {
        "LAKESYNC_JWT_SECRET": "test-secret-0123456789abcdef0123456789",
        "LAKESYNC_DATA_DIR": str(tmp_path / "data"),
    }
    settings = GatewaySettings.from_config(load_config(path, env), env)
    with TestClient(create_app(settings)) as client:
        gw = Gateway(client)
        alice = token("alice", "shop")
        ok = gw.push(
            alice, "alice", [delta("INSERT", "t1", "alice", owner="alice", title="a")], gw="shop"
        )
        assert ok.status_code == 200, ok.text
        bad = gw.push(alice, "alice", [delta("INSERT", "t2", "alice", colour="red")], gw="shop")
        assert bad.status_code == 422
        gw.push(alice, "alice", [delta("INSERT", "t3", "alice", owner="bob")], gw="shop")
        bob = Replica()
        gw.sync(token("bob", "shop"), "bob", bob, gw="shop")
        assert set(bob.rows()) == {("todos", "t3")}
    # Restart: the store still holds them (and re-applying identical config changes nothing).
    with TestClient(create_app(settings)) as client:
        service = client.app.state.service
        assert service.store.get_rules("shop").rules is not None
        assert "todos" in service.store.list_docs("shop", "schema")
