"""Configuration (lakesync.yaml + environment): defaults, overrides, file parsing, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakesync.config import Config, LakeConfig, ServerConfig, apply_environment, load_config
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
    assert config.pg_schema == "lakesync"
    assert config.lake == LakeConfig()
    assert config.lake.spark_master == "local[2]" and config.lake.catalog_uri is None


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


TYPED_YAML = """
gateways:
  gw1:
    schemas:
      - table: orders
        columns:
          - {name: id, type: integer, nullable: false}
          - {name: amount, type: decimal, precision: 38, scale: 9}
          - {name: fee, type: decimal}
          - {name: at, type: timestamp}
          - {name: day, type: date}
          - {name: blob, type: bytes}
"""


def test_typed_columns_are_declared_in_the_file(tmp_path: Path) -> None:
    (orders,) = load_config(write(tmp_path, TYPED_YAML), env={}).gateways["gw1"].schemas
    assert orders.columns == [
        ColumnSpec("id", "integer", nullable=False),
        ColumnSpec("amount", "decimal", precision=38, scale=9),
        ColumnSpec("fee", "decimal", precision=38, scale=9),
        ColumnSpec("at", "timestamp"),
        ColumnSpec("day", "date"),
        ColumnSpec("blob", "bytes"),
    ]
    bad = TYPED_YAML.replace("{name: day, type: date}", "{name: day, type: date, scale: 2}")
    with pytest.raises(ConfigError, match="gateway 'gw1': column 'day' is date: only a decimal"):
        load_config(write(tmp_path, bad), env={})


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
        ("gateways:\n  gw-1: {}\n", "invalid gateway id 'gw-1'"),
        ("server:\n  port: high\n", "$.server.port"),
        ("server:\n  rate_limt: 5\n", "rate_limt"),
        ("server:\n  rate_limit: -1\n", "$.server.rate_limit"),
        ("server:\n  backpressure_bytes: 1.5\n", "$.server.backpressure_bytes"),
        ("lake:\n  catalog_url: jdbc:sqlite:x\n", "catalog_url"),
        ("lake:\n  spark_cores_max: many\n", "$.lake.spark_cores_max"),
        ("lake:\n  spark_master: ''\n", "$.lake.spark_master"),
        ("lake:\n  spark_driver_host: 'driver:7078'\n", "$.lake.spark_driver_host"),
        ("lake:\n  spark_driver_port: -1\n", "$.lake.spark_driver_port"),
        ("lake:\n  spark_block_manager_port: 70000\n", "$.lake.spark_block_manager_port"),
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


_TYPOS_ROOT = "connectors:\n  tracker: {kind: jira, gateway: gw1, url: u, email: e, token: t, "
_TYPO_RULES = (
    "gateways:\n  gw1:\n    rules:\n      version: 1\n      buckets:\n"
    "        - {name: mine, tables: [todos], filters: [{colum: owner, op: eq, value: x}]}\n"
)


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("dta_dir: x\n", ["unknown field `dta_dir`", "did you mean `data_dir`?"]),
        ("server:\n  rate_limt: 5\n", ["at `$.server`", "did you mean `rate_limit`?"]),
        ("lake:\n  catalog_url: x\n", ["did you mean `catalog_uri`?"]),
        ("gateways:\n  gw1:\n    schemaz: []\n", ["gateway 'gw1'", "did you mean `schemas`?"]),
        (
            "gateways:\n  gw1:\n    schemas:\n      - {table: t, columns: [], primaryKeys: [a]}\n",
            ["gateway 'gw1'", "did you mean `primaryKey`?"],
        ),
        (_TYPO_RULES, ["gateway 'gw1'", "$.buckets[0].filters[0]", "did you mean `column`?"]),
        (
            _TYPOS_ROOT + "intervall: 5}\n",
            ["gateway 'gw1'", "connector 'tracker'", "did you mean `interval`?"],
        ),
        (
            "destinations:\n  wh: {kind: postgres, url: 'postgresql://h/d', gateway: gw1, "
            "delet: soft}\n",
            ["gateway 'gw1'", "destination 'wh'", "did you mean `delete`?"],
        ),
    ],
    ids=["top", "server", "lake", "gateway", "schema", "rules", "connector", "destination"],
)
def test_an_unknown_key_names_where_it_is_and_the_nearest_key(
    tmp_path: Path, text: str, needles: list[str]
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    for needle in [str(path), *needles]:
        assert needle in info.value.message, info.value.message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=r"nope\.yaml"):
        load_config(missing, env={})


KNOBS = """\
pg_schema: file_schema
server:
  rate_limit: 1.5
  rate_burst: 3
  backpressure_bytes: 4096
  ws_max_connections: 7
  ws_max_connections_per_gateway: 6
  ws_max_connections_per_client: 5
  ws_rate_limit: 8
  flush_interval: 9
  pipeline_interval: 10
  docs: false
  metrics_gateway_labels: false
  cors_origins: [https://app.example.com]
lake:
  catalog_uri: jdbc:postgresql://db:5432/lake
  catalog_user: lake_user
  catalog_password: lake_pass
  warehouse: s3://bucket/wh
  spark_master: spark://file:7077
  spark_cores_max: 4
  spark_executor_memory: 2g
  spark_driver_host: driver.file
  spark_driver_port: 7001
  spark_block_manager_port: 7002
  jars_dir: /file/jars
  dbt_project_dir: /file/dbt
  s3_endpoint: http://file:9000
  s3_region: eu-file-1
  s3_path_style: true
  s3_access_key_id: ${FILE_KEY}
  s3_secret_access_key: ${file:/file/secret}
"""

# (environment variable, its value, where the resolved value lives, value from KNOBS, from env)
OVERRIDES = [
    ("LAKESYNC_PG_SCHEMA", "env_schema", "pg_schema", "file_schema", "env_schema"),
    ("LAKESYNC_RATE_LIMIT", "0", "server.rate_limit", 1.5, 0.0),
    ("LAKESYNC_RATE_BURST", "30", "server.rate_burst", 3.0, 30.0),
    ("LAKESYNC_BACKPRESSURE_BYTES", "1e9", "server.backpressure_bytes", 4096, 10**9),
    ("LAKESYNC_WS_MAX_CONNECTIONS", "70", "server.ws_max_connections", 7, 70),
    ("LAKESYNC_WS_MAX_CONNECTIONS_PER_GATEWAY", "0", "server.ws_max_connections_per_gateway", 6, 0),
    ("LAKESYNC_WS_MAX_CONNECTIONS_PER_CLIENT", "50", "server.ws_max_connections_per_client", 5, 50),
    ("LAKESYNC_WS_RATE_LIMIT", "0.5", "server.ws_rate_limit", 8.0, 0.5),
    ("LAKESYNC_FLUSH_INTERVAL", "0", "server.flush_interval", 9.0, 0.0),
    ("LAKESYNC_PIPELINE_INTERVAL", "60", "server.pipeline_interval", 10.0, 60.0),
    ("LAKESYNC_DOCS", "true", "server.docs", False, True),
    ("LAKESYNC_METRICS_GATEWAY_LABELS", "1", "server.metrics_gateway_labels", False, True),
    ("LAKESYNC_CATALOG_URI", "jdbc:sqlite:/c.db", "lake.catalog_uri",
     "jdbc:postgresql://db:5432/lake", "jdbc:sqlite:/c.db"),
    ("LAKESYNC_CATALOG_USER", "u2", "lake.catalog_user", "lake_user", "u2"),
    ("LAKESYNC_CATALOG_PASSWORD", "p2", "lake.catalog_password", "lake_pass", "p2"),
    ("LAKESYNC_WAREHOUSE", "file:///wh", "lake.warehouse", "s3://bucket/wh", "file:///wh"),
    ("LAKESYNC_SPARK_MASTER", "local[1]", "lake.spark_master", "spark://file:7077", "local[1]"),
    ("LAKESYNC_SPARK_CORES_MAX", "8", "lake.spark_cores_max", 4, 8),
    ("LAKESYNC_SPARK_EXECUTOR_MEMORY", "4g", "lake.spark_executor_memory", "2g", "4g"),
    ("LAKESYNC_SPARK_DRIVER_HOST", "10.0.0.5", "lake.spark_driver_host", "driver.file",
     "10.0.0.5"),
    ("LAKESYNC_SPARK_DRIVER_PORT", "40000", "lake.spark_driver_port", 7001, 40000),
    ("LAKESYNC_SPARK_BLOCK_MANAGER_PORT", "40001", "lake.spark_block_manager_port", 7002, 40001),
    ("LAKESYNC_JARS_DIR", "/env/jars", "lake.jars_dir", "/file/jars", "/env/jars"),
    ("LAKESYNC_DBT_PROJECT_DIR", "/env/dbt", "lake.dbt_project_dir", "/file/dbt", "/env/dbt"),
    ("LAKESYNC_S3_ENDPOINT", "https://env:443", "lake.s3_endpoint", "http://file:9000",
     "https://env:443"),
    ("LAKESYNC_S3_REGION", "eu-env-1", "lake.s3_region", "eu-file-1", "eu-env-1"),
    ("LAKESYNC_S3_PATH_STYLE", "false", "lake.s3_path_style", True, False),
    ("LAKESYNC_S3_ACCESS_KEY_ID", "AKENV", "lake.s3_access_key_id", "${FILE_KEY}", "AKENV"),
    ("LAKESYNC_S3_SECRET_ACCESS_KEY", "${ENV_SECRET}", "lake.s3_secret_access_key",
     "${file:/file/secret}", "${ENV_SECRET}"),
    ("LAKESYNC_CORS_ORIGINS", "*", "server.cors_origins", ["https://app.example.com"], ["*"]),
    ("LAKESYNC_HOST", "0.0.0.0", "server.host", "127.0.0.1", "0.0.0.0"),
    ("LAKESYNC_PORT", "9999", "server.port", 8787, 9999),
]


def resolved(config: Config, where: str) -> object:
    value: object = config
    for part in where.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize(("var", "raw", "where", "from_file", "from_env"), OVERRIDES)
def test_every_knob_from_the_file_and_its_variable_wins(
    tmp_path: Path, var: str, raw: str, where: str, from_file: object, from_env: object
) -> None:
    path = write(tmp_path, KNOBS)
    assert resolved(load_config(path, env={}), where) == from_file
    assert resolved(load_config(path, env={var: ""}), where) == from_file  # empty = unset
    assert resolved(load_config(path, env={var: raw}), where) == from_env
    assert resolved(load_config(None, env={var: raw}), where) == from_env


@pytest.mark.parametrize(
    ("var", "raw"),
    [
        ("LAKESYNC_RATE_LIMIT", "fast"),
        ("LAKESYNC_RATE_BURST", "-1"),
        ("LAKESYNC_BACKPRESSURE_BYTES", "1.5"),
        ("LAKESYNC_WS_MAX_CONNECTIONS", "-5"),
        ("LAKESYNC_WS_MAX_CONNECTIONS_PER_CLIENT", "two"),
        ("LAKESYNC_DOCS", "off"),
        ("LAKESYNC_WS_RATE_LIMIT", "nan"),
        ("LAKESYNC_FLUSH_INTERVAL", "5s"),
        ("LAKESYNC_PIPELINE_INTERVAL", "-0.5"),
        ("LAKESYNC_SPARK_CORES_MAX", "two"),
        ("LAKESYNC_SPARK_DRIVER_HOST", "spark://driver:7077"),
        ("LAKESYNC_SPARK_DRIVER_HOST", "driver host"),
        ("LAKESYNC_SPARK_DRIVER_PORT", "0"),
        ("LAKESYNC_SPARK_DRIVER_PORT", "65536"),
        ("LAKESYNC_SPARK_BLOCK_MANAGER_PORT", "any"),
        ("LAKESYNC_S3_PATH_STYLE", "sometimes"),
        ("LAKESYNC_PORT", "http"),
        ("LAKESYNC_CORS_ORIGINS", "https://app.example.com/"),
        ("LAKESYNC_CORS_ORIGINS", "https://app.example.com,"),
        ("LAKESYNC_CORS_ORIGINS", "app.example.com"),
    ],
)
def test_bad_environment_values_name_the_variable(tmp_path: Path, var: str, raw: str) -> None:
    path = write(tmp_path, KNOBS)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={var: raw})
    assert info.value.message.startswith(f"{var}={raw!r} is invalid")


def test_apply_environment_keeps_what_the_environment_leaves_unset(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, KNOBS), env={"LAKESYNC_JWT_SECRET": "s"})
    again = apply_environment(config, {"LAKESYNC_RATE_BURST": "99"})
    assert again.server.rate_burst == 99
    assert again.server.rate_limit == 1.5 and again.lake == config.lake
    assert again.jwt_secrets == ["s"] and again.gateways == config.gateways
    assert apply_environment(config, {}) == config


@pytest.mark.parametrize(
    ("text", "env", "origins"),
    [
        ("", "", "*"),  # the default: any origin
        ("cors_origins: '*'", "", "*"),
        ("cors_origins: https://app.example.com", "", "https://app.example.com"),
        ("cors_origins: [https://app.example.com, 'http://localhost:5173']", "",
         ["https://app.example.com", "http://localhost:5173"]),
        ("cors_origins: ['http://[::1]:5173', 'capacitor://localhost']", "",
         ["http://[::1]:5173", "capacitor://localhost"]),
        ("cors_origins: []", "", []),  # no page elsewhere
        ("cors_origins: []", "https://app.example.com , http://localhost:5173",
         ["https://app.example.com", "http://localhost:5173"]),
        ("", "http://localhost:5173", ["http://localhost:5173"]),
    ],
)
def test_cors_origins_forms(tmp_path: Path, text: str, env: str, origins: object) -> None:
    path = write(tmp_path, f"server:\n  {text}\n" if text else "")
    config = load_config(path, env={"LAKESYNC_CORS_ORIGINS": env})
    assert config.server.cors_origins == origins


@pytest.mark.parametrize(
    "value", ["https://app.example.com/", "https://app.example.com/app", "app.example.com",
              "null", "''", "https://*.example.com", "42"],
)
def test_a_cors_origin_that_is_no_origin_names_the_key(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, f"server:\n  cors_origins: [{value}]\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert str(path) in info.value.message
    assert "cors_origins" in info.value.message
