"""Expected CLI failures: one line on stderr saying what went wrong and what to do, no traceback.

Each case runs the real ``lakesync`` command (a subprocess, or typer's CliRunner on the real app)
against a real failure: no lake, a missing path, a server that is not listening, a bad config
file, no JWT secret.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
import typer
from typer.testing import CliRunner, Result

from lakesync.cli.main import app, expected_failure
from lakesync.lakehouse.bootstrap import init_catalog_tables
from lakesync.lakehouse.catalog import ensure_landing_table, open_catalog
from lakesync.lakehouse.settings import LakeSettings
from tests.gateway_process import free_port


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for var in [v for v in os.environ if v.startswith("LAKESYNC_")]:
        monkeypatch.delenv(var)


SECRET = "cli-test-secret-long-enough-for-hs256-0123456789"


def _lakesync(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "lakesync"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "lakesync.cli"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
    clean["PYTHONPATH"] = str(Path(__file__).parents[2])  # this tree's lakesync, not installed
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        timeout=120,
        check=False,
    )


def _invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env=env)


def _one_error_line(stderr: str, code: int, returncode: int, *needles: str) -> str:
    """Assert ``stderr`` is exactly one ``error:`` line holding every needle; return the line."""
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert returncode == code, stderr
    return lines[0]


def test_query_where_there_is_no_lake_says_how_to_make_one(tmp_path: Path) -> None:
    proc = _lakesync("query", "select 1")
    data_dir = tmp_path / ".lakesync"
    _one_error_line(proc.stderr, 1, proc.returncode, f"no lake in {data_dir}", "lakesync demo")
    assert proc.stdout == ""
    assert not data_dir.exists()  # looking for a lake does not leave an empty one behind


def test_compact_where_there_is_no_lake(tmp_path: Path) -> None:
    proc = _lakesync("compact")
    data_dir = tmp_path / ".lakesync"
    _one_error_line(proc.stderr, 1, proc.returncode, f"no lake in {data_dir}")
    assert proc.stdout == ""
    assert not data_dir.exists()


def test_query_with_a_data_dir_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    out = _invoke("query", "--data-dir", str(missing), "select 1")
    _one_error_line(out.stderr, 1, out.exit_code, f"no lake in {missing}", "--data-dir")


def test_query_in_a_data_dir_whose_catalog_file_is_empty(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "catalog.db").touch()
    out = _invoke("query", "--data-dir", str(tmp_path / "d"), "select 1")
    _one_error_line(out.stderr, 1, out.exit_code, "no lake in")


def test_pipeline_as_of_where_there_is_no_lake(tmp_path: Path) -> None:
    out = _invoke("pipeline", "as-of", "todos", "5", "--data-dir", str(tmp_path))
    _one_error_line(out.stderr, 1, out.exit_code, f"no lake in {tmp_path}")


def test_pipeline_generate_where_there_is_no_lake(tmp_path: Path) -> None:
    out = _invoke("pipeline", "generate", "--data-dir", str(tmp_path / "d"))
    _one_error_line(out.stderr, 1, out.exit_code, f"no lake in {tmp_path / 'd'}")
    assert not (tmp_path / "d").exists()


def test_pipeline_run_with_a_mistyped_data_dir_makes_no_lake(tmp_path: Path) -> None:
    typo = tmp_path / "lakesnyc"
    proc = _lakesync("pipeline", "run", "--data-dir", str(typo))
    _one_error_line(proc.stderr, 1, proc.returncode, f"no lake in {typo}", "lakesync demo")
    assert not typo.exists()  # no new empty lake, no Spark run


def test_materialise_with_a_mistyped_data_dir_makes_no_lake(tmp_path: Path) -> None:
    typo = tmp_path / "lakesnyc"
    out = _invoke("materialise", "--data-dir", str(typo))
    _one_error_line(out.stderr, 1, out.exit_code, f"no lake in {typo}")
    assert not typo.exists()


TYPO_RULES = """\
gateways:
  gw1:
    schemas:
      - {table: todos, columns: [{name: title, type: string}, {name: owner, type: string}]}
    rules:
      version: 1
      buckets:
        - {name: mine, tables: [todos], filters: [{column: ownr, op: eq, value: "jwt:sub"}]}
