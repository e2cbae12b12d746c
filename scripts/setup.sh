#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 machine of this project's kind (run as root, or with sudo):
# apt packages, the .venv with every extra, the lake's jars and catalog, the JavaScript test
# oracles (tests/js; the original TypeScript LakeSync from ../shared when present), and the
# servers the tests use (services.sh: PostgreSQL, MariaDB, S3, ...). Safe to re-run; fast when
# nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

log() { printf '\033[1;34m[setup]\033[0m %s\n' "$*"; }
die() { printf '\033[1;31m[setup] error:\033[0m %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "need root to run: $*  (re-run as root or install it yourself)"; fi
}

# --- apt packages --------------------------------------------------------------------------
# (The jars Spark loads, JDBC drivers included, come from Maven Central: the lake's bootstrap below.)
APT_PACKAGES=(postgresql mariadb-server default-jdk-headless maven nodejs npm chromium)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# A machine may already have a JDK or Node.js from elsewhere; only ask apt for what is absent.
command -v javac >/dev/null && missing=("${missing[@]/default-jdk-headless}")  # javac: the SQL endpoint compiles its authenticator
command -v node >/dev/null && missing=("${missing[@]/nodejs}")
command -v npm >/dev/null && missing=("${missing[@]/npm}")
command -v mvn >/dev/null && missing=("${missing[@]/maven}")
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
  log "installing apt packages: ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # Services must not auto-start from the package scripts here; we start our own below.
  as_root env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# --- Python environment --------------------------------------------------------------------
PY=${LAKESYNC_PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.11 python3.12 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(not (3,11) <= sys.version_info[:2] <= (3,12))'; then
      PY=$cand; break
    fi
  done
fi
[ -n "$PY" ] || die "Python 3.11 or 3.12 is required (set LAKESYNC_PYTHON to its path)"
if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $PY"
  "$PY" -m venv .venv
fi
stamp=.venv/.lakesync-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements.lock -nt "$stamp" ]; then
  # Exact versions from the lock (scripts/lock.sh), so every machine tests the same set; then
  # the project itself, editable, without resolving anything again.
  log "installing requirements.lock + lakesync (editable) into .venv (first time ~2 min: pyspark is large)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.lock
  .venv/bin/python -m pip install -q --no-deps -e .
  touch "$stamp"
fi

# --- the lake: Spark's jars (Iceberg's, the JDBC drivers; pinned, from Maven Central) + catalog ---
if [ -f lakesync/lakehouse/bootstrap.py ]; then
  log "bootstrapping the lake (jars, catalog)"
  .venv/bin/python -m lakesync.lakehouse.bootstrap
fi

# --- JavaScript oracle for the canonical-JSON tests ------------------------------------------
if [ -f tests/js/package.json ] && [ ! -d tests/js/node_modules ]; then
  log "installing the JavaScript test oracle (npm)"
  (cd tests/js && npm ci --silent --no-audit --no-fund)
fi

# --- the original TypeScript LakeSync, whose real client the web-app tests run -----------------
# (tests/lakesync_ts.py: under bun and bundled for Chromium). Only where ../shared has it; its
# setup is idempotent (bun from npm and the monorepo's dependencies, about a minute once).
if [ -x ../shared/lakesync-ts/setup.sh ]; then
  if [ ! -x .servers/lakesync-ts/bun ] || [ ! -d .servers/lakesync-ts/lakesync/node_modules ]; then
    log "installing the original TypeScript LakeSync (bun) into .servers/lakesync-ts"
  fi
  ../shared/lakesync-ts/setup.sh "$ROOT/.servers/lakesync-ts" >/dev/null
fi

# --- servers ----------------------------------------------------------------------------------
./scripts/services.sh
log "ready. Activate with: source .venv/bin/activate && source .lakesync-env"
