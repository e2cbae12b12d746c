"""PostgreSQL (psycopg) and MySQL/MariaDB (PyMySQL): one DB-API destination, two dialects.

Both drivers take ``%(name)s`` parameters, so the statements of
:mod:`lakesync.destinations.statements`
run as built. A change set is applied in one transaction: the staging table is filled, one
set-based upsert and one delete run from it, and the watermark moves, all or nothing; the
staging table is truncated afterwards. PostgreSQL gets its values through
:func:`lakesync.destinations.statements.storable_value` (U+0000 becomes U+FFFD, which its ``text``
and
``jsonb`` refuse), so every change set it is given can land, including ``lakesync migrate``'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

from lakesync.canonical import canonical_json
from lakesync.destination_specs import DestinationSpec
from lakesync.destinations import statements as st
from lakesync.destinations.base import (
    Change,
    Destination,
    DestinationError,
    TieringMark,
    eviction_batches,
    latest_per_row,
    normalise_row,
)
from lakesync.destinations.statements import Columns, TableLayout, column_spec
from lakesync.redaction import redact

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["JdbcTarget", "SqlDestination", "jdbc_target"]


@dataclass(frozen=True)
class JdbcTarget:
    """Where Spark's JDBC writer loads a staging table: URL, driver and credentials."""

    url: str
    properties: dict[str, str] = field(repr=False)


_JDBC = {
    # Spark picks its SQL dialect by URL prefix: jdbc:mysql gets MySQL's backtick quoting; the
    # MariaDB driver accepts that prefix. Batched inserts travel as multi-row ones: PostgreSQL's
    # driver rewrites them; MariaDB's (3.x) sends each batch as one bulk command by default.
    "mysql": ("jdbc:mysql", 3306, "org.mariadb.jdbc.Driver", "permitMysqlScheme"),
    "postgres": ("jdbc:postgresql", 5432, "org.postgresql.Driver", "reWriteBatchedInserts=true"),
}


def jdbc_target(dialect: Literal["postgres", "mysql"], url: str) -> JdbcTarget:
    """The JDBC form of a ``postgresql://`` or ``mysql://`` URL: host, port, database, user,
    password and, for PostgreSQL, the ``options`` startup parameter (e.g.
    ``options=-csearch_path=app``: the staging table Spark loads must be the one the
    destination's own connection sees); other options are not carried over."""
    prefix, port, driver, options = _JDBC[dialect]
    parts = urlsplit(url)
    database = unquote(parts.path.lstrip("/"))
    properties = {"driver": driver, "user": unquote(parts.username or "")}
    if parts.password:
        properties["password"] = unquote(parts.password)
    startup = parse_qs(parts.query).get("options")
    if dialect == "postgres" and startup:
        properties["options"] = startup[-1]
    host = parts.hostname or "127.0.0.1"
    return JdbcTarget(
        f"{prefix}://{host}:{parts.port or port}/{database}?{options}", properties
    )


