"""The value rule (lakesync.values): numbers as JavaScript holds them, bounded nesting.

Checked against the JavaScript oracle: a normalised value means to JavaScript exactly what the
original meant, and a number is rejected exactly when JavaScript would read it as Infinity.
The push decoders (HTTP JSON and WebSocket protobuf) apply the rule once, before the deltaId.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from js_oracle import run_oracle

from lakesync.canonical import canonical_json
from lakesync.delta import ColumnValue, RowDelta, WireDelta, delta_id
from lakesync.errors import ValidationError
from lakesync.proto import lakesync_pb2 as pb
from lakesync.values import MAX_SAFE_MAGNITUDE, MAX_VALUE_DEPTH, normalize_value
from lakesync.wire import PushRequest, decode_push_request, push_deltas
from lakesync.wsframes import TAG_PUSH, decode_client_frame

MAX_DOUBLE_INT = 2**1024 - 2**971  # float(MAX_DOUBLE_INT) == sys.float_info.max
EDGE_INTS = [
    2**53 - 1,
    2**53,
    2**53 + 1,
    2**53 + 2,
    -(2**53) - 1,
    2**63,
    2**64 + 1,
    10**21,
    10**308,
    10**309,
    MAX_DOUBLE_INT,
    MAX_DOUBLE_INT + 1,
    2**1024 - 2**970 - 1,  # just below halfway to 2^1024: rounds to the largest double
    2**1024 - 2**970,  # halfway: rounds to even, i.e. to 2^1024 = Infinity
    -(10**400),
]
EDGE_FLOATS = [
    -0.0,
    0.0,
    1.0,
    -1.0,
    1e-7,
    5e-324,
    1e21,
    1e20,
    9007199254740993.0,
    1.7976931348623157e308,
]

numbers = st.one_of(
    st.integers(),
    st.integers(-(2**1100), 2**1100),
    st.sampled_from(EDGE_INTS),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(EDGE_FLOATS),
)
json_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=8)),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)


def nested(depth: int, leaf: Any = 1, kind: str = "array") -> Any:
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "array" else {"k": value}
    return value


def numbers_in(value: Any) -> list[int | float]:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, int | float):
        return [value]
    items = value.values() if isinstance(value, dict) else value
    return [n for v in items for n in numbers_in(v)]


def is_normal_form(value: Any) -> bool:
    """Every number an int exactly when it is integral with magnitude <= 2^53."""
    for n in numbers_in(value):
        integral = float(n).is_integer() and abs(n) <= MAX_SAFE_MAGNITUDE  # -0.0 too
        if isinstance(n, int) != integral:
            return False
    return True


def _collect(strategy: st.SearchStrategy[Any], n: int) -> list[Any]:
    """Draw ``n`` Hypothesis examples so the oracle can check them all in one node process."""
    drawn: list[Any] = []

    @settings(max_examples=n, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def draw(example: Any) -> None:
        drawn.append(example)

    draw()
    return drawn


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (2**53 + 1, 2**53),
        (-(2**53) - 1, -(2**53)),
        (2**53 - 1, 2**53 - 1),
        (2**64 + 1, 18446744073709551616.0),
        (10**21, 1e21),
        (-0.0, 0),
        (1.0, 1),
        (1e-7, 1e-7),
        (1e21, 1e21),
        (9007199254740992.0, 9007199254740992),
        ([1.0, {"a": -0.0, "b": [2**60]}], [1, {"a": 0, "b": [1.152921504606847e18]}]),
        ((1, "x"), [1, "x"]),
    ],
)
def test_numbers_become_what_javascript_holds(value: Any, expected: Any) -> None:
    got = normalize_value(value)
    assert got == expected
    assert repr(got) == repr(expected)  # int vs float, and no -0.0


def test_unchanged_values_are_returned_as_is() -> None:
    for value in ["x", None, True, 7, 0.5, [1, "a", {"b": [2.5]}], {"a": {"b": None}}]:
        assert normalize_value(value) is value


@pytest.mark.parametrize(
    "value", [10**400, -(10**309), MAX_DOUBLE_INT + 2**970, math.inf, -math.inf, math.nan]
)
def test_numbers_javascript_reads_as_infinity_or_nan_are_rejected(value: float) -> None:
    with pytest.raises(ValidationError, match="JSON number"):
        normalize_value([{"a": value}])


@pytest.mark.parametrize("kind", ["array", "object"])
def test_nesting_is_limited(kind: str) -> None:
    deepest = nested(MAX_VALUE_DEPTH, kind=kind)
    assert normalize_value(deepest) is deepest
    with pytest.raises(ValidationError, match=f"more than {MAX_VALUE_DEPTH} levels"):
        normalize_value(nested(MAX_VALUE_DEPTH + 1, kind=kind))
    # Far deeper than any recursion limit: rejected at the limit, never a RecursionError.
    with pytest.raises(ValidationError, match="levels"):
        normalize_value(nested(100_000, kind=kind))


def test_non_json_values_are_rejected() -> None:
    for value in [{1: "a"}, b"bytes", {"a": {1, 2}}, object()]:
        with pytest.raises(ValidationError):
            normalize_value(value)


def test_random_values_mean_to_javascript_what_the_originals_meant() -> None:
    values = _collect(json_values, 300)
    accepted: list[tuple[Any, Any]] = []
    rejected: list[Any] = []
    for v in values:
        try:
            accepted.append((v, normalize_value(v)))
        except ValidationError:
            rejected.append(v)
    assert accepted and rejected, "the strategy must produce both kinds"
    docs = [{"value": v} for v, _ in accepted] + [{"value": n} for _, n in accepted]
    results = run_oracle(docs)
    original, normal = results[: len(accepted)], results[len(accepted) :]
    for (v, n), (js_v, _), (js_n, _) in zip(accepted, original, normal, strict=True):
        assert js_n == js_v == canonical_json(n), f"{v!r} became {n!r}"
        assert is_normal_form(n), n
        assert normalize_value(n) is n
    # Every rejected value holds a number JavaScript reads as Infinity (printed as null).
    culprits = [
        max((x for x in numbers_in(v) if isinstance(x, int)), key=abs, default=0) for v in rejected
    ]
    assert all(isinstance(c, int) and abs(c) > MAX_DOUBLE_INT for c in culprits)
    assert [js for js, _ in run_oracle([{"value": c} for c in culprits])] == ["null"] * len(
        culprits
    )


def test_edge_integers_are_rejected_exactly_when_javascript_reads_infinity() -> None:
    js = [c for c, _ in run_oracle([{"value": x} for x in EDGE_INTS])]
    for x, text in zip(EDGE_INTS, js, strict=True):
        if text == "null":
            with pytest.raises(ValidationError):
                normalize_value(x)
        else:
            assert canonical_json(normalize_value(x)) == text


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_normalising_keeps_the_canonical_json_and_so_the_delta_id(value: Any) -> None:
    try:
        normal = normalize_value(value)
    except ValidationError:
        return
    assert canonical_json(normal) == canonical_json(value)
    # The Python encoder's text of the normalised value reads back as the same value.
    assert normalize_value(msgspec.json.decode(msgspec.json.encode(normal))) == normal


def _wire(value: Any, did: str | None = None) -> WireDelta:
    cols = [{"column": "v", "value": value}]
    return WireDelta(
        "INSERT",
        "todos",
        "row-7",
        "c1",
        (ColumnValue("v", value),),
        "1000",
        did or delta_id("c1", 1000, "todos", "row-7", cols),
    )


def test_push_decoding_normalises_before_checking_the_delta_id() -> None:
    # The deltaId a JavaScript client computes for 2^53 + 1 (it holds 2^53) verifies.
    (d,), _ = push_deltas(PushRequest("c1", [_wire(2**53 + 1)]))
    assert d.values() == {"v": 2**53}
    assert d.delta_id == delta_id("c1", 1000, "todos", "row-7", [{"column": "v", "value": 2**53}])
    assert RowDelta.create("INSERT", "todos", "row-7", "c1", {"v": 2**53 + 1}, 1000) == d


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (10**400, "beyond the range of a JSON number"),
        (nested(MAX_VALUE_DEPTH + 1), "levels"),
        (nested(50_000, kind="object"), "levels"),
    ],
)
def test_push_decoding_names_the_column_and_row(value: Any, message: str) -> None:
    # The deltaId is not even looked at: a value no replica can hold is refused first.
    with pytest.raises(ValidationError, match=f"deltas\\[0\\].*'row-7'.*'v'.*{message}"):
        push_deltas(PushRequest("c1", [_wire(value, "0" * 64)]))
    with pytest.raises(ValidationError, match="'v'"):
        RowDelta.create("INSERT", "todos", "row-7", "c1", {"v": value}, 1000)


def test_http_and_websocket_pushes_apply_the_same_rule() -> None:
    huge = b"1" + b"0" * 400
    body = (
        b'{"clientId":"c1","deltas":[{"op":"INSERT","table":"todos","rowId":"row-7",'
        b'"clientId":"c1","columns":[{"column":"v","value":' + huge + b'}],"hlc":"1000",'
        b'"deltaId":"' + b"0" * 64 + b'"}]}'
    )
    with pytest.raises(ValidationError, match=r"'v'.*beyond the range"):
        push_deltas(decode_push_request(body))
    frame = pb.SyncPush(
        client_id="c1",
        deltas=[
            pb.RowDelta(
                op=pb.INSERT,
                table="todos",
                row_id="row-7",
                client_id="c1",
                hlc=1000,
                columns=[pb.ColumnDelta(column="v", value=huge)],
                delta_id="0" * 64,
            )
        ],
    )
    with pytest.raises(ValidationError, match=r"'v'.*beyond the range"):
        decode_client_frame(bytes([TAG_PUSH]) + frame.SerializeToString())
