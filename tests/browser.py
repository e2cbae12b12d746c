"""Debian's Chromium driven by Playwright: the one way the tests open a real browser.

Browsers cannot be downloaded here (``playwright install`` fails), so Playwright drives the
system's ``/usr/bin/chromium`` (``scripts/setup.sh`` installs it with apt) with the flags below:
without the background-networking ones Chromium's own connections fail on a closed network.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    """A headless Chromium context (Playwright's ``BrowserContext``) with a fresh profile in
    ``profile``, closed afterwards."""
    assert CHROMIUM.exists(), "Chromium is missing: scripts/setup.sh installs it (apt chromium)"
    from playwright.sync_api import sync_playwright  # loaded by the browser tests only

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()
