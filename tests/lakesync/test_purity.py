"""The protocol core stays pure: the core modules of ``lakesync`` (its own modules and ``proto``,
not the edge subpackages nor ``telemetry``) import no gateway, client, hot log, lakehouse or I/O
library.

Two checks, because each misses what the other sees: the source of every module (its ``import``
statements, lazy ones inside functions included) against an allow-list, and a fresh interpreter
that imports every module and then looks for the heavy I/O packages in ``sys.modules`` (catches
an import hidden behind ``importlib`` or a re-export).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "lakesync"

# Third-party packages the core may use: codecs and parsers, no I/O of their own.
ALLOWED_THIRD_PARTY = {"msgspec", "yaml", "jwt", "google", "sqlglot"}
# Standard-library modules that do network, process or database I/O.
FORBIDDEN_STDLIB = {
    "asyncio", "ftplib", "http", "multiprocessing", "selectors", "smtplib", "socket",
    "socketserver", "sqlite3", "ssl", "subprocess", "urllib",
}
# Subpackages (and the one module, ``telemetry``: OpenTelemetry export) of ``lakesync`` that sit
# at the edges (not part of the core).
EDGES = {
    "api", "client", "cli", "hotlog", "lakehouse", "connectors", "destinations", "spark_udfs",
    "telemetry",
}
# The edge subpackages and the I/O libraries they use.
FORBIDDEN = {
    *(f"lakesync.{edge}" for edge in EDGES),
    "httpx", "websockets", "litestar", "uvicorn", "psycopg", "psycopg_pool", "pymysql",
    "pyspark", "dbt", "duckdb", "pyiceberg", "pyarrow", "sqlalchemy", "requests", "rich", "typer",
}


def _core_modules() -> list[Path]:
    return sorted(
        p for p in CORE.rglob("*.py")
        if not p.name.endswith("_pb2.py")
        and p.relative_to(CORE).parts[0].removesuffix(".py") not in EDGES
    )


def _top(module: str) -> str:
    """A module's top-level name, or ``lakesync.<sub>`` for this project's own modules."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "lakesync" and len(parts) > 1 else parts[0]


def _imported(path: Path) -> set[str]:
    """Top-level names (``lakesync.<sub>`` for the project) of the modules ``path`` imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(_top(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(_top(node.module))
            if node.module == "lakesync":
                names.update(f"lakesync.{alias.name}" for alias in node.names)
    return names


def test_the_walk_sees_every_core_module() -> None:
    names = {p.relative_to(CORE).as_posix() for p in _core_modules()}
    assert {"delta.py", "merge.py", "rules.py", "views.py", "wire.py", "wsframes.py"} <= names


@pytest.mark.parametrize("path", _core_modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_core_module_imports_only_the_core_the_stdlib_and_codecs(path: Path) -> None:
    imported = _imported(path) - {"lakesync", "__future__"}
    edges = imported & FORBIDDEN
    assert not edges, f"{path.name} imports {sorted(edges)}: not allowed in the pure core"
    outside = {
        name for name in imported
        if name not in sys.stdlib_module_names and name not in ALLOWED_THIRD_PARTY
        and not name.startswith("lakesync.")
    }
    assert not outside, f"{path.name} imports {sorted(outside)}: not allowed in the pure core"
    io = imported & FORBIDDEN_STDLIB
    assert not io, f"{path.name} imports {sorted(io)}: I/O belongs at the edges"


def test_importing_the_whole_core_loads_no_edge_package() -> None:
    modules = [
        "lakesync." + p.relative_to(CORE).with_suffix("").as_posix().replace("/", ".")
        for p in _core_modules()
        if p.name != "__init__.py"
    ]
    probe = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted({'.'.join(n.split('.')[:2]) if n.startswith('lakesync.')"
        " else n.split('.')[0] for n in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    loaded = set(json.loads(out))
    assert "lakesync" in loaded
    assert not loaded & FORBIDDEN, f"importing lakesync loads {sorted(loaded & FORBIDDEN)}"