"""


def test_up_refuses_rules_naming_a_column_no_schema_has(tmp_path: Path) -> None:
    config = tmp_path / "lakesync.yaml"
    config.write_text(TYPO_RULES)
    script = Path(sys.executable).parent / "lakesync"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "lakesync.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
    env["LAKESYNC_JWT_SECRET"] = "cli-test-secret-long-enough-for-hs256-0123456789"
    with subprocess.Popen(
        [*command, "up", "--port", str(free_port()), "--data-dir", str(tmp_path / "d"),
         "--config", str(config)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
    ) as proc:
        try:
            _, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.communicate(timeout=30)
            raise AssertionError("the gateway served rules naming no column") from None
    _one_error_line(
        stderr, 2, proc.returncode, "gateway 'gw1'", "bucket 'mine'", "table 'todos'",
        "column 'ownr'", "did you mean 'owner'?",
    )


@pytest.fixture
def landing_only(tmp_path: Path) -> LakeSettings:
    """A lake the gateway has flushed into but no pipeline has run on: only lakesync.landing."""
    settings = LakeSettings.from_env(tmp_path / "lake", env={})
    init_catalog_tables(settings)
    ensure_landing_table(open_catalog(settings))
    return settings


def test_unknown_table_names_the_tables_that_exist(landing_only: LakeSettings) -> None:
    out = _invoke("query", "--data-dir", str(landing_only.data_dir), "select * from todos")
    line = _one_error_line(out.stderr, 1, out.exit_code, "no table todos in the lake")
    assert line.endswith(
        "tables: lakesync.landing (`lakesync pipeline run` builds the analytics tables)"
    )


def test_unknown_table_lists_analytics_tables_first(landing_only: LakeSettings) -> None:
    catalog = open_catalog(landing_only)
    catalog.create_namespace("analytics")
    catalog.create_table("analytics.todos", schema=pa.schema([pa.field("id", pa.string())]))
    sql = "select * from analytics.todo"
    out = _invoke("query", "--data-dir", str(landing_only.data_dir), sql)
    line = _one_error_line(out.stderr, 1, out.exit_code, "no table todo in the lake")
    assert line.endswith("tables: analytics.todos, lakesync.landing")


def test_a_known_table_still_answers(landing_only: LakeSettings) -> None:
    out = _invoke("query", "--data-dir", str(landing_only.data_dir), "-f", "csv",
                  "select count(*) as n from landing")
    assert out.exit_code == 0, out.output
    assert out.stdout.splitlines() == ["n", "0"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("server:\n  nope: 1\n", "unknown field `nope`"),
        ("server: [\n", "is not valid YAML (line 2, column 1)"),
    ],
    ids=["unknown-key", "broken-yaml"],
)
def test_bad_config_file(tmp_path: Path, text: str, needle: str) -> None:
    config = tmp_path / "lakesync.yaml"
    config.write_text(text)
    proc = _lakesync("query", "select 1", env={"LAKESYNC_CONFIG": str(config)})
    _one_error_line(proc.stderr, 2, proc.returncode, str(config), needle)


def test_missing_config_file_given_to_up(tmp_path: Path) -> None:
    out = _invoke("up", "--config", str(tmp_path / "nope.yaml"))
    _one_error_line(out.stderr, 2, out.exit_code, "cannot read config file", "nope.yaml")


def test_up_without_a_jwt_secret_refuses_to_start(tmp_path: Path) -> None:
    proc = _lakesync("up", "--port", str(free_port()), "--data-dir", str(tmp_path / "d"))
    _one_error_line(proc.stderr, 2, proc.returncode, "no JWT secret", "set LAKESYNC_JWT_SECRET",
                    ". ./.env")
    assert not (tmp_path / "d").exists()


def test_a_short_jwt_secret_is_one_warning_line_of_ours(tmp_path: Path) -> None:
    proc = _lakesync("token", "--sub", "c", "--gw", "gw1", env={"LAKESYNC_JWT_SECRET": "change-me"})
    assert proc.returncode == 0 and proc.stdout.count(".") == 2  # a JWT
    assert proc.stderr.splitlines() == [
        "warning: the JWT secret is 9 bytes, shorter than the 32 HS256 needs to be safe; make "
        "one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
    ]


def test_documented_secrets_are_long_enough_for_hs256() -> None:
    import re

    from lakesync.tokens import MIN_SECRET_BYTES

    root = Path(__file__).parents[2]
    pages = [root / "README.md", *root.glob("docs/**/*.md"), *root.glob("*/README.md"),
             *root.glob("lakesync/*/README.md")]
    for page in pages:
        for secret in re.findall(r"LAKESYNC_JWT_SECRET=([^\s$`'\"…]+)", page.read_text()):
            assert len(secret) >= MIN_SECRET_BYTES, f"{page}: {secret}"


def test_token_without_a_jwt_secret() -> None:
    proc = _lakesync("token", "--sub", "c", "--gw", "gw1")
    _one_error_line(proc.stderr, 2, proc.returncode, "LAKESYNC_JWT_SECRET is not set")
    assert proc.stdout == ""


def test_token_with_a_bad_lifetime() -> None:
    out = _invoke("token", "--sub", "c", "--gw", "gw1", "--ttl", "forever",
                  env={"LAKESYNC_JWT_SECRET": "cli-test-secret-long-enough-for-hs256-0123456789"})
    _one_error_line(out.stderr, 2, out.exit_code, "invalid duration")


def test_up_with_a_data_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").touch()
    out = _invoke("up", "--data-dir", str(tmp_path / "afile" / "sub"),
                  env={"LAKESYNC_JWT_SECRET": SECRET})
    _one_error_line(out.stderr, 1, out.exit_code, "afile", "check that path")


def test_up_when_the_postgresql_store_is_not_running(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    url = f"postgresql://lakesync@127.0.0.1:{free_port()}/lakesync"
    env = {"LAKESYNC_STORE_URL": url, "LAKESYNC_JWT_SECRET": SECRET}
    proc = _lakesync("up", "--data-dir", str(tmp_path / "d"), env=env)
    _one_error_line(
        proc.stderr, 1, proc.returncode, "PostgreSQL hot-log store", "Connection refused",
        "LAKESYNC_STORE_URL",
    )


def test_query_when_the_catalog_server_is_not_running() -> None:
    pytest.importorskip("psycopg")
    uri = f"jdbc:postgresql://127.0.0.1:{free_port()}/lake"
    out = _invoke("query", "select 1", env={"LAKESYNC_CATALOG_URI": uri})
    _one_error_line(out.stderr, 1, out.exit_code, "lake's catalog", "Connection refused")


def test_a_gateway_that_is_not_listening_is_one_line_naming_it() -> None:
    port = free_port()
    with pytest.raises(httpx.ConnectError) as caught:
        httpx.get(f"http://127.0.0.1:{port}/v1/anything?x=1", timeout=5)
    failure = expected_failure(caught.value)
    assert failure is not None
    message, code = failure
    assert code == 1
    assert message.startswith(f"cannot reach the gateway at http://127.0.0.1:{port}/ (")
    assert message.endswith("is it running (lakesync up)?")


def test_a_bug_is_not_an_expected_failure() -> None:
    assert expected_failure(KeyError("x")) is None
    assert expected_failure(TypeError("unsupported operand")) is None


@pytest.mark.parametrize(("sql", "word"), [
    ("select n, at, day from (select 1 as n)", "at"),
    ("select at from (select 1 as n)", "at"),
    ("select n, order from (select 1 as n)", "order"),
])
def test_a_keyword_used_as_a_name_says_to_quote_it(sql: str, word: str) -> None:
    import duckdb

    with pytest.raises(duckdb.ParserException) as raised:
        duckdb.connect().execute(sql)
    failure = expected_failure(raised.value)
    assert failure is not None
    message, code = failure
    first, _, rest = message.partition("\n")
    assert code == 1
    assert first == f"{word!r} is an SQL keyword: as a column or table name, quote it (\"{word}\")"
    assert str(raised.value) == rest  # DuckDB's text, with the spot, follows


def test_other_syntax_errors_are_duckdbs_text() -> None:
    import duckdb

    with pytest.raises(duckdb.ParserException) as raised:
        duckdb.connect().execute("selec 1")
    assert expected_failure(raised.value) == (str(raised.value), 1)


def test_a_stack_trace_is_kept_in_a_file_the_error_line_names() -> None:
    """A failure whose text carries a stack trace (a Spark job's, a driver's) shows one line
    without it, naming the file that holds the whole text."""
    from lakesync.cli.main import _ErrorBoundary
    from lakesync.errors import LakeSyncError

    failing = typer.Typer(cls=_ErrorBoundary)

    @failing.command()
    def run() -> None:
        raise LakeSyncError(
            "the model failed\nTraceback (most recent call last):\n  File \"x.py\", line 1, "
            "in <module>\nKeyError: 'k'"
        )

    @failing.command()
    def other() -> None:  # two commands: typer keeps the group
        pass

    result = CliRunner().invoke(failing, ["run"])
    assert result.exit_code == 1
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error: ")]
    assert "Traceback" not in result.stderr and "File \"x.py\"" not in result.stderr, line
    where = line.split("(the whole error: ")[1].rstrip(")")
    assert "Traceback (most recent call last)" in Path(where).read_text(encoding="utf-8")
    Path(where).unlink()
