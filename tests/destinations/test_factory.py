"""The registry of destination kinds: every declarable kind is registered, an unknown one is
refused naming the known ones, and a missing driver is an error naming the pip extra."""

from __future__ import annotations

import sys
from typing import get_args

import pytest

from lakesync.destination_specs import COLD_TIER, DestinationKind, DestinationSpec
from lakesync.destinations.base import DestinationError
from lakesync.destinations.factory import KINDS, destination_kind, open_destination
from lakesync.errors import ConfigError


def test_every_declarable_kind_is_registered() -> None:
    assert set(KINDS) == set(get_args(DestinationKind))
    assert [k for k, entry in KINDS.items() if entry.type.lives_in_lake] == ["lake"]
    assert {k: entry.dialect for k, entry in KINDS.items()} == {
        "postgres": "postgres", "mysql": "mysql", "bigquery": "bigquery", "lake": None}


def test_the_specs_cold_tier_is_the_registrys_lake_capability() -> None:
    # The configuration (below the destinations) refuses a hot window on the cold tier from
    # its own table; it must say what the registered adapters say.
    assert {k: entry.type.lives_in_lake for k, entry in KINDS.items()} == COLD_TIER


def test_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown destination kind 'oracle' \(kinds: postgres"):
        destination_kind("oracle")


@pytest.mark.parametrize(("kind", "module", "url"), [
    ("postgres", "psycopg", "postgresql://u@127.0.0.1:1/db"),
    ("mysql", "pymysql", "mysql://u@127.0.0.1:1/db"),
])
def test_a_missing_driver_names_the_pip_extra(
    kind: DestinationKind, module: str, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # importing it now raises ImportError
    with pytest.raises(DestinationError, match=r"pip install 'lakesync\[destinations\]'"):
        open_destination(DestinationSpec(kind, url, "gw1", name="d"), env={})


def test_a_lake_destination_needs_the_lakes_catalog() -> None:
    spec = DestinationSpec("lake", "lake://exports", "gw1", name="d")
    with pytest.raises(ConfigError, match="open it with the lake's catalog"):
        open_destination(spec, env={})
