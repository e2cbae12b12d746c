"""The PostgreSQL store's sessions carry the limits of ``store:`` (timeouts, TCP keepalives),
and a session the server ended is an outage (503), not a bug."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from lakesync.config import StoreConfig
from lakesync.errors import is_store_outage
from lakesync.hlc import HLC
from lakesync.hotlog.postgres import PostgresHotLog, connection_params
from tests.conftest import PG_DSN, drop_pg_schema, fresh_pg_schema, require_postgres

pytestmark = pytest.mark.postgres


def test_pooled_sessions_carry_the_configured_limits() -> None:
    require_postgres()
    schema = fresh_pg_schema()
    limits = StoreConfig(pg_lock_timeout=7, pg_statement_timeout=45, pg_keepalives_idle=9)
    store = PostgresHotLog(PG_DSN, HLC(), schema=schema, limits=limits)
    try:
        with store._pool.connection() as conn:
            shown = {
                name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                for name in ("lock_timeout", "statement_timeout",
                             "idle_in_transaction_session_timeout", "tcp_keepalives_idle",
                             "tcp_user_timeout")
            }
            params = conn.info.get_parameters()
        assert shown == {"lock_timeout": "7s", "statement_timeout": "45s",
                         "idle_in_transaction_session_timeout": "5s",
                         "tcp_keepalives_idle": "9", "tcp_user_timeout": "10000"}
        assert params["keepalives"] == "1" and params["keepalives_idle"] == "9"
        with store.exclusive("job"):  # a long, idle job transaction is under no timeout
            pass
    finally:
        store.close()
        drop_pg_schema(schema)


def test_a_limit_of_zero_is_left_to_the_system() -> None:
    params = connection_params(StoreConfig(pg_keepalives_idle=0, pg_tcp_user_timeout=0))
    assert params == {"keepalives": 1, "keepalives_interval": 2, "keepalives_count": 3}


def test_a_session_ended_idle_in_its_transaction_is_an_outage() -> None:
    require_postgres()
    with psycopg.connect(PG_DSN) as conn, psycopg.connect(PG_DSN, autocommit=True) as watch:
        conn.execute("SET idle_in_transaction_session_timeout = '100ms'")
        conn.execute("SELECT 1")  # a transaction is open, then idle
        pid = conn.info.backend_pid
        deadline = time.monotonic() + 60
        while watch.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline, "the server never ended the idle session"
            time.sleep(0.05)
        with pytest.raises(psycopg.Error) as raised:
            conn.execute("SELECT 1")
        assert is_store_outage(raised.value)
    with psycopg.connect(PG_DSN) as conn, pytest.raises(psycopg.Error) as raised:
        conn.execute("SELECT no_such_column FROM pg_class")
    assert not is_store_outage(raised.value)  # a bad statement is a bug, not an outage


def test_opening_a_current_store_takes_no_lock_while_others_write() -> None:
    """A gateway (re)started while the others push must not queue its schema statements behind
    their transactions (and them behind it: a deadlock, the process refusing to start)."""
    require_postgres()
    schema = fresh_pg_schema()
    PostgresHotLog(PG_DSN, HLC(), schema=schema).close()
    opened: list[PostgresHotLog] = []
    try:
        with psycopg.connect(PG_DSN) as writer:  # a push's transaction, open
            writer.execute(f'LOCK TABLE "{schema}".log, "{schema}".row_state IN ROW EXCLUSIVE MODE')
            opener = threading.Thread(
                target=lambda: opened.append(PostgresHotLog(PG_DSN, HLC(), schema=schema)),
                daemon=True,
            )
            opener.start()
            opener.join(timeout=120)
            assert opened, "opening the store waited for the writers' transaction"
            writer.rollback()
        opener.join(timeout=120)
    finally:
        for store in opened:
            store.close()
        drop_pg_schema(schema)
