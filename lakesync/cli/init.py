"""``lakesync init``: a starter project in the current directory, no source code needed.

Writes a commented ``lakesync.yaml`` (a gateway ``app`` with a ``todos`` table and a rule each
user sees their own rows; a destination and a connector shown commented out) and a ``.env`` with
a fresh JWT secret, then prints the next three commands. An existing file is left alone unless
``--force``.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated

import typer

from lakesync.config import DEFAULT_CONFIG_FILE
from lakesync.errors import ValidationError

__all__ = ["ENV_FILE", "STARTER_CONFIG", "init_command", "write_starter"]

ENV_FILE = ".env"

STARTER_CONFIG = """\
# lakesync.yaml: what data goes where. Written by `lakesync init`; every key is described in
# the configuration reference (docs/reference/configuration.md). The JWT secret is not here:
# it is LAKESYNC_JWT_SECRET, in .env (`set -a; . ./.env; set +a` exports it).

data_dir: .lakesync              # hot log, Iceberg catalog and warehouse

server:
  host: 127.0.0.1
  port: 8787

gateways:
  app:                           # a gateway id: clients' tokens name it (--gw app)
    # A table: registered at start; pushes naming other columns are refused (422).
    schemas:
      - table: todos
        columns:
          - {name: title, type: string}
          - {name: done, type: boolean}
          - {name: owner, type: string}
    # A rule: each client sees (and may write) the rows whose owner is its token's sub.
    rules:
      version: 1
      buckets:
        - name: mine
          tables: [todos]
          filters: [{column: owner, op: eq, value: "jwt:sub"}]

# A destination: where the pipeline (`lakesync pipeline run`) ships the merged tables.
# destinations:
#   warehouse:
#     kind: postgres             # postgres | mysql | bigquery | lake
#     url: "${WAREHOUSE_URL}"    # e.g. postgresql://user:pass@host/db, from the environment
#     gateway: app
#     tables: [todos]

# A connector: rows of an outside system brought into the gateway as deltas.
# connectors:
#   shop:
#     kind: postgres             # also mysql, postgres_cdc, bigquery, jira, salesforce, ...
#     gateway: app
#     dsn: "${SHOP_DSN}"
#     source_table: orders
#     table: orders
#     key: [id]
#     strategy: cursor
#     cursor_column: updated_at
"""
"""The starter configuration: what ``lakesync init`` writes."""

_NEXT = """\
Next:
  set -a; . ./.env; set +a            # export LAKESYNC_JWT_SECRET (gateway and CLI)
  lakesync up                         # the gateway on http://127.0.0.1:8787
  lakesync token --sub alice --gw app # a client token: sync with lakesync.client
"""


def write_starter(directory: Path, force: bool = False) -> list[Path]:
    """Write the starter ``lakesync.yaml`` and ``.env`` (a new random secret) in ``directory``;
    the files written. Refuses (:class:`ValidationError`, nothing written) when either exists,
    unless ``force``."""
    config, env = directory / DEFAULT_CONFIG_FILE, directory / ENV_FILE
    existing = [p.name for p in (config, env) if p.exists()]
    if existing and not force:
        raise ValidationError(
            f"{' and '.join(existing)} already exist in {directory}; "
            "keep them, or pass --force to overwrite"
        )
    config.write_text(STARTER_CONFIG)
    secret = secrets.token_urlsafe(32)
    env.write_text(
        "# The gateway's JWT secret (lakesync init). Keep it out of version control.\n"
        f"LAKESYNC_JWT_SECRET={secret}\n"
    )
    env.chmod(0o600)  # a secret: readable by its owner only
    return [config, env]


def init_command(
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite an existing lakesync.yaml and .env.")
    ] = False,
) -> None:
    """Start a project here: a commented lakesync.yaml, a .env with a new JWT secret, and the
    next three commands."""
    for path in write_starter(Path.cwd(), force):
        typer.echo(f"wrote {path.name}")
    typer.echo(_NEXT, nl=False)
