"""Fixtures for end-to-end client tests: a real gateway in a subprocess."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from client_gateway_process import ROOT, Gateway


def _gateway_available() -> bool:
    return (ROOT / "api" / "__main__.py").exists()


def _start(tmp: Path) -> Gateway:
    if not _gateway_available():
        pytest.skip("the gateway (api/__main__.py) is not in the tree yet: e2e tests did not run")
    data = tmp / "gw-data"
    data.mkdir(parents=True, exist_ok=True)
    gw = Gateway(data)
    gw.start()
    return gw


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One gateway per test module; tests isolate themselves with unique gateway ids."""
    gw = _start(tmp_path_factory.mktemp("gateway"))
    yield gw
    gw.stop()


@pytest.fixture
def own_gateway(tmp_path: Path) -> Iterator[Gateway]:
    """A gateway of this test alone (for tests that restart it)."""
    gw = _start(tmp_path)
    yield gw
    gw.stop()


@pytest.fixture
def gw_id() -> str:
    """A fresh gateway id, so tests sharing a gateway process never see each other's data."""
    return f"gw{uuid.uuid4().hex[:12]}"
