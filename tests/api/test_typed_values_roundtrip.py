"""Typed columns end to end through a real gateway over real HTTP, with Hypothesis:
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
from lakesync.schema import parse_schema
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
        min_value=dt.datetime(2, 1, 1),
        max_value=dt.datetime(9998, 12, 31),
        timezones=st.sampled_from(ZONES),
    ),
    "day": st.dates(),
    "b": st.binary(max_size=64) | st.just(b"\x00"),
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("typed-gw")
    with serve_in_thread(create_app(make_settings(tmp))) as url:
        r = httpx.post(
            f"{url}/v1/admin/schema/gw1", json=SCHEMA, headers=auth(token("root", role="admin"))
        )
        assert r.status_code == 200, r.text
        yield url


def _client(path: Path, url: str, sub: str) -> LakeSyncClient:
    return LakeSyncClient(str(path), url=url, gateway_id="gw1", token=token(sub), schemas=[SCHEMA])


@pytest.mark.slow
def test_every_type_round_trips_exactly_between_two_clients(gateway: str, tmp_path: Path) -> None:
    with (
        _client(tmp_path / "a.db", gateway, "alice") as alice,
        _client(tmp_path / "b.db", gateway, "bob") as bob,
    ):

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.fixed_dictionaries({}, optional=VALUES))
        def round_trip(values: dict[str, Any]) -> None:
            row = f"r{next(_rows)}"
            alice.insert("typed", row, values)
            alice.sync(retries=0)
            assert alice.status.queue_depth == 0 and alice.dead_letters() == []
            bob.sync(retries=0)
            got = bob.get("typed", row)
            expected = {
                k: v.astimezone(dt.UTC) if isinstance(v, dt.datetime) else v
                for k, v in values.items()
            }
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
    body = {
        "clientId": "mallory",
        "deltas": [
            {
                "op": "UPDATE",
                "table": "typed",
                "rowId": row,
                "clientId": "mallory",
                "columns": cells,
                "hlc": str(hlc),
                "deltaId": delta_id("mallory", hlc, "typed", row, cells),
            }
        ],
    }
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


def test_the_gateway_tells_clients_its_schemas(gateway: str, tmp_path: Path) -> None:
    r = httpx.get(f"{gateway}/v1/sync/gw1/schemas", headers=auth(token("carol")))
    assert r.status_code == 200 and r.json() == {"schemas": [SCHEMA]}
    other = httpx.get(f"{gateway}/v1/sync/gw2/schemas", headers=auth(token("carol")))
    assert other.status_code == 403
    values = {
        "i": 2**62 + 1,
        "d2": decimal.Decimal("-0.05"),
        "b": b"\x00",
        "t": dt.datetime(2000, 1, 1, tzinfo=dt.UTC),
        "day": dt.date(1, 1, 1),
    }
    with _client(tmp_path / "a.db", gateway, "alice") as alice:
        alice.insert("typed", "told", values)
        alice.sync(retries=0)
    # A client that declares no schema (or fewer columns) takes the gateway's before it pulls,
    # so it reads the typed columns as Python values, not as the strings of their encodings.
    fewer = {"table": "typed", "columns": [{"name": "i", "type": "integer"}]}
    for schemas in ([], [fewer]):
        with LakeSyncClient(
            str(tmp_path / f"c{len(schemas)}.db"),
            url=gateway,
            gateway_id="gw1",
            token=token("carol"),
            schemas=schemas,
        ) as carol:
            carol.sync(retries=0)
            assert carol.get("typed", "told") == values
            assert carol.schemas()["typed"].column_specs()["d2"] == SPECS["d2"]


def test_a_client_declaring_another_type_gets_its_writes_dead_lettered_with_the_reason(
    gateway: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mine = {"table": "typed", "columns": [{"name": "d2", "type": "number"}]}
    with LakeSyncClient(
        str(tmp_path / "n.db"), url=gateway, gateway_id="gw1", token=token("dave"), schemas=[mine]
    ) as dave:
        dave.insert("typed", "dave1", {"d2": 1.5})
        dave.sync(retries=0)
        assert "keeping the local column type" in caplog.text  # number is wider than decimal
        (letter,) = dave.dead_letters()
        assert letter.code == "SCHEMA_ERROR"
        assert "row 'dave1'" in letter.error and "decimal(10,2)" in letter.error
        assert '"12.50"' in letter.error
        assert dave.get("typed", "dave1") is None


@pytest.mark.slow
def test_realtime_broadcasts_reach_watchers_as_python_values(gateway: str, tmp_path: Path) -> None:
    from lakesync.client import Change
    from tests.client.test_client_e2e import wait_for

    values = {
        "i": -(2**63),
        "d": decimal.Decimal("0.000000001"),
        "t": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
    }
    seen: list[Change] = []
    with (
        LakeSyncClient(
            str(tmp_path / "ws.db"),
            url=gateway,
            gateway_id="gw1",
            token=token("erin"),
            schemas=[SCHEMA],
            transport="websocket",
        ) as erin,
        _client(tmp_path / "w.db", gateway, "alice") as alice,
    ):
        erin.sync(retries=0)
        erin.watch("typed", seen.extend)
        alice.insert("typed", "live", values)
        alice.sync(retries=0)
        wait_for(lambda: any(c.row_id == "live" for c in seen), timeout=60)
        (change,) = [c for c in seen if c.row_id == "live"]
        assert change.origin == "realtime" and change.after == values
        assert erin.get("typed", "live") == values


def test_a_column_registered_after_the_first_sync_is_held_as_its_type(
    gateway: str, tmp_path: Path
) -> None:
    admin = auth(token("root", role="admin"))
    first = {"table": "later", "columns": [{"name": "a", "type": "string"}]}
    assert httpx.post(f"{gateway}/v1/admin/schema/gw1", json=first, headers=admin).is_success
    with LakeSyncClient(
        str(tmp_path / "f.db"), url=gateway, gateway_id="gw1", token=token("frank")
    ) as frank:
        frank.sync(retries=0)  # takes the gateway's schemas as they are now
        assert "amount" not in frank.schemas()["later"].column_types()
        grown = {**first, "columns": [*first["columns"], {"name": "amount", "type": "decimal"}]}
        assert httpx.post(f"{gateway}/v1/admin/schema/gw1", json=grown, headers=admin).is_success
        with LakeSyncClient(
            str(tmp_path / "g.db"), url=gateway, gateway_id="gw1", token=token("gina")
        ) as gina:
            gina.sync(retries=0)
            gina.insert("later", "l1", {"a": "x", "amount": decimal.Decimal("7.5")})
            gina.sync(retries=0)
        frank.sync(retries=0)  # the page names a column frank lacks: it asks again
        assert frank.get("later", "l1") == {"a": "x", "amount": decimal.Decimal("7.500000000")}
        assert frank.schemas()["later"].column_types()["amount"] == "decimal"


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    ints=st.lists(st.integers(INTEGER_MIN, INTEGER_MAX), min_size=1, max_size=5),
    stamps=st.lists(VALUES["t"], min_size=1, max_size=3),
)
def test_widening_a_column_in_place_keeps_every_value(
    gateway: str,
    tmp_path_factory: pytest.TempPathFactory,
    ints: list[int],
    stamps: list[dt.datetime],
) -> None:
    """Values pushed before a widening keep their wire form at the gateway (their deltaIds
    cover it) and a client syncing afterwards reads each as the wider type, exactly."""
    admin = auth(token("root", role="admin"))
    table = f"wide{next(_rows)}"
    narrow = {
        "table": table,
        "columns": [{"name": "n", "type": "integer"}, {"name": "t", "type": "timestamp"}],
    }
    wide = {
        "table": table,
        "columns": [
            {"name": "n", "type": "decimal", "precision": 38, "scale": 2},
            {"name": "t", "type": "string"},
        ],
    }
    assert httpx.post(f"{gateway}/v1/admin/schema/gw1", json=narrow, headers=admin).is_success
    tmp = tmp_path_factory.mktemp("wide")
    with LakeSyncClient(
        str(tmp / "w.db"), url=gateway, gateway_id="gw1", token=token("wendy"), schemas=[narrow]
    ) as wendy:
        for k, n in enumerate(ints):
            wendy.insert(table, f"n{k}", {"n": n})
        for k, t in enumerate(stamps):
            wendy.insert(table, f"t{k}", {"t": t})
        wendy.sync(retries=0)
    assert httpx.post(f"{gateway}/v1/admin/schema/gw1", json=wide, headers=admin).is_success
    with LakeSyncClient(
        str(tmp / "r.db"), url=gateway, gateway_id="gw1", token=token("rita")
    ) as rita:
        rita.sync(retries=0)
        for k, n in enumerate(ints):
            got = rita.get(table, f"n{k}")
            assert got == {"n": decimal.Decimal(n)} and str(got["n"]).endswith(".00")
        for k, t in enumerate(stamps):
            wire = encode_value(SPECS["t"], t)
            assert rita.get(table, f"t{k}") == {"t": wire}  # the canonical text, as a string
