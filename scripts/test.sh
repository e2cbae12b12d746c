#!/usr/bin/env bash
# Set up everything (idempotent) and run the whole test suite: ruff, mypy --strict, the docs site
# (mkdocs build --strict), pytest.
# Extra arguments go to pytest, e.g. `scripts/test.sh -m "not spark and not slow"` for the fast subset.
# pytest runs on one xdist worker per core (each module's Spark and dbt tests together on one of
# them, see tests/conftest.py); `scripts/test.sh -n 0` runs serially.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# shellcheck disable=SC1091
source .lakesync-env
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"; ruff check .
echo "== mypy --strict"; mypy
echo "== import-linter (layers)"; lint-imports
echo "== mkdocs build --strict"
site=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir "$site"
rm -rf "$site"
echo "== pytest"
set +e
pytest -n auto --dist loadgroup --durations=20 "$@"
rc=$?
set -e
# pytest exits 5 when it collected nothing: that is a failure of the suite, not a pass.
exit $rc
