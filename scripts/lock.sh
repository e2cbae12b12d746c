#!/usr/bin/env bash
# Regenerate requirements.lock: every package of `lakesync[all,dev]` resolved to one exact version
# for Python 3.11. setup.sh and CI install from the lock; pyproject.toml keeps the ranges library
# users install from. Run it after changing a dependency in pyproject.toml, then run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/uv pip compile pyproject.toml --extra all --extra dev --python-version 3.11 \
  --quiet --output-file requirements.lock "$@"
