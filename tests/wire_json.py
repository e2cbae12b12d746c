"""Reading a delta's protocol JSON in tests the way the gateway does (:mod:`lakesync.wire`)."""

from __future__ import annotations

from typing import Any

import msgspec

from lakesync.delta import RowDelta
from lakesync.wire import decode_push_request, encode_delta, push_deltas


def verified(obj: Any) -> RowDelta:
    """``obj`` (a delta's decoded protocol JSON) read as a gateway reads a pushed delta: every
    check of docs/protocol.md §3, the values normalised and the deltaId recomputed."""
    body = msgspec.json.encode({"clientId": "reader", "deltas": [obj]})
    return push_deltas(decode_push_request(body))[0][0]


def as_json(delta: RowDelta) -> dict[str, Any]:
    """``delta``'s docs/protocol.md §3 JSON as decoded builtins (what a push body carries)."""
    result: dict[str, Any] = msgspec.json.decode(encode_delta(delta))
    return result
