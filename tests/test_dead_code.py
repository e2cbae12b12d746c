"""No production-unused function is kept alive by tests.

vulture reads the production packages alone (not ``tests/``): a function or method that nothing in
them calls is either an entry point a framework or a user calls (listed below, each with why) or
dead code that only tests would keep alive. A new one fails this test: delete it, or call it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import vulture

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["lakesync"]  # the one import name: the core and every edge subpackage

# (path, name): entry points called from outside the production packages.
ENTRY_POINTS = {
    # Litestar calls DTO hooks and route handlers registered by decorator.
    ("lakesync/api/controllers/admin.py", "decode_bytes"),
    ("lakesync/api/controllers/sync.py", "decode_bytes"),
    ("lakesync/api/controllers/admin.py", "sync_rules"),
    ("lakesync/api/controllers/admin.py", "list_connectors"),
    ("lakesync/api/controllers/admin.py", "add_connector"),
    ("lakesync/api/controllers/admin.py", "connector_status"),
    ("lakesync/api/controllers/admin.py", "remove_connector"),
    ("lakesync/api/controllers/admin.py", "action_records"),
    ("lakesync/api/controllers/admin.py", "status_of_gateway"),
    ("lakesync/api/controllers/admin.py", "lake_run"),
    ("lakesync/api/controllers/console.py", "asset"),
    ("lakesync/api/controllers/console.py", "events"),
    # typer commands registered by decorator or app.command(...)(fn).
    ("lakesync/cli/lake.py", "run_command"),
    ("lakesync/cli/lake.py", "as_of_command"),
    ("lakesync/cli/lake.py", "generate_command"),
    ("lakesync/cli/main.py", "_root"),
    # The clients' public API, which apps call (nothing inside the package needs to; the
    # other methods share their names with the session's, which the clients call).
    ("lakesync/client/_client.py", "upsert"),
    ("lakesync/client/_async.py", "upsert"),
    # httpx calls an async transport's hook by name.
    ("lakesync/client/transport/http.py", "handle_async_request"),
    # sqlglot calls a dialect generator's hooks by name.
    ("lakesync/destinations/statements/_build.py", "placeholder_sql"),
    # pyiceberg's transaction reads the property this subclass overrides.
    ("lakesync/lakehouse/_transaction.py", "table_metadata"),
    # ... and calls this override on a commit retry (the landing's refuses it).
    ("lakesync/lakehouse/_transaction.py", "_rebuild_snapshot_updates"),
    # thrift's protocol skip() calls the override by name.
    ("lakesync/lakehouse/hive_proxy.py", "readString"),
}


@cache  # one vulture pass (~2 s) serves both tests
def _unused() -> frozenset[tuple[str, str]]:
    finder = vulture.Vulture()
    finder.scavenge([str(ROOT / p) for p in PACKAGES])
    return frozenset(
        (Path(item.filename).resolve().relative_to(ROOT).as_posix(), item.name)
        for item in finder.get_unused_code(min_confidence=60)
        if item.typ in ("function", "method", "property")
    )


def test_every_function_is_called_by_production_code_or_is_an_entry_point() -> None:
    dead = sorted(_unused() - ENTRY_POINTS)
    assert not dead, (
        "functions only tests (or nothing) call; delete them or call them: "
        + ", ".join(f"{path}:{name}" for path, name in dead)
    )


def test_every_listed_entry_point_still_exists_and_is_unused_internally() -> None:
    # A stale entry (renamed or now called internally) would hide a future dead function.
    assert not ENTRY_POINTS - _unused()
