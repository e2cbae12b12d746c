"""Typed columns end to end through a real gateway over real HTTP (issue 23), with Hypothesis:
for each type, arbitrary values written by one Python client arrive exactly at another (client
write → push → pull → client read), and wrong-typed or non-canonical wire values are refused
with 400 naming the row, the column, the expected type and its canonical form."""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync.api.app import create_app
from lakesync.client import LakeSyncClient
from lakesync.column_types import INTEGER_MAX, INTEGER_MIN, encode_value
from lakesync.delta import delta_id
from lakesync.schema import ColumnSpec, parse_schema
from tests.api.helpers import auth, make_settings, token
from tests.gateway_process import serve_in_thread

SCHEMA: dict[str, Any] = {
    "table": "typed",
    "columns": [
        {"name": "i", "type": "integer"},
        {"name": "d", "type": "decimal", "precision": 38, "scale": 9},
        {"name": "d2", "type": "decimal", "precision": 10, "scale": 2},
        {"name": "d0", "type": "decimal", "precision": 5, "scale": 0},
        {"name": "t", "type": "timestamp"},
        {"name": "day", "type": "date"},
        {"name": "b", "type": "bytes"},
    ],
}
SPECS = parse_schema(SCHEMA).column_specs()
ZONES = [
    dt.UTC,
    dt.timezone(dt.timedelta(hours=14)),
    dt.timezone(dt.timedelta(hours=-9, minutes=-30)),
]
_rows = itertools.count()


def _decimals(precision: int, scale: int) -> st.SearchStrategy[decimal.Decimal]:
    # From integers and an exponent: exact (Decimal arithmetic rounds to 28 digits).
    limit = 10**precision - 1
    return st.integers(-limit, limit).map(lambda n: decimal.Decimal(f"{n}E-{scale}"))


VALUES: dict[str, st.SearchStrategy[Any]] = {
    "i": st.integers(INTEGER_MIN, INTEGER_MAX)
    | st.sampled_from([2**53, 2**53 + 1, -(2**53) - 1, 2**62 + 1, INTEGER_MIN, INTEGER_MAX]),
    "d": _decimals(38, 9),
    "d2": _decimals(10, 2),
    "d0": _decimals(5, 0),
    "t": st.datetimes(
        min_value=dt.datetime(2, 1, 1), max_value=dt.datetime(9998, 12, 31),
        timezones=st.sampled_from(ZONES),
    ),
    "day": st.dates(),
    "b": st.binary(max_size=64) | st.just(b"\x00"),
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("typed-gw")
    with serve_in_thread(create_app(make_settings(tmp))) as url:
        r = httpx.post(f"{url}/v1/admin/schema/gw1", json=SCHEMA,
                       headers=auth(token("root", role="admin")))
        assert r.status_code == 200, r.text
        yield url


def _client(path: Path, url: str, sub: str) -> LakeSyncClient:
    return LakeSyncClient(str(path), url=url, gateway_id="gw1", token=token(sub), schemas=[SCHEMA])


@pytest.mark.slow
def test_every_type_round_trips_exactly_between_two_clients(gateway: str, tmp_path: Path) -> None:
    with _client(tmp_path / "a.db", gateway, "alice") as alice, \
            _client(tmp_path / "b.db", gateway, "bob") as bob:

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.fixed_dictionaries({}, optional=VALUES))
        def round_trip(values: dict[str, Any]) -> None:
            row = f"r{next(_rows)}"
            alice.insert("typed", row, values)
            alice.sync(retries=0)
            assert alice.status.queue_depth == 0 and alice.dead_letters() == []
            bob.sync(retries=0)
            got = bob.get("typed", row)
            expected = {k: v.astimezone(dt.UTC) if isinstance(v, dt.datetime) else v
                        for k, v in values.items()}
            assert got == expected
            for name, value in (got or {}).items():
                assert type(value) is type(expected[name])
                if isinstance(value, decimal.Decimal):  # quantized to the column's scale
                    assert value.as_tuple().exponent == -(SPECS[name].scale or 0)
            # The query path (SQLite columns and converters) reads the same values.
            (queried,) = bob.query("select * from typed where row_id = ?", [row])
            assert {k: v for k, v in queried.items() if v is not None and k != "row_id"} == expected

        round_trip()


def _raw_push(url: str, row: str, column: str, value: Any) -> httpx.Response:
    """Push one cell as the JSON value given, its deltaId computed over it (as any client
    would), so only the gateway's type check can refuse it."""
    hlc = time.time_ns() // 1_000_000 << 16
    cells = [{"column": column, "value": value}]
    body = {"clientId": "mallory", "deltas": [{
        "op": "UPDATE", "table": "typed", "rowId": row, "clientId": "mallory", "columns": cells,
        "hlc": str(hlc), "deltaId": delta_id("mallory", hlc, "typed", row, cells),
    }]}
    return httpx.post(f"{url}/v1/sync/gw1/push", json=body, headers=auth(token("mallory")))


def _wrong(column: str, value: Any) -> list[Any]:
    """Wrong-typed and non-canonical wire forms of ``value`` in ``column``."""
    spec = SPECS[column]
    wire = encode_value(spec, value)
    forms: list[Any] = [True, [wire], {"v": wire}]
    match spec.type:
        case "integer":
            if isinstance(wire, int):
                forms.append(str(wire))
            elif abs(value) > 2**53 + 1:
                # A big integer as a JSON number. (±(2^53 + 1) as a number reads as ±2^53, the
                # double every JavaScript replica holds, before any check can see it: a canonical
                # value, the same on every replica; docs/protocol.md §10.)
                forms.append(value)
            forms += [1.5, -0.5]
        case "decimal":
            forms += [float(value), "+" + wire, wire + "e0"]
            # One fraction digit too many or too few for the column's scale.
            forms += [wire + "0", wire[:-1]] if "." in wire else [wire + ".0"]
        case "timestamp":
            forms += [wire.replace("Z", "+00:00"), wire[:19] + "Z", wire.replace("T", " "), 0]
        case "date":
            forms += [wire.replace("-", "/"), wire + "T00:00:00.000000Z", 19700101]
        case "bytes":
            forms += [wire.rstrip("=") + "!", wire.replace("+", "-").replace("/", "_") + "-", 5]
    return forms


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_wrong_typed_and_non_canonical_values_are_refused_with_400(
    gateway: str, data: st.DataObject
) -> None:
    column = data.draw(st.sampled_from(sorted(VALUES)))
    value = data.draw(VALUES[column])
    row = f"bad{next(_rows)}"
    for form in _wrong(column, value):
        r = _raw_push(gateway, row, column, form)
        assert r.status_code == 400, (column, form, r.text)
        body = r.json()
        assert body["code"] == "SCHEMA_ERROR", body
        assert f"row {row!r}" in body["error"] and f"column {column!r}" in body["error"], body
        assert "declared " + SPECS[column].type in body["error"], body
    ok = _raw_push(gateway, row, column, encode_value(SPECS[column], value))
    assert ok.status_code == 200, ok.text
