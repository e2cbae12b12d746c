"""``lakesync.yaml`` and the environment: the one place configuration is read.

The file is optional; without it LakeSync runs on embedded defaults (one data directory holding
the hot log, the Iceberg catalog and warehouse). Environment variables override the file:

- ``LAKESYNC_CONFIG``: path of the config file (default ``./lakesync.yaml`` if present)
- ``LAKESYNC_DATA_DIR``: data directory (default ``./.lakesync``)
- ``LAKESYNC_JWT_SECRET`` / ``LAKESYNC_JWT_SECRET_PREVIOUS``: token secrets (rotation)
- ``LAKESYNC_STORE_URL``: hot-log store, ``sqlite`` (default) or a ``postgresql://`` DSN
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import yaml

from lakesync.errors import ConfigError, LakeSyncError
from lakesync.rules import SyncRules, parse_rules
from lakesync.schema import TableSchema, parse_schema

__all__ = ["DEFAULT_CONFIG_FILE", "Config", "GatewayConfig", "ServerConfig", "load_config"]

DEFAULT_CONFIG_FILE = "lakesync.yaml"


class ServerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where ``lakesync up`` listens."""

    host: str = "127.0.0.1"
    port: int = 8787


class GatewayConfig(msgspec.Struct, frozen=True):
    """One gateway (tenant): its table schemas and sync rules."""

    id: str
    schemas: list[TableSchema] = []
    rules: SyncRules | None = None


class Config(msgspec.Struct, frozen=True):
    """The whole resolved configuration."""

    data_dir: Path
    jwt_secrets: list[str]
    store_url: str = "sqlite"
    server: ServerConfig = ServerConfig()
    gateways: dict[str, GatewayConfig] = {}
    source: Path | None = None


class _GatewayFile(msgspec.Struct, forbid_unknown_fields=True):
    schemas: list[Any] = []
    rules: Any = None


class _File(msgspec.Struct, forbid_unknown_fields=True):
    data_dir: str | None = None
    store_url: str | None = None
    server: ServerConfig = ServerConfig()
    gateways: dict[str, _GatewayFile] = {}


def _read_file(path: Path) -> _File:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    try:
        return msgspec.convert(raw or {}, _File)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _gateway(gw_id: str, spec: _GatewayFile, path: Path) -> GatewayConfig:
    try:
        schemas = [parse_schema(s) for s in spec.schemas]
        rules = None if spec.rules is None else parse_rules(spec.rules)
    except LakeSyncError as exc:
        raise ConfigError(f"{path}: gateway {gw_id!r}: {exc.message}") from None
    return GatewayConfig(gw_id, schemas, rules)


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Resolve the configuration from ``path`` (or the default file, if any) and ``env``."""
    env = os.environ if env is None else env
    if path is None and env.get("LAKESYNC_CONFIG"):
        path = Path(env["LAKESYNC_CONFIG"])
    if path is None and Path(DEFAULT_CONFIG_FILE).is_file():
        path = Path(DEFAULT_CONFIG_FILE)
    file = _read_file(path) if path is not None else _File()
    gateways = {
        gw_id: _gateway(gw_id, spec, path)  # type: ignore[arg-type]
        for gw_id, spec in file.gateways.items()
    }
    data_dir = Path(env.get("LAKESYNC_DATA_DIR") or file.data_dir or ".lakesync")
    secrets = [
        s for s in (env.get("LAKESYNC_JWT_SECRET"), env.get("LAKESYNC_JWT_SECRET_PREVIOUS")) if s
    ]
    return Config(
        data_dir=data_dir,
        jwt_secrets=secrets,
        store_url=env.get("LAKESYNC_STORE_URL") or file.store_url or "sqlite",
        server=file.server,
        gateways=gateways,
        source=path,
    )
