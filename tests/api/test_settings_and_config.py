"""Settings from lakesync.config and the environment; gateways declared in lakesync.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
from litestar.testing import TestClient

from lakesync.api.app import create_app
from lakesync.api.settings import GatewaySettings
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


def test_settings_defaults_without_file_or_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./lakesync.yaml
    settings = GatewaySettings.from_config(load_config(None, {}), {})
    assert settings == GatewaySettings(data_dir=Path(".lakesync"), jwt_secrets=())
    assert (settings.store_url, settings.pg_schema) == ("sqlite", "lakesync")
    assert (settings.rate_limit, settings.rate_burst) == (0.0, 20.0)
    assert settings.backpressure_bytes == 1024 * 1024 * 1024
    assert (settings.ws_max_connections, settings.ws_rate_limit) == (10_000, 100.0)
    assert settings.ws_max_connections_per_gateway == 5_000
    assert settings.ws_max_connections_per_client == 20
    assert (settings.flush_interval, settings.pipeline_interval) == (5.0, 0.0)
    assert settings.docs and settings.metrics_gateway_labels


def test_gateway_knobs_from_the_file_and_the_environment_wins(tmp_path: Path) -> None:
    path = tmp_path / "lakesync.yaml"
    path.write_text(
        "pg_schema: from_file\n"
        "server: {rate_limit: 2, rate_burst: 4, backpressure_bytes: 2048, ws_max_connections: 3,\n"
        "         ws_max_connections_per_gateway: 2, ws_max_connections_per_client: 1,\n"
        "         ws_rate_limit: 0, flush_interval: 0.5, pipeline_interval: 30}\n"
    )
    settings = GatewaySettings.from_config(load_config(path, {}))
    assert settings.pg_schema == "from_file"
    assert (settings.rate_limit, settings.rate_burst, settings.backpressure_bytes) == (2, 4, 2048)
    assert (settings.ws_max_connections, settings.ws_rate_limit) == (3, 0)
    assert settings.ws_max_connections_per_gateway == 2
    assert settings.ws_max_connections_per_client == 1
    assert (settings.flush_interval, settings.pipeline_interval) == (0.5, 30)
    env = {"LAKESYNC_PG_SCHEMA": "from_env", "LAKESYNC_RATE_LIMIT": "7"}
    overridden = GatewaySettings.from_config(load_config(path, env))
    assert (overridden.pg_schema, overridden.rate_limit) == ("from_env", 7)
    assert overridden.rate_burst == 4
    # An explicit env is applied over an already resolved config too.
    assert GatewaySettings.from_config(load_config(path, {}), env) == overridden


@pytest.mark.parametrize(
    ("text", "env", "origins"),
    [
        ("", "", ("*",)),
        ("server: {cors_origins: 'https://a.example'}\n", "", ("https://a.example",)),
        ("server: {cors_origins: []}\n", "", ()),
        ("", "https://a.example,http://localhost:5173", ("https://a.example",
                                                        "http://localhost:5173")),
    ],
)
def test_the_gateway_takes_its_cors_origins_from_the_config(
    tmp_path: Path, text: str, env: str, origins: tuple[str, ...]
) -> None:
    path = tmp_path / "lakesync.yaml"
    path.write_text(text)
    config = load_config(path, {"LAKESYNC_CORS_ORIGINS": env})
    assert GatewaySettings.from_config(config).cors_origins == origins


def test_bad_gateway_knobs_name_the_key_or_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "lakesync.yaml"
    path.write_text("server:\n  ws_rate_limt: 5\n")
    with pytest.raises(ConfigError, match=r"lakesync\.yaml.*ws_rate_limt"):
        load_config(path, {})
    path.write_text("server:\n  flush_interval: -1\n")
    with pytest.raises(ConfigError, match=r"lakesync\.yaml.*\$\.server\.flush_interval"):
        load_config(path, {})
    path.write_text("server: {ws_max_connections: 5}\n")
    with pytest.raises(ConfigError, match="LAKESYNC_WS_MAX_CONNECTIONS='-1'"):
        load_config(path, {"LAKESYNC_WS_MAX_CONNECTIONS": "-1"})


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
        # The declared rules also govern writes: alice may not create bob's row, an admin may.
        refused = gw.push(alice, "alice", [delta("INSERT", "t3", "alice", owner="bob")], gw="shop")
        assert refused.status_code == 403, refused.text
        root = token("root", "shop", "admin")
        made = gw.push(root, "root", [delta("INSERT", "t3", "root", owner="bob")], gw="shop")
        assert made.status_code == 200, made.text
        bob = Replica()
        gw.sync(token("bob", "shop"), "bob", bob, gw="shop")
        assert set(bob.rows()) == {("todos", "t3")}
    # Restart: the store still holds them (and re-applying identical config changes nothing).
    with TestClient(create_app(settings)) as client:
        service = client.app.state.service
        assert service.store.get_rules("shop").rules is not None
        assert "todos" in service.store.list_docs("shop", "schema")
