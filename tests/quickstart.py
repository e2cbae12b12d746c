"""The quickstart as the docs show it: its shell lines (``lakesync init`` …) and the Python
snippet after them, the same on every page that shows it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART_DOCS = ["README.md", "lakesync/client/README.md", "docs/guides/app-developer.md"]
_SHELL_THEN_PYTHON = r"```sh\n(lakesync init [^`]*)```\n\n```python\n([^`]*)```"


def documented_quickstart() -> tuple[str, str]:
    """The quickstart's shell lines and its Python snippet, failing if a page lacks them or
    the pages show different ones."""
    shown = set()
    for doc in QUICKSTART_DOCS:
        found = re.search(_SHELL_THEN_PYTHON, (ROOT / doc).read_text())
        assert found is not None, doc
        shown.add((found.group(1), found.group(2)))
    assert len(shown) == 1, "the pages show different quickstarts"
    ((shell, snippet),) = shown
    return shell, snippet
