#!/usr/bin/env bash
# Set up everything (idempotent) and run the main job on the embedded default:
# a local gateway, local Spark, a local Iceberg warehouse with a SQLite catalog, all under ./.lakesync.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export LAKESYNC_JWT_SECRET=${LAKESYNC_JWT_SECRET:-$(.venv/bin/python -c 'import secrets; print(secrets.token_hex(32))')}
exec .venv/bin/lakesync demo "$@"
