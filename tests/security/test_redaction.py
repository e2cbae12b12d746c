"""The one redaction (:mod:`lakesync.redaction`): every DSN shape a secret is written in, as a
table of ``(text, secret, kept)``, and its laws under Hypothesis: no secret survives, redacting
twice changes nothing, references stay visible."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.connector_specs import redact_declaration
from lakesync.redaction import MASK, Redactor, redact

FORMS = [
    # URL userinfo (libpq, MySQL, SQLAlchemy), a password with an unencoded "@" too.
    ("postgresql://u:S3cr3t-pw@db:5432/x", "S3cr3t-pw", "postgresql://u:***@db:5432/x"),
    ("mysql://root:p@ss-w0rd@db/x", "ss-w0rd", "mysql://root:***@db/x"),
    # Query strings: libpq accepts password= and sslpassword= there.
    ("postgresql://u:pw@h/db?password=S3CRET-QS", "S3CRET-QS",
     "postgresql://u:***@h/db?password=***"),
    ("postgresql://u@h/db?sslmode=require&sslpassword=K3Y-PASS&connect_timeout=3", "K3Y-PASS",
     "postgresql://u@h/db?sslmode=require&sslpassword=***&connect_timeout=3"),
    ("jdbc:postgresql://db/x?user=u&password=p4ss-jdbc", "p4ss-jdbc",
     "jdbc:postgresql://db/x?user=u&password=***"),
    # libpq key=value, bare, quoted with a space, quoted with an escaped quote.
    ("host=h user=u password=kv-S3CRET dbname=d", "kv-S3CRET",
     "host=h user=u password=*** dbname=d"),
    ("host=h password='two words' dbname=d", "two words", "host=h password='***' dbname=d"),
    ("host=h password = 'it\\'s-secret' port=1", "s-secret", "host=h password = '***' port=1"),
    # JDBC (SQL Server style) ;key=value;, braced values holding a ";".
    ("jdbc:sqlserver://h:1433;user=u;password=Semi-S3cret;databaseName=d", "Semi-S3cret",
     "jdbc:sqlserver://h:1433;user=u;password=***;databaseName=d"),
    ("jdbc:sqlserver://h;password={br;aced};x=1", "aced", "jdbc:sqlserver://h;password=***;x=1"),
    # Environment-style and JSON.
    ("PGPASSWORD=env-S3cret psql", "env-S3cret", "PGPASSWORD=*** psql"),
    ('{"dsn": "x", "password": "json-S3cret"}', "json-S3cret",
     '{"dsn": "x", "password": "***"}'),
]


@pytest.mark.parametrize(("text", "secret", "expected"), FORMS)
def test_every_dsn_form_is_masked(text: str, secret: str, expected: str) -> None:
    out = redact(text)
    assert secret not in out
    assert out == expected
    assert redact(out) == out


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://u:${PG_PW}@h/db?password=${PW}&sslpassword=${file:/run/secrets/ssl}",
        "host=h password=${PG_PW} dbname=d",
        "host=h password='${file:/run/secrets/pg}'",
        "password authentication failed for user \"u\"",
        "mysql://root@h/db",
        "bigquery://project/dataset",
        "postgresql://u:***@h/db?password=***",
    ],
)
def test_references_prose_and_masked_text_are_kept(text: str) -> None:
    assert redact(text) == text


def test_a_resolved_reference_is_masked_wherever_it_appears() -> None:
    # A value a ${VAR} resolved to, in a place no pattern knows (an application name).
    redactor = Redactor(["app-name-from-a-secret"])
    out = redactor("connect to postgresql://u@h/db?application_name=app-name-from-a-secret")
    assert out == f"connect to postgresql://u@h/db?application_name={MASK}"


def test_a_connector_declaration_shows_references_and_masks_every_dsn_form() -> None:
    body = {
        "kind": "postgres",
        "dsn": "host=h user=u password=kv-S3CRET dbname=d",
        "password": "${PG_PW}",
        "token": "inline-token",
        "url": "https://x.example/?api_key=k3y-123",
    }
    shown = redact_declaration(body)
    assert shown == {
        "kind": "postgres",
        "dsn": "host=h user=u password=*** dbname=d",
        "password": "${PG_PW}",
        "token": MASK,
        "url": "https://x.example/?api_key=***",
    }


_SECRET = st.text(
    st.characters(codec="ascii", categories=("L", "N"), include_characters="!#%*+-._~"),
    min_size=8, max_size=24,
).filter(lambda s: s != MASK and not s.startswith("*"))
_KEY = st.sampled_from(["password", "sslpassword", "PASSWORD", "pwd", "client_secret"])
_SHAPE = st.sampled_from([
    "postgresql://user:{s}@db.example:5432/app",
    "postgresql://user@db.example/app?{k}={s}",
    "postgresql://user@db.example/app?sslmode=require&{k}={s}&x=1",
    "host=db user=u {k}={s} dbname=app",
    "host=db user=u {k}='{s}' dbname=app",
    "jdbc:sqlserver://db:1433;user=u;{k}={s};databaseName=app",
    "{{\"{k}\": \"{s}\"}}",
])


@given(_SHAPE, _KEY, _SECRET, st.text(max_size=20).filter(lambda t: "${" not in t))
def test_no_secret_survives_and_redaction_is_idempotent(
    shape: str, key: str, secret: str, around: str
) -> None:
    text = f"{around} {shape.format(k=key, s=secret)} {around}"
    out = redact(text)
    assert secret not in out.replace(around, "")
    assert redact(out) == out


@given(_SHAPE, _KEY, st.from_regex(r"\$\{(file:/run/[a-z]{1,8}|[A-Z_]{1,12})\}", fullmatch=True))
def test_a_reference_in_any_shape_stays_visible(shape: str, key: str, reference: str) -> None:
    text = shape.format(k=key, s=reference)
    assert redact(text) == text
