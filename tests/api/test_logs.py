"""Gateway logs: JSON lines, and no credential in any of them."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from lakesync.api.logs import JsonFormatter, RedactingFilter
from lakesync.redaction import MASK as REDACTED
from lakesync.redaction import redact
from tests.api.helpers import SECRET, token

JWT = token("alice")


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        (f'127.0.0.1:5 - "WebSocket /v1/sync/gw1/ws?token={JWT}" [accepted]', JWT, "?token="),
        ("GET /v1/sync/gw1/ws?clientId=a&token=opaque-credential&x=1", "opaque-credential", "&x=1"),
        (f"invalid token: {JWT}", JWT, "invalid token: "),
        ("[(b'authorization', b'Bearer abc.def-ghi')]", "abc.def-ghi", "Bearer "),
        ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", "Basic "),
        ("{'name': 'pg', 'password': 'hunter2 two'}", "hunter2", "'name': 'pg'"),
        ('{"type": "s3", "secret_access_key": "wJal\\"rX"}', "wJal", '"type": "s3"'),
        ('{"api_key":"k-123", "n": 1}', "k-123", '"n": 1'),
        ("connecting to postgresql://lake:pa55word@db:5432/x", "pa55word", "@db:5432/x"),
        ("jdbc:postgresql://db/x?user=u&password=p4ss", "p4ss", "user=u"),
        ("X-Amz-Signature=abcdef012&X-Amz-Date=2024", "abcdef012", "X-Amz-Date=2024"),
    ],
)
def test_redact_masks_credentials_and_keeps_the_rest(text: str, secret: str, kept: str) -> None:
    out = redact(text)
    assert secret not in out and REDACTED in out and kept in out
    assert redact(out) == out  # a second pass (another handler) changes nothing


@pytest.mark.parametrize(
    "text",
    [
        "invalid token: Expiration Time claim (exp) must be an integer.",
        "missing bearer token (Authorization header or ?token=)",
        "the Authorization header must be 'Bearer <token>'",
        "request GET /v1/sync/gw1/pull 200",
    ],
)
def test_redact_leaves_prose_alone(text: str) -> None:
    assert redact(text) == text


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger writing JSON lines through the redacting filter, as ``lakesync up`` sets up."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactingFilter([SECRET, "short"]))
    logger = logging.getLogger("tests.api.test_logs")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, out
    logger.handlers.clear()


def test_filter_masks_message_args_traceback_extras_and_known_secrets(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, out = captured
    logger.info("connector %s", {"name": "pg", "password": "hunter2"})
    logger.info("secret in prose: %s, short", SECRET)
    try:
        raise RuntimeError(f"cannot reach postgresql://u:pa55word@db/x with {JWT}")
    except RuntimeError:
        logger.exception("store down", extra={"path": f"/v1/sync/{JWT}/pull"})
    text = out.getvalue()
    for leaked in ("hunter2", SECRET, "pa55word", JWT):
        assert leaked not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0]["msg"] == f"connector {{'name': 'pg', 'password': '{REDACTED}'}}"
    assert lines[1]["msg"] == f"secret in prose: {REDACTED}, short"  # short strings are kept
    assert "RuntimeError" in lines[2]["exc"] and lines[2]["path"] == f"/v1/sync/{REDACTED}/pull"


@pytest.mark.parametrize(
    ("key_id", "line", "expected"),
    [
        # A short made-up id (a local server's) is a word like any other: nothing masked.
        ("lakesync", "lakesync.lakehouse.landing: lake/lakesync/landing/x.parquet",
         "lakesync.lakehouse.landing: lake/lakesync/landing/x.parquet"),
        # A real one (AWS: 20 characters) is masked as a whole word, not inside a longer one.
        ("AKIAIOSFODNN7EXAMPLE", "InvalidAccessKeyId AKIAIOSFODNN7EXAMPLE, "
         "key AKIAIOSFODNN7EXAMPLE/2026, xAKIAIOSFODNN7EXAMPLEx",
         f"InvalidAccessKeyId {REDACTED}, key {REDACTED}/2026, xAKIAIOSFODNN7EXAMPLEx"),
    ],
)
def test_an_access_key_id_is_masked_only_as_a_whole_word_of_16_characters(
    key_id: str, line: str, expected: str
) -> None:
    record = logging.LogRecord("lakesync.lakehouse", logging.ERROR, __file__, 1, line, None, None)
    RedactingFilter(["s3-secret-key"], identifiers=[key_id]).filter(record)
    assert record.getMessage() == expected
