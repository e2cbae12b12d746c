"""The WebSocket's decisions without a socket: what a message is, what a close means, when to
reconnect (lakesync.client.transport._realtime)."""

from __future__ import annotations

import pytest

from lakesync.client._backoff import Backoff
from lakesync.client.errors import (
    AuthError,
    BackpressureError,
    ConnectionFailedError,
    ForbiddenError,
    RateLimitedError,
    SchemaError,
    ValidationError,
)
from lakesync.client.transport._realtime import Broadcast, Reconnects, close_error, received
from lakesync.delta import RowDelta
from lakesync.hlc import encode
from lakesync.wsframes import ServerFrame, encode_response

ROW = RowDelta.create("INSERT", "t", "r1", "peer", {"a": "x"}, encode(1_700_000_000_000, 0))


def test_a_reply_goes_to_the_waiting_request_and_a_broadcast_to_the_replica() -> None:
    reply = received(encode_response([ROW], 7, True))
    assert reply == ServerFrame(False, [ROW], 7, True)
    assert received(encode_response([ROW], 8, False, broadcast=True)) == Broadcast([ROW])


def test_a_text_or_garbled_frame_fails_the_waiting_request() -> None:
    assert isinstance(received("hello"), ConnectionFailedError)
    assert isinstance(received(b"\x00\xff\xff"), ValidationError)


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (4401, AuthError),
        (4403, ForbiddenError),
        (4422, SchemaError),
        (4429, RateLimitedError),
        (4408, BackpressureError),  # a slow receiver: reconnect and pull what was missed
        (1008, RateLimitedError),
        (1013, BackpressureError),
        (1001, ConnectionFailedError),
        (None, ConnectionFailedError),
    ],
)
def test_each_close_code_is_its_error(code: int | None, error: type[Exception]) -> None:
    assert type(close_error(code, "")) is error


def test_the_close_reason_is_the_message() -> None:
    assert close_error(4403, "not your gateway").message == "not your gateway"


def decide(err: Exception, **kw: bool) -> str:
    options = {"wanted": True, "refreshable": True, "token_replaced": False, **kw}
    return Reconnects(Backoff()).after_close(err, **options)  # type: ignore[arg-type]


def test_a_dropped_connection_reconnects_while_realtime_is_wanted() -> None:
    assert decide(ConnectionFailedError("gone")) == "reconnect"
    assert decide(BackpressureError("too slow")) == "reconnect"
    assert decide(ConnectionFailedError("gone"), wanted=False) == "stop"  # closed, or no handler
    assert decide(ForbiddenError("no")) == "stop"


def test_a_bad_token_reconnects_only_with_a_fresh_one() -> None:
    assert decide(AuthError("expired")) == "refresh"
    assert decide(AuthError("expired"), token_replaced=True) == "reconnect"  # someone refreshed
    assert decide(AuthError("expired"), refreshable=False) == "stop"


def test_drops_in_a_row_wait_longer_until_traffic_resets_them() -> None:
    reconnects = Reconnects(Backoff(base=1.0, cap=100.0))
    waits = [reconnects.wait() for _ in range(4)]
    # Equal jitter: drop n waits within [d/2, d], d = base·2ⁿ.
    assert all(2**n / 2 <= w <= 2**n for n, w in enumerate(waits)), waits
    attempts = reconnects.delays()
    assert 8 <= next(attempts) <= 16  # failed attempts go on from the drops so far
    reconnects.traffic()
    assert reconnects.wait() <= 1
