"""Configuration (lakesync.yaml + environment): defaults, overrides, file parsing, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakesync.config import Config, ServerConfig, load_config
from lakesync.errors import ConfigError
from lakesync.rules import visible
from lakesync.schema import ColumnSpec

YAML = """\
data_dir: /var/lib/lakesync
store_url: postgresql://db/lakesync
server:
  host: 0.0.0.0
  port: 9000
gateways:
  gw1:
    schemas:
      - table: todos
        columns:
          - {name: title, type: string}
          - {name: owner, type: string}
        softDelete: true
    rules:
      version: 1
      buckets:
        - name: mine
          tables: [todos]
          filters:
            - {column: owner, op: eq, value: "jwt:sub"}
  gw2: {}
"""


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # load_config looks for ./lakesync.yaml; never pick up a developer's file.
    monkeypatch.chdir(tmp_path)


def write(tmp_path: Path, text: str, name: str = "conf.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_file_or_env() -> None:
    config = load_config(None, env={})
    assert config == Config(data_dir=Path(".lakesync"), jwt_secrets=[])
    assert config.store_url == "sqlite"
    assert config.server == ServerConfig("127.0.0.1", 8787)
    assert config.gateways == {}
    assert config.source is None


def test_environment_overrides() -> None:
    env = {
        "LAKESYNC_DATA_DIR": "/data",
        "LAKESYNC_JWT_SECRET": "new",
        "LAKESYNC_JWT_SECRET_PREVIOUS": "old",
        "LAKESYNC_STORE_URL": "postgresql://x/y",
    }
    config = load_config(None, env=env)
    assert config.data_dir == Path("/data")
    assert config.jwt_secrets == ["new", "old"]
    assert config.store_url == "postgresql://x/y"


def test_only_previous_secret_or_empty_values() -> None:
    assert load_config(None, env={"LAKESYNC_JWT_SECRET_PREVIOUS": "old"}).jwt_secrets == ["old"]
    assert load_config(None, env={"LAKESYNC_JWT_SECRET": "", "LAKESYNC_DATA_DIR": ""}) == Config(
        data_dir=Path(".lakesync"), jwt_secrets=[]
    )


def test_yaml_file_with_gateways_schemas_and_rules(tmp_path: Path) -> None:
    path = write(tmp_path, YAML)
    config = load_config(path, env={})
    assert config.source == path
    assert config.data_dir == Path("/var/lib/lakesync")
    assert config.store_url == "postgresql://db/lakesync"
    assert config.server == ServerConfig("0.0.0.0", 9000)
    assert set(config.gateways) == {"gw1", "gw2"}
    gw1 = config.gateways["gw1"]
    assert gw1.id == "gw1"
    (todos,) = gw1.schemas
    assert todos.table == "todos"
    assert todos.columns == [ColumnSpec("title", "string"), ColumnSpec("owner", "string")]
    assert todos.soft_delete is True
    assert gw1.rules is not None
    assert visible(gw1.rules, {"sub": "u1"}, "todos", {"owner": "u1"})
    assert not visible(gw1.rules, {"sub": "u1"}, "todos", {"owner": "u2"})
    assert config.gateways["gw2"].schemas == []
    assert config.gateways["gw2"].rules is None


def test_environment_beats_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, YAML)
    config = load_config(path, env={"LAKESYNC_DATA_DIR": "/env", "LAKESYNC_STORE_URL": "sqlite"})
    assert config.data_dir == Path("/env")
    assert config.store_url == "sqlite"


def test_config_path_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, YAML, "elsewhere.yaml")
    config = load_config(None, env={"LAKESYNC_CONFIG": str(path)})
    assert config.source == path
    assert "gw1" in config.gateways


def test_default_file_in_working_directory(tmp_path: Path) -> None:
    write(tmp_path, YAML, "lakesync.yaml")
    config = load_config(None, env={})
    assert config.source == Path("lakesync.yaml")
    assert "gw1" in config.gateways


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""), env={})
    assert config.gateways == {}
    assert config.data_dir == Path(".lakesync")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("gateways: [unclosed", "not valid YAML"),
        ("data_dir: x\nbogus_key: 1\n", "bogus_key"),
        ("gateways:\n  gw1:\n    colour: red\n", "colour"),
        ("server:\n  port: high\n", "$.server.port"),
        ("- just\n- a list\n", "object"),
        (
            "gateways:\n  gw1:\n    schemas:\n      - {table: 'bad name', columns: []}\n",
            "gateway 'gw1'",
        ),
        ("gateways:\n  gw1:\n    rules: {version: 2, buckets: []}\n", "version"),
    ],
)
def test_bad_files_name_the_file_and_the_problem(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert str(path) in info.value.message
    assert needle in info.value.message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=r"nope\.yaml"):
        load_config(missing, env={})
