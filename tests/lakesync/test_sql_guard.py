# ruff: noqa: E501  (the tables hold whole statements, one per line)
"""The SQL endpoint's allow-list (:mod:`lakesync.sql_guard`): tables of statements and the exact
statement Spark is sent, tables of statements refused with what the refusal says, properties over
any text and over statements built from allowed and forbidden pieces, and the session settings a
new session keeps."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from sqlglot.tokenizer_core import TokenType

from lakesync.errors import ValidationError
from lakesync.sql_guard import (
    REFUSED_FUNCTIONS,
    StatementRefusedError,
    _Tokenizer,
    check_session_config,
    check_statement,
)

NAMESPACES = frozenset({"analytics", "staging"})
FETCH_SIZE = "set:hiveconf:hive.server2.thrift.resultset.default.fetch.size"

ALLOWED = [
    ("select id, title from analytics.todos where done = false order by id desc limit 10",
     "SELECT `id`, `title` FROM `analytics`.`todos` WHERE `done` = FALSE ORDER BY `id` DESC LIMIT 10"),
    ("select * from analytics.todos VERSION AS OF 123",
     "SELECT * FROM `analytics`.`todos` VERSION AS OF 123"),
    ("select * from analytics.todos TIMESTAMP AS OF '2024-01-01 00:00:00'",
     "SELECT * FROM `analytics`.`todos` TIMESTAMP AS OF '2024-01-01 00:00:00'"),
    ("select * from analytics.todos.snapshots", "SELECT * FROM `analytics`.`todos`.`snapshots`"),
    ("select * from lake.analytics.todos", "SELECT * FROM `lake`.`analytics`.`todos`"),
    ("select * from `analytics`.`todos`", "SELECT * FROM `analytics`.`todos`"),
    ("select count(*) from todos", "SELECT COUNT(*) FROM `todos`"),
    ("with t as (select id from analytics.todos) select * from t",
     "WITH `t` AS (SELECT `id` FROM `analytics`.`todos`) SELECT * FROM `t`"),
    ("select a.id, b.x from analytics.todos a join staging.items b on a.id = b.id",
     "SELECT `a`.`id`, `b`.`x` FROM `analytics`.`todos` AS `a` JOIN `staging`.`items` AS `b` ON `a`.`id` = `b`.`id`"),
    ("select * from (select id from analytics.todos) s where s.id in (select id from staging.items)",
     "SELECT * FROM (SELECT `id` FROM `analytics`.`todos`) AS `s` WHERE `s`.`id` IN (SELECT `id` FROM `staging`.`items`)"),
    ("select id, row_number() over (partition by owner order by id) as rn from analytics.todos",
     "SELECT `id`, ROW_NUMBER() OVER (PARTITION BY `owner` ORDER BY `id`) AS `rn` FROM `analytics`.`todos`"),
    ("select transform(a, x -> x + 1) from analytics.todos",
     "SELECT TRANSFORM(`a`, `x` -> `x` + 1) FROM `analytics`.`todos`"),
    ("select 1 union all select 2", "SELECT 1 UNION ALL SELECT 2"),
    ("from analytics.todos select id", "SELECT `id` FROM `analytics`.`todos`"),
    # Column names that are refused functions' names are only names.
    ("select java_method, `reflect` from analytics.todos",
     "SELECT `java_method`, `reflect` FROM `analytics`.`todos`"),
    ("show tables", "SHOW TABLES"),
    ("show databases", "SHOW DATABASES"),
    ("show tables in analytics", "SHOW TABLES IN `analytics`"),
    ("show columns in analytics.todos", "SHOW COLUMNS IN `analytics`.`todos`"),
    ("show create table analytics.todos", "SHOW CREATE TABLE `analytics`.`todos`"),
    ("show table extended in analytics like '*'", "SHOW TABLE EXTENDED IN `analytics` LIKE '*'"),
    ("show tables like 'it\\'s'", "SHOW TABLES LIKE 'it\\'s'"),
    ("show system functions", "SHOW SYSTEM FUNCTIONS"),
    ("describe analytics.todos", "DESCRIBE `analytics`.`todos`"),
    ("desc analytics.todos", "DESC `analytics`.`todos`"),
    ("describe formatted analytics.todos", "DESCRIBE FORMATTED `analytics`.`todos`"),
    ("describe extended analytics.todos.snapshots", "DESCRIBE EXTENDED `analytics`.`todos`.`snapshots`"),
    ("describe query select * from analytics.todos", "DESCRIBE QUERY SELECT * FROM `analytics`.`todos`"),
    ("describe select id from todos", "DESCRIBE QUERY SELECT `id` FROM `todos`"),
    ("explain select * from analytics.todos", "EXPLAIN SELECT * FROM `analytics`.`todos`"),
    ("explain extended select * from analytics.todos", "EXPLAIN EXTENDED SELECT * FROM `analytics`.`todos`"),
    ("explain formatted select 1", "EXPLAIN FORMATTED SELECT 1"),
    ("use analytics", "USE `analytics`"),
    ("use lake.analytics", "USE `lake`.`analytics`"),
    ("use namespace staging", "USE NAMESPACE `staging`"),
    ("set spark.sql.session.timeZone=UTC", "SET spark.sql.session.timeZone=UTC"),
    ("SET spark.sql.ansi.enabled = true ;", "SET spark.sql.ansi.enabled=true"),
    ("select 1;", "SELECT 1"),
    ("select 1 ; ;", "SELECT 1"),
    ("select 1 -- a comment", "SELECT 1"),
    ("/* before */ select /* inside */ id from todos", "SELECT `id` FROM `todos`"),
    # Spark nests bracketed comments, sqlglot does not: what Spark runs is sqlglot's reading.
    ("select 1 /* /* */ , reflect('a','b') */", "SELECT 1"),
]


@pytest.mark.parametrize(("sql", "expected"), ALLOWED)
def test_an_allowed_statement_is_sent_as_checked(sql: str, expected: str) -> None:
    assert check_statement(sql, NAMESPACES) == expected


@pytest.mark.parametrize(("sql", "expected"), ALLOWED)
def test_what_is_sent_passes_again_unchanged(sql: str, expected: str) -> None:
    assert check_statement(expected, NAMESPACES) == expected


REFLECTION = "is not one the SQL endpoint runs (JVM reflection"
NOT_LAKE = "is not a table of the lake"
READ_ONLY = "statements are not run"
SET_ONLY = "only spark.sql.ansi.enabled, spark.sql.session.timeZone may be set"

REFUSED = [
    ("select java_method('java.lang.System', 'getenv', 'X')", f"function java_method() {REFLECTION}"),
    ("select reflect('java.lang.System', 'getenv')", f"function reflect() {REFLECTION}"),
    ("select REFLECT('java.lang.System', 'getenv')", f"function reflect() {REFLECTION}"),
    ("select Java_Method('java.lang.System', 'getenv')", f"function java_method() {REFLECTION}"),
    ("select `java_method`('java.lang.System', 'getenv')", f"function java_method() {REFLECTION}"),
    ("select try_reflect('java.lang.System', 'getenv')", f"function try_reflect() {REFLECTION}"),
    ("select * from (select reflect('a', 'b') as x) s", f"function reflect() {REFLECTION}"),
    ("with t as (select java_method('a', 'b') as v) select * from t", f"function java_method() {REFLECTION}"),
    ("select * from analytics.todos where reflect('a', 'b') = 'x'", f"function reflect() {REFLECTION}"),
    ("select * from analytics.todos lateral view explode(array(reflect('a', 'b'))) t as c", f"function reflect() {REFLECTION}"),
    ("select * from analytics.todos, lateral (select reflect('a', 'b'))", f"function reflect() {REFLECTION}"),
    ("select * from analytics.todos version as of (select reflect('a', 'b'))", f"function reflect() {REFLECTION}"),
    ("explain select reflect('a', 'b')", f"function reflect() {REFLECTION}"),
    ("explain extended select java_method('a', 'b')", f"function java_method() {REFLECTION}"),
    ("describe query select java_method('a', 'b')", f"function java_method() {REFLECTION}"),
    ("describe select reflect('a', 'b')", f"function reflect() {REFLECTION}"),
    ("select /*+ reflect('a', 'b') */ 1", f"function reflect() {REFLECTION}"),
    ("select in_file('/etc/passwd')", f"function in_file() {REFLECTION}"),
    ("select my_udf(id) from analytics.todos", f"function my_udf() {REFLECTION}"),
    ("select * from identifier('spark_catalog.default.x')", f"function identifier() {REFLECTION}"),
    ("select db.f(1)", "not catalog functions"),
    ("select analytics.f(id) from analytics.todos", "not catalog functions"),
    ("select spark_catalog.default.f(1)", "not catalog functions"),
    ("select x.reflect('a', 'b')", "not catalog functions"),
    ("select * from text.`/etc/hostname`", f"'text./etc/hostname' {NOT_LAKE}"),
    ("select * from parquet.`file:///x`", f"'parquet.file:///x' {NOT_LAKE}"),
    ("select * from `csv`.`/x`", f"'csv./x' {NOT_LAKE}"),
    ("select * from analytics.todos a join json.`/etc` j on true", f"'json./etc' {NOT_LAKE}"),
    ("select id from analytics.todos union select * from json.`/etc`", f"'json./etc' {NOT_LAKE}"),
    ("select * from (select * from json.`/etc`) s", f"'json./etc' {NOT_LAKE}"),
    ("explain select * from json.`/etc`", f"'json./etc' {NOT_LAKE}"),
    ("select * from `analytics.todos`", f"'analytics.todos' {NOT_LAKE}"),
    ("select * from `/etc/passwd`", f"'/etc/passwd' {NOT_LAKE}"),
    ("select * from nosuch.todos", f"'nosuch.todos' {NOT_LAKE} (name tables as namespace.table; the lake has analytics, staging)"),
    ("select * from spark_catalog.default.x", f"'spark_catalog.default.x' {NOT_LAKE}"),
    ("select * from global_temp.x", f"'global_temp.x' {NOT_LAKE}"),
    ("select * from analytics.todos.nosuch", f"'analytics.todos.nosuch' {NOT_LAKE}"),
    ("select * from lake.nosuch.todos", f"'lake.nosuch.todos' {NOT_LAKE}"),
    ("show columns in spark_catalog.default.x", "'spark_catalog' is not the lake's catalog"),
    ("describe spark_catalog.default.x", "'spark_catalog' is not the lake's catalog"),
    ("show tables in spark_catalog", "'spark_catalog' is not the lake's catalog"),
    ("show tables in global_temp", "'global_temp' is not the lake's catalog"),
    ("describe parquet.`/etc/x`", "unexpected '/etc/x' after a dot"),
    ("show tables in analytics.", "a name ends with a dot"),
    ("show tblproperties analytics.todos ('k')", "unexpected '(' in this statement"),
    ("use default", "USE names no namespace of the lake (it has analytics, staging)"),
    ("use spark_catalog.default", "USE names no namespace of the lake"),
    ("select transform(id) using 'cat' from analytics.todos", "TRANSFORM … USING runs a program on the server"),
    ("select transform(id) using 'cat' as (x) from analytics.todos", "TRANSFORM … USING runs a program on the server"),
    ("insert into analytics.todos values (1)", f"INSERT {READ_ONLY}"),
    ("insert overwrite directory '/tmp/x' select 1", f"INSERT {READ_ONLY}"),
    ("insert overwrite local directory '/tmp/x' select 1", f"INSERT {READ_ONLY}"),
    ("with t as (select 1) insert into analytics.todos select * from t", "only a query runs here"),
    ("create table x (a int)", f"CREATE {READ_ONLY}"),
    ("create table analytics.x as select 1", f"CREATE {READ_ONLY}"),
    ("drop table analytics.todos", f"DROP {READ_ONLY}"),
    ("alter table analytics.todos add columns (x int)", f"ALTER {READ_ONLY}"),
    ("cache table analytics.todos", f"CACHE {READ_ONLY}"),
    ("cache table x as select 1", f"CACHE {READ_ONLY}"),
    ("merge into analytics.todos t using staging.items s on t.id = s.id when matched then delete", f"MERGE {READ_ONLY}"),
    ("add jar /tmp/x.jar", f"ADD JAR {READ_ONLY}"),
    ("add file /etc/passwd", f"ADD FILE {READ_ONLY}"),
    ("create function f as 'com.x.F' using jar '/tmp/x.jar'", f"CREATE {READ_ONLY}"),
    ("create temporary function f as 'com.x.F'", f"CREATE {READ_ONLY}"),
    ("set", SET_ONLY),
    ("set -v", SET_ONLY),
    ("set spark.sql.warehouse.dir=/tmp", SET_ONLY),
    ("set spark.sql.runSQLOnFiles=true", SET_ONLY),
    ("set spark.sql.session.timeZone=UTC; set spark.sql.runSQLOnFiles=true", "one statement at a time"),
    ("reset", f"RESET {READ_ONLY}"),
    ("reset spark.sql.session.timeZone", f"RESET {READ_ONLY}"),
    ("show grants", "this SHOW lists no catalog object"),
    ("show", "this SHOW lists no catalog object"),
    ("explain", "EXPLAIN needs a query"),
    ("explain extended", "EXPLAIN needs a query"),
    ("describe", "DESCRIBE needs a name"),
    ("select 1; select 2", "one statement at a time"),
    ("select 1; drop table analytics.todos", "one statement at a time"),
    ("", "an empty statement"),
    ("   \n", "an empty statement"),
    (";", "an empty statement"),
    ("-- only a comment", "an empty statement"),
    ("select from where", "the query does not parse"),
    ("select 'unterminated", "the statement does not parse"),
    ("grant select on analytics.todos to x", f"GRANT {READ_ONLY}"),
]


@pytest.mark.parametrize(("sql", "fragment"), REFUSED)
def test_a_refused_statement_says_why(sql: str, fragment: str) -> None:
    with pytest.raises(StatementRefusedError) as refused:
        check_statement(sql, NAMESPACES)
    message = str(refused.value)
    assert message.startswith("refused: ")
    assert fragment in message
    assert message.endswith("the SQL endpoint is read-only (SELECT, SHOW, DESCRIBE, EXPLAIN and "
                            "USE over the lake's tables)")


def test_a_refusal_is_a_validation_error() -> None:
    assert issubclass(StatementRefusedError, ValidationError)


def test_a_lake_without_namespaces_says_so() -> None:
    with pytest.raises(StatementRefusedError, match="the lake has none yet"):
        check_statement("select * from analytics.todos", ())


# Spark substitutes ${…} in every statement before parsing it (spark.sql.variable.substitute,
# true by default): ${env:V} is the server's environment variable V (AWS_* are kept there),
# ${system:p} a JVM property, ${spark:k} / ${k} a Spark setting. sqlglot even writes ${x} for @x
# and $1.
VARIABLES = [
    "select '${env:AWS_SECRET_ACCESS_KEY}'",
    "select '${system:lakesync.sql.keyfile}' as k",
    "select '${spark:spark.sql.catalog.lake.uri}'",
    "select `${env:HOME}` from analytics.todos",
    "select ${env:HOME}",
    "select @{env:HOME}",
    "select @spark",
    "select * from analytics.todos where id = $1",
    "show tables like '${env:HOME}'",
]


@pytest.mark.parametrize("sql", VARIABLES)
def test_no_variable_reference_reaches_spark(sql: str) -> None:
    try:
        sent = check_statement(sql, NAMESPACES)
    except StatementRefusedError:
        return
    assert "${" not in sent


@pytest.mark.parametrize(("sql", "expected"), [
    ("describe table analytics.todos", "DESCRIBE TABLE `analytics`.`todos`"),
    ("describe table extended analytics.todos", "DESCRIBE TABLE EXTENDED `analytics`.`todos`"),
])
def test_describe_table(sql: str, expected: str) -> None:
    assert check_statement(sql, NAMESPACES) == expected


@pytest.mark.parametrize(("sql", "expected"), [
    ("select from_json(j, 'a int').a from todos", "SELECT FROM_JSON(`j`, 'a int').`a` FROM `todos`"),
    ("select named_struct('a', 1).a", "SELECT STRUCT(1 AS `a`).`a`"),
])
def test_a_field_of_a_functions_result(sql: str, expected: str) -> None:
    assert check_statement(sql, NAMESPACES) == expected


def test_values_is_a_query() -> None:
    assert check_statement("values (1, 2)", NAMESPACES) == "VALUES (1, 2)"


# -- properties ------------------------------------------------------------------------------


def _called_functions(sent: str) -> set[str]:
    """Names (lowercase) written just before a ``(`` in ``sent``, strings and comments aside."""
    tokens = _Tokenizer().tokenize(sent)
    return {
        a.text.lower()
        for a, b in pairwise(tokens)
        if b.token_type == TokenType.L_PAREN and a.token_type != TokenType.STRING
    }


def _sent_or_refused(sql: str) -> None:
    """What every statement must do: be refused, or be sent as a statement that passes again
    unchanged and calls no refused function."""
    try:
        sent = check_statement(sql, NAMESPACES)
    except StatementRefusedError as exc:
        assert str(exc).startswith("refused: ")
        return
    assert check_statement(sent, NAMESPACES) == sent
    assert not _called_functions(sent) & REFUSED_FUNCTIONS


SQL_WORDS = ["select", "from", "where", "show", "describe", "explain", "extended", "use", "set",
             "with", "values", "table", "query", "tables", "in", "like", "as", "of", "version", "union",
             "join", "lateral", "view", "transform", "using", "insert", "overwrite", "directory",
             "analytics", "todos", "lake", "snapshots", "reflect", "java_method", "x", "1", "'s'",
             "`q`", "`a.b`", ".", ",", "(", ")", ";", "*", "=", "->", "--", "/*", "*/", "'", "`",
             "\"", "\\", "${", "@", "$", ":", "{", "}", "[", "]", "-v"]
SQL_SOUP = st.lists(st.sampled_from(SQL_WORDS), max_size=12).map(" ".join)


@given(st.text() | SQL_SOUP)
@example("select 'a\\\\'")
@example("select `a``b` from todos")
@example("select \"x\\\"y\"")
@example("select 'it''s'")
@example("select 1 /* */ ; ")
@example("show tables like '\\\\'")
def test_any_text_is_refused_or_sent_stably(sql: str) -> None:
    _sent_or_refused(sql)


TABLES_ALLOWED = ["analytics.todos", "lake.analytics.todos", "analytics.todos.snapshots",
                  "staging.items", "todos", "`analytics`.`todos`",
                  "analytics.todos version as of 1",
                  "analytics.todos timestamp as of '2024-01-01'"]
TABLES_FORBIDDEN = ["text.`/etc/hostname`", "parquet.`file:///x`", "`csv`.`/x`",
                    "spark_catalog.default.x", "nosuch.t", "json.`/etc`", "`a.b`",
                    "global_temp.v", "lake.default.t"]
EXPRS_ALLOWED = ["id", "title", "1", "'x'", "upper(title)", "count(*)", "coalesce(id, 0)",
                 "transform(array(1), x -> x + 1)", "cast(id as string)", "`reflect`",
                 "java_method", "current_date()", "'reflect(1)'"]
EXPRS_FORBIDDEN = ["reflect('java.lang.System', 'getenv')", "java_method('a', 'b')",
                   "`java_method`('a', 'b')", "REFLECT('a', 'b')", "try_reflect('a', 'b')",
                   "in_file('/etc/passwd')", "my_udf(id)", "db.f(1)", "analytics.f(id)"]


def _queries(tables: list[str], exprs: list[str]) -> st.SearchStrategy[str]:
    expr = st.sampled_from(exprs)

    def select(table: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.builds(
            lambda cols, t, where, order: (f"select {', '.join(cols)} from {t}"
                                           f"{' where ' + where if where else ''}"
                                           f"{' order by ' + order if order else ''}"),
            st.lists(expr, min_size=1, max_size=3), table,
            st.none() | st.builds(lambda e: f"{e} is not null", expr), st.none() | expr)

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            select(st.builds(lambda q: f"({q}) s", inner)),
            st.builds(lambda a, b: f"{a} union all {b}", inner, inner),
            st.builds(lambda c, q: f"with c as ({c}) {q}", inner, inner),
            st.builds(lambda t, q: f"select * from {t} a join ({q}) b on true",
                      st.sampled_from(tables), inner),
            st.builds(lambda q, e: f"select * from ({q}) s where {e} in (select 1)", inner, expr),
        )

    return st.recursive(select(st.sampled_from(tables)), extend, max_leaves=4)


ALLOWED_QUERIES = _queries(TABLES_ALLOWED, EXPRS_ALLOWED)
MIXED_QUERIES = _queries(TABLES_ALLOWED + TABLES_FORBIDDEN, EXPRS_ALLOWED + EXPRS_FORBIDDEN)
WRAPPERS = st.sampled_from(["{}", "explain {}", "explain extended {}", "describe query {}",
                            "{};", "{}; drop table analytics.todos", "/* c */ {} -- d"])


@given(WRAPPERS, MIXED_QUERIES)
def test_a_statement_of_allowed_and_forbidden_pieces_is_refused_or_sent_stably(
    wrapper: str, query: str
) -> None:
    sql = wrapper.format(query)
    _sent_or_refused(sql)
    forbidden = any(p in query for p in TABLES_FORBIDDEN + EXPRS_FORBIDDEN)
    if forbidden or "drop table" in wrapper:
        with pytest.raises(StatementRefusedError):
            check_statement(sql, NAMESPACES)


@given(WRAPPERS.filter(lambda w: "drop" not in w), ALLOWED_QUERIES)
def test_a_query_over_the_lakes_tables_is_never_refused(wrapper: str, query: str) -> None:
    sent = check_statement(wrapper.format(query), NAMESPACES)
    assert check_statement(sent, NAMESPACES) == sent


# -- session settings ------------------------------------------------------------------------


@pytest.mark.parametrize(("config", "kept"), [
    ({}, {}),
    ({"use:database": "analytics"}, {"use:database": "analytics"}),
    ({"use:database": "Staging", FETCH_SIZE: "1000"}, {"use:database": "Staging", FETCH_SIZE: "1000"}),
    ({FETCH_SIZE: "lots"}, {}),
    ({"set:hiveconf:hive.server2.proxy.user": "root"}, {}),
    ({"set:hiveconf:spark.sql.runSQLOnFiles": "true"}, {}),
    ({"set:hivevar:x": "reflect"}, {}),
    ({"hive.server2.proxy.user": "root", "use:database": "analytics"}, {"use:database": "analytics"}),
])
def test_a_new_session_keeps_its_lake_database_and_fetch_size_only(
    config: dict[str, str], kept: dict[str, str]
) -> None:
    assert check_session_config(config, NAMESPACES) == kept


@pytest.mark.parametrize("database", ["default", "spark_catalog.default",
                                      "`analytics`", "global_temp", ""])
def test_a_new_session_outside_the_lake_is_refused(database: str) -> None:
    with pytest.raises(StatementRefusedError, match="is no namespace of the lake \\(it has analytics, staging\\)"):
        check_session_config({"use:database": database, FETCH_SIZE: "10"}, NAMESPACES)