class SqlDestination(Destination):
    """A PostgreSQL or MySQL/MariaDB database reached with a DB-API connection."""

    def __init__(
        self,
        spec: DestinationSpec,
        dialect: Literal["postgres", "mysql"],
        connect: Callable[[], Any],
        errors: tuple[type[BaseException], ...],
        url: str,
    ) -> None:
        self.spec = spec
        self.dialect: Literal["postgres", "mysql"] = dialect
        self._errors = errors
        # As declared: a ${VAR} is named, never its value.
        self._where = redact(spec.url)
        self.jdbc = jdbc_target(dialect, url)
        try:
            self._conn = connect()
        except errors as exc:
            raise DestinationError(
                f"destination {spec.name!r}: cannot connect to {self._where}: {_first_line(exc)}"
                " (is the server running and the url right?)"
            ) from None
        self._bookkept = False
        # psycopg decodes json/jsonb itself; PyMySQL hands JSON over as text.

    def layout(
        self, table: str, columns: Columns, external_id: str | None = None
    ) -> TableLayout:
        return TableLayout(table, [column_spec(c) for c in columns], self.spec.delete, external_id)

    @contextmanager
    def _transaction(self, what: str) -> Iterator[Any]:
        cur = self._conn.cursor()
        try:
            yield cur
            self._conn.commit()
        except self._errors as exc:
            self._conn.rollback()
            raise DestinationError(
                f"destination {self.spec.name!r} ({self._where}): {what} failed: "
                f"{_first_line(exc)}"
            ) from None
        except BaseException:
            self._conn.rollback()
            raise
        finally:
            cur.close()

    def _columns(self, cur: Any, table: str) -> dict[str, str]:
        """Each column of ``table`` (folded to lower case) and its type as the catalog names
        it (:func:`lakesync.destinations.statements.widen_columns` reads it)."""
        if self.dialect == "postgres":
            cur.execute(
                "select a.attname, format_type(a.atttypid, a.atttypmod) from pg_attribute a"
                " where a.attrelid = to_regclass(quote_ident(%(t)s)) and a.attnum > 0"
                " and not a.attisdropped",
                {"t": table},
            )
        else:
            # MariaDB's JSON is a LONGTEXT checked by json_valid(): its catalog says so only
            # through that check.
            cur.execute(
                "select c.column_name, case when c.data_type = 'longtext' and exists ("
                " select 1 from information_schema.check_constraints k"
                " where k.constraint_schema = c.table_schema and k.table_name = c.table_name"
                " and k.check_clause like concat('%%json_valid(`', c.column_name, '`)%%'))"
                " then 'json' else c.column_type end"
                " from information_schema.columns c"
                " where c.table_name = %(t)s and c.table_schema = database()",
                {"t": table},
            )
        return {str(r[0]).lower(): str(r[1]) for r in cur.fetchall()}

    def ensure_table(self, layout: TableLayout) -> None:
        with self._transaction(f"creating table {layout.table!r}") as cur:
            if not self._bookkept:
                cur.execute(st.create_watermarks(self.dialect))
            cur.execute(st.create_table(layout, self.dialect))
            found = self._columns(cur, layout.table)
            for alter in st.add_columns(layout, list(found), self.dialect):
                cur.execute(alter)
            # A widened column (the schema widened it) changes type in place.
            for alter in st.widen_columns(layout, found, self.dialect):
                cur.execute(alter)
            if self.dialect == "postgres":
                self._canonical_json_text(cur, layout, found)
            # Staging holds nothing between runs: recreate it in the current shape.
            cur.execute(st.drop_staging(layout, self.dialect))
            cur.execute(st.create_staging(layout, self.dialect))
        self._bookkept = True

    def _canonical_json_text(self, cur: Any, layout: TableLayout, found: dict[str, str]) -> None:
        """A ``jsonb`` column widened to a string holds jsonb's own text (``{"a": 1}``): write
        the canonical JSON text instead, as the lake reads the value (no SQL function makes
        it)."""
        table = st.TableLayout(layout.table, [], layout.delete, None, layout.qualifier)
        for spec in layout.columns:
            if spec.type != "string" or found.get(spec.name.lower()) != "jsonb":
                continue
            rows = self._select_pairs(cur, table, spec.name)
            for row_id, text in rows:
                if text is not None:
                    cur.execute(st.update_value(table, spec.name, self.dialect),
                                {"row_id": row_id, "value": canonical_json(json.loads(text))})

    @staticmethod
    def _select_pairs(cur: Any, table: TableLayout, name: str) -> list[tuple[str, Any]]:
        cur.execute(st.select_column(table, name, "postgres"))
        return [(str(r[0]), r[1]) for r in cur.fetchall()]

    def apply_change_set(self, layout: TableLayout, rows: DataFrame) -> tuple[int, int | None]:
        """One Spark job: the executors append the change set to the (emptied) staging table
        over JDBC, in parallel; the database then counts the rows and finds their greatest
        position inside the apply transaction (:meth:`apply_staged`)."""
        self._empty_staging(layout)
        rows.write.jdbc(
            self.jdbc.url,
            st.staging_name(layout, self.dialect),
            mode="append",
            properties={**self.jdbc.properties, "batchsize": "10000"},
        )
        return self.apply_staged(layout)

    def _empty_staging(self, layout: TableLayout) -> None:
        # A TRUNCATE of its own: constant time (a DELETE writes every row away) and outside the
        # apply transaction, which MySQL's implicit commit would split.
        with self._transaction(f"emptying the staging table of {layout.table!r}") as cur:
            cur.execute(st.truncate_staging(layout, self.dialect))

    def apply_staged(self, layout: TableLayout) -> tuple[int, int | None]:
        """Apply what a bulk loader put in the staging table, advance the watermark to the
        greatest staged ``_position``: one transaction; then empty the staging table. Returns
        the number of rows applied and that position (nothing staged: ``(0, None)``)."""
        with self._transaction(f"applying changes to {layout.table!r}") as cur:
            cur.execute(st.staged_summary(layout, self.dialect))
            row = cur.fetchone()
            count = int(row[0]) if row else 0
            if count == 0:
                return 0, None
            position = None if row[1] is None else int(row[1])
            self._apply_staged(cur, layout, position)
        self._empty_staging(layout)
        return count, position

    def _apply_staged(self, cur: Any, layout: TableLayout, position: int | None) -> None:
        now = {"now": _now(self.dialect)}
        cur.execute(st.upsert_from_staging(layout, self.dialect), now)
        cur.execute(st.apply_deletes(layout, self.dialect), now)
        if position is not None:
            cur.execute(st.write_watermark(self.dialect), {
                "gateway_id": self.spec.gateway, "table_name": layout.table,
                "position": position, **now,
            })

    def apply_changes(
        self, layout: TableLayout, changes: Sequence[Change], position: int | None = None
    ) -> None:
        insert = st.insert_staging(layout, self.dialect)
        params = [_staged_params(layout, c, self.dialect) for c in latest_per_row(changes)]
        with self._transaction(f"applying changes to {layout.table!r}") as cur:
            cur.execute(st.clear_staging(layout, self.dialect))
            if params:
                cur.executemany(insert, params)
            self._apply_staged(cur, layout, position)
        self._empty_staging(layout)

    def _query(self, sql: str, params: dict[str, Any], what: str) -> list[dict[str, Any]]:
        with self._transaction(what) as cur:
            cur.execute(sql, params)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def read_rows(self, layout: TableLayout) -> list[dict[str, Any]]:
        rows = self._query(st.select_rows(layout, self.dialect), {}, f"reading {layout.table!r}")
        return [normalise_row(layout, r, json_decoded=self.dialect == "postgres") for r in rows]

    def read_changes(
        self, layout: TableLayout, since: datetime, limit: int | None = None
    ) -> list[dict[str, Any]]:
        since_param = since if self.dialect == "postgres" else _naive_utc(since)
        params: dict[str, Any] = {"since": since_param}
        if limit is not None:
            params["limit"] = limit
        rows = self._query(
            st.select_changes(layout, self.dialect, limit is not None), params,
            f"reading changes of {layout.table!r}",
        )
        return [normalise_row(layout, r, json_decoded=self.dialect == "postgres") for r in rows]

    def evict(
        self, layout: TableLayout, row_ids: Sequence[str], mark: TieringMark | None = None
    ) -> int:
        evicted = 0
        with self._transaction(f"evicting old rows of {layout.table!r}") as cur:
            for params in eviction_batches(row_ids):
                cur.execute(st.delete_rows(layout, self.dialect, len(params)), params)
                evicted += int(cur.rowcount)
            if mark is not None:
                cur.execute(st.create_tiering(self.dialect))
                cur.execute(st.write_tiering(self.dialect), {
                    "gateway_id": self.spec.gateway, "table_name": layout.table,
                    "cutoff": mark.cutoff, "position": mark.position,
                    "now": _now(self.dialect),
                })
        return evicted

    def tiering_mark(self, table: str) -> TieringMark | None:
        with self._transaction("reading the tiering mark") as cur:
            cur.execute(st.create_tiering(self.dialect))
            cur.execute(st.read_tiering(self.dialect),
                        {"gateway_id": self.spec.gateway, "table_name": table})
            row = cur.fetchone()
        return None if row is None else TieringMark(int(row[0]), int(row[1]))

    def watermark(self, table: str) -> int | None:
        with self._transaction("reading the watermark") as cur:
            if not self._bookkept:
                cur.execute(st.create_watermarks(self.dialect))
            cur.execute(st.read_watermark(self.dialect),
                        {"gateway_id": self.spec.gateway, "table_name": table})
            row = cur.fetchone()
        self._bookkept = True
        return None if row is None else int(row[0])

    def close(self) -> None:
        self._conn.close()


def _now(dialect: str) -> datetime:
    now = datetime.now(UTC)
    return now if dialect == "postgres" else _naive_utc(now)


def _naive_utc(moment: datetime) -> datetime:
    # MySQL DATETIME has no zone: the session runs in UTC and is given naive UTC times.
    return moment.astimezone(UTC).replace(tzinfo=None)


def _staged_params(layout: TableLayout, change: Change, dialect: st.Dialect) -> dict[str, Any]:
    params: dict[str, Any] = {"c0": change.row_id, "deleted": change.deleted}
    for i, spec in enumerate(layout.columns, start=1):
        params[f"c{i}"] = st.storable_value(spec, change.values.get(spec.name), dialect)
    return params


def _first_line(exc: BaseException) -> str:
    # A driver may quote the connection string it was given.
    return redact((str(exc).strip().splitlines() or [type(exc).__name__])[0])
