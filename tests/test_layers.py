"""The architecture's layers (pyproject.toml ``[tool.importlinter]``) hold, and the check fails
on an upward import: a copy of the package with one added ``client -> api`` import is refused.
No module imports itself back through others (lazy imports once hid a cycle), and a copy with
an added cycle shows it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
LINT = [sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()"]


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        LINT, cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_layers_hold() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "0 broken" in done.stdout


def _copy_tree(to: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", to)
    shutil.copytree(
        ROOT / "lakesync", to / "lakesync", symlinks=True,
        ignore=shutil.ignore_patterns("__pycache__", "dbt_project"),
    )


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    _copy_tree(tmp_path)
    types = tmp_path / "lakesync" / "client" / "_types.py"
    upward = "\nimport lakesync.api.app  # the client above the gateway\n"
    types.write_text(types.read_text() + upward)
    done = _lint(tmp_path)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "BROKEN" in done.stdout
    assert "lakesync.client._types -> lakesync.api.app" in done.stdout


def import_cycles(package: str = "lakesync") -> list[list[str]]:
    """One shortest import cycle per group of ``package``'s modules that import each other,
    each as ``[a, b, ..., a]``; grimp's graph has every import statement (lazy and
    ``TYPE_CHECKING`` ones too)."""
    graph = grimp.build_graph(package, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    cycles = []
    for group in _strongly_connected(edges):
        if len(group) > 1 or group[0] in edges[group[0]]:
            cycles.append(min((_shortest_cycle(edges, m, set(group)) for m in group), key=len))
    return cycles


def _strongly_connected(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``edges``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            groups.append(sorted(group))

    for node in edges:
        if node not in index:
            visit(node)
    return groups


def _shortest_cycle(edges: dict[str, list[str]], start: str, group: set[str]) -> list[str]:
    """The shortest path ``start -> ... -> start`` inside ``group`` (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in edges[node]:
                if nxt not in group or nxt in came_from:
                    continue
                came_from[nxt] = node
                if nxt == start:
                    path = [start]
                    while path[-1] != start or len(path) == 1:
                        path.append(came_from[path[-1]])
                    return path[::-1]
                following.append(nxt)
        frontier = following
    raise AssertionError(f"{start} is on no cycle of its group")


def _cycles(root: Path) -> list[list[str]]:
    """The import cycles of the ``lakesync`` package under ``root`` (in a subprocess: grimp reads
    the package the interpreter finds, and this one has imported the checkout's)."""
    code = "import json, tests.test_layers as t; print(json.dumps(t.import_cycles()))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cycles: list[list[str]] = json.loads(done.stdout)
    return cycles


def _shown(cycles: list[list[str]]) -> str:
    return "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_no_module_of_lakesync_imports_itself_back() -> None:
    cycles = _cycles(ROOT)
    assert not cycles, "import cycles (move the shared code down a layer):\n" + _shown(cycles)


def test_an_import_cycle_is_found_and_shown(tmp_path: Path) -> None:
    _copy_tree(tmp_path)
    # A cycle once found: the DuckDB connection importing the query module back.
    connection = tmp_path / "lakesync" / "lakehouse" / "connection.py"
    connection.write_text(connection.read_text() + "\nimport lakesync.lakehouse.query\n")
    cycles = _cycles(tmp_path)
    assert _shown(cycles) == (
        "lakesync.lakehouse.connection -> lakesync.lakehouse.query -> "
        "lakesync.lakehouse.connection"
    )
    # The lakehouse's own layers contract refuses the upward import too.
    done = _lint(tmp_path)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "lakesync.lakehouse.connection -> lakesync.lakehouse.query" in done.stdout
