"""Shared pytest setup: Hypothesis profiles.

The default profile stays as Hypothesis ships it (random, so local runs keep exploring); CI
loads ``ci`` (set env ``CI``), which is derandomized so a CI run is reproducible.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
