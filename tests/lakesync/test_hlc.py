"""HLC (docs/protocol.md §2): encoding vectors, wire parsing, and the now()/recv() rules on a
fake clock."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync import hlc
from lakesync.errors import ClockDriftError, ValidationError
from lakesync.hlc import HLC, MAX_COUNTER, MAX_WALL, decode, encode

T0 = 1_700_000_000_000


class FakeClock:
    """A settable physical clock (milliseconds) injected into :class:`HLC`."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


@pytest.mark.parametrize(
    ("wall", "counter", "expected"),
    [
        (1_700_000_000_000, 0, 111_411_200_000_000_000),
        (0, 65535, 65535),
        (2**48 - 1, 65535, 18_446_744_073_709_551_615),
        (0, 0, 0),
        (1, 0, 65536),
    ],
)
def test_encode_vectors(wall: int, counter: int, expected: int) -> None:
    assert encode(wall, counter) == expected
    assert decode(expected) == (wall, counter)


@pytest.mark.parametrize(("wall", "counter"), [(-1, 0), (2**48, 0), (0, -1), (0, 65536)])
def test_encode_rejects_out_of_range(wall: int, counter: int) -> None:
    with pytest.raises(ValidationError):
        encode(wall, counter)


@pytest.mark.parametrize("ts", [-1, 2**64])
def test_decode_rejects_out_of_range(ts: int) -> None:
    with pytest.raises(ValidationError):
        decode(ts)


@given(st.integers(0, MAX_WALL), st.integers(0, MAX_COUNTER))
def test_encode_decode_round_trip(wall: int, counter: int) -> None:
    ts = encode(wall, counter)
    assert 0 <= ts < 2**64
    assert decode(ts) == (wall, counter)


@given(st.integers(0, 2**64 - 1))
def test_decode_encode_round_trip(ts: int) -> None:
    assert encode(*decode(ts)) == ts


@given(
    st.tuples(st.integers(0, MAX_WALL), st.integers(0, MAX_COUNTER)),
    st.tuples(st.integers(0, MAX_WALL), st.integers(0, MAX_COUNTER)),
)
def test_encoding_preserves_order(a: tuple[int, int], b: tuple[int, int]) -> None:
    assert (a < b) == (encode(*a) < encode(*b))


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", 0), ("1000000", 1_000_000), ("18446744073709551615", 2**64 - 1), (42, 42)],
)
def test_parse_accepts_decimal_strings_and_tolerates_ints(value: object, expected: int) -> None:
    assert hlc.parse(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "-1",
        "1.5",
        "1e3",
        " 1",
        "0x10",
        "١٢",
        "18446744073709551616",
        True,
        None,
        1.0,
        -1,
        2**64,
        [1],
    ],
)
def test_parse_rejects_bad_values_naming_the_field(value: object) -> None:
    with pytest.raises(ValidationError, match="lastSeenHlc"):
        hlc.parse(value, "lastSeenHlc")


@pytest.mark.parametrize("value", [str(2**63 - 1), 2**63 - 1, "0", 0])
def test_parse_cursor_accepts_every_ingest_cursor(value: object) -> None:
    assert hlc.parse_cursor(value) == int(value)  # type: ignore[call-overload]


@pytest.mark.parametrize("value", [str(2**63), 2**63, str(2**64 - 1), "abc", -1])
def test_parse_cursor_rejects_values_no_store_holds(value: object) -> None:
    # Stores keep ingest HLCs as signed 64-bit integers: 2^63.. is a 400, never a store error.
    with pytest.raises(ValidationError, match="since"):
        hlc.parse_cursor(value, "since")


def test_now_uses_physical_clock_then_counts_within_a_millisecond() -> None:
    clock = FakeClock(T0)
    c = HLC(clock)
    assert c.now() == encode(T0, 0)
    assert c.now() == encode(T0, 1)
    clock.ms = T0 + 10
    assert c.now() == encode(T0 + 10, 0)


def test_now_never_goes_back_when_the_physical_clock_does() -> None:
    clock = FakeClock(T0)
    c = HLC(clock)
    c.now()
    clock.ms = T0 - 1000
    assert c.now() == encode(T0, 1)


def test_now_counter_overflow_advances_wall() -> None:
    c = HLC(FakeClock(T0), last=encode(T0, MAX_COUNTER))
    assert c.now() == encode(T0 + 1, 0)
    assert c.last == encode(T0 + 1, 0)


def test_recv_drift_exactly_5000_is_accepted() -> None:
    c = HLC(FakeClock(T0))
    assert c.recv(encode(T0 + 5000, 7)) == encode(T0 + 5000, 8)


def test_recv_drift_5001_is_rejected_and_leaves_clock_unchanged() -> None:
    c = HLC(FakeClock(T0), last=encode(T0, 3))
    with pytest.raises(ClockDriftError) as info:
        c.recv(encode(T0 + 5001, 0))
    assert info.value.code == "CLOCK_DRIFT"
    assert info.value.status == 409
    assert c.last == encode(T0, 3)


def test_recv_remote_ahead_takes_remote_wall_and_counter_plus_one() -> None:
    c = HLC(FakeClock(T0), last=encode(T0, 9))
    assert c.recv(encode(T0 + 2, 4)) == encode(T0 + 2, 5)


def test_recv_equal_wall_takes_max_counter_plus_one() -> None:
    c = HLC(FakeClock(T0), last=encode(T0, 9))
    assert c.recv(encode(T0, 4)) == encode(T0, 10)
    assert c.recv(encode(T0, 20)) == encode(T0, 21)


def test_recv_remote_behind_increments_local_counter() -> None:
    c = HLC(FakeClock(T0), last=encode(T0, 9))
    assert c.recv(encode(T0 - 100, 500)) == encode(T0, 10)


def test_recv_physical_ahead_of_both_counts_from_last_counter() -> None:
    # local = max(physical, last.wall) = physical; remote is behind it: (local, last.counter + 1).
    c = HLC(FakeClock(T0 + 50), last=encode(T0, 9))
    assert c.recv(encode(T0 + 10, 3)) == encode(T0 + 50, 10)


def test_recv_counter_overflow_advances_wall() -> None:
    c = HLC(FakeClock(T0))
    assert c.recv(encode(T0 + 1, MAX_COUNTER)) == encode(T0 + 2, 0)
    c2 = HLC(FakeClock(T0), last=encode(T0, MAX_COUNTER))
    assert c2.recv(encode(T0, 5)) == encode(T0 + 1, 0)


_event = st.one_of(
    st.tuples(st.just("tick"), st.integers(-3000, 3000)),
    st.tuples(st.just("now"), st.just(0)),
    st.tuples(st.just("recv"), st.integers(-10_000, 5000), st.integers(0, MAX_COUNTER)),
)


@given(st.lists(_event, max_size=60))
def test_clock_is_strictly_monotonic_and_beats_everything_received(
    events: list[tuple[Any, ...]],
) -> None:
    clock = FakeClock(T0)
    c = HLC(clock)
    last = c.last
    for event in events:
        kind = event[0]
        if kind == "tick":
            clock.ms = max(0, clock.ms + int(event[1]))
            continue
        if kind == "now":
            ts = c.now()
        else:
            remote = encode(max(0, clock.ms + int(event[1])), int(event[2]))
            ts = c.recv(remote)
            assert ts > remote
        assert ts > last
        assert decode(ts)[0] >= clock.ms
        last = ts
        assert c.last == ts
