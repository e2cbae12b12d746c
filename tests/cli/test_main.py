"""The ``lakesync`` command line: ``token`` minting, its errors, and ``--help`` everywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from lakesync.cli.main import LAZY_COMMANDS, app, load_command, main
from lakesync.tokens import verify_token

SECRET = "cli-test-secret-long-enough-for-hs256-0123456789"


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("LAKESYNC_CONFIG", "LAKESYNC_JWT_SECRET", "LAKESYNC_JWT_SECRET_PREVIOUS"):
        monkeypatch.delenv(var, raising=False)


def lakesync_cmd() -> list[str]:
    script = Path(sys.executable).parent / "lakesync"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lakesync.cli"]


def run_cli(*args: str, secret: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESYNC_")}
    if secret is not None:
        env["LAKESYNC_JWT_SECRET"] = secret
    return subprocess.run(
        [*lakesync_cmd(), *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_token_command_prints_a_verifiable_token() -> None:
    proc = run_cli(
        "token",
        "--sub",
        "client-7",
        "--gw",
        "gw1",
        "--role",
        "admin",
        "--claim",
        "team=a",
        "--claim",
        "team=b",
        "--claim",
        "org=acme",
        "--ttl",
        "2h",
        secret=SECRET,
    )
    assert proc.returncode == 0, proc.stderr
    token = proc.stdout.strip()
    claims = verify_token(token, [SECRET], "gw1")
    assert claims == {
        "sub": "client-7",
        "gw": "gw1",
        "role": "admin",
        "team": ["a", "b"],
        "org": "acme",
    }
    import jwt

    payload = jwt.decode(token, SECRET, algorithms=["HS256"])
    assert payload["exp"] - payload["iat"] == 7200


def test_token_defaults_to_client_role_and_one_hour(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKESYNC_JWT_SECRET", SECRET)
    result = CliRunner().invoke(app, ["token", "--sub", "c", "--gw", "gw1"])
    assert result.exit_code == 0, result.output
    claims = verify_token(result.output.strip(), [SECRET], "gw1")
    assert claims == {"sub": "c", "gw": "gw1", "role": "client"}


def test_missing_secret_exits_2_with_a_clear_message() -> None:
    proc = run_cli("token", "--sub", "c", "--gw", "gw1", secret=None)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "LAKESYNC_JWT_SECRET is not set" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--ttl", "forever"], "invalid duration"),
        (["--role", "root"], "role"),
        (["--claim", "sub=x"], "reserved"),
        (["--gw", "a" * 300], "invalid gateway id"),
    ],
)
def test_bad_token_arguments_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    needle: str,
) -> None:
    monkeypatch.setenv("LAKESYNC_JWT_SECRET", SECRET)
    assert main(["token", "--sub", "c", "--gw", "gw1", *args]) == 2
    assert needle in capsys.readouterr().err


def test_malformed_claim_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKESYNC_JWT_SECRET", SECRET)
    result = CliRunner().invoke(app, ["token", "--sub", "c", "--gw", "gw1", "--claim", "novalue"])
    assert result.exit_code == 2
    assert "key=value" in result.output


def test_missing_required_option_is_a_usage_error() -> None:
    assert main(["token", "--gw", "gw1"]) == 2


def test_the_console_sign_in_hint_mints_an_admin_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import re
    import shlex

    page = (Path(__file__).parents[2] / "lakesync/api/console/index.html").read_text()
    hint = re.search(r"<code>(lakesync token [^<]*)</code>", page)
    assert hint is not None
    argv = shlex.split(hint.group(1).replace("GATEWAY_ID", "gw1"))[1:]
    monkeypatch.setenv("LAKESYNC_JWT_SECRET", SECRET)
    assert main(argv) == 0
    claims = verify_token(capsys.readouterr().out.strip(), [SECRET], "gw1")
    assert claims == {"sub": "operator", "gw": "gw1", "role": "admin"}


def _command_paths(cmd: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and sub-command path (typer vendors click, so duck-type groups); the root's
    lazily loaded commands loaded."""
    paths = [prefix]
    subs = dict(getattr(cmd, "commands", {}))
    if not prefix:
        subs |= {name: load_command(name) for name in LAZY_COMMANDS}
    for name, sub in subs.items():
        paths += _command_paths(sub, (*prefix, name))
    return paths


COMMANDS = _command_paths(typer.main.get_command(app))


def test_token_is_a_registered_command() -> None:
    assert ("token",) in COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "lakesync")
def test_help_for_every_command(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    if path == ("token",):
        for option in ("--sub", "--gw", "--role", "--claim", "--ttl"):
            assert option in result.output


@pytest.mark.parametrize("name", list(LAZY_COMMANDS))
def test_a_lazy_command_is_listed_by_the_start_of_its_help(name: str) -> None:
    # The summary `lakesync --help` shows without importing the command must not drift from it.
    summary = LAZY_COMMANDS[name][2]
    loaded = load_command(name)
    assert loaded.name == name
    assert " ".join((loaded.help or "").split()).startswith(summary)


def test_help_and_token_do_not_import_the_lazy_commands() -> None:
    # `lakesync --help` and `lakesync token` load none of the gateway, the lake or the client
    # (Litestar, sqlglot, pyiceberg, DuckDB, websockets): a subprocess, so nothing is loaded yet.
    heavy = ["lakesync.api.cli", "lakesync.cli.lake", "lakesync.lakehouse.query", "litestar",
             "sqlglot", "pyiceberg", "duckdb", "pyspark", "websockets", "httpx"]
    script = (
        "import sys\n"
        "from lakesync.cli.main import main\n"
        "codes = [main(['--help']), main(['token', '--sub', 'c', '--gw', 'g'])]\n"
        f"print(codes, sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    env = {**os.environ, "LAKESYNC_JWT_SECRET": SECRET}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[0, 0] []"


def test_a_lazy_command_runs_and_its_failure_keeps_the_error_boundary(tmp_path: Path) -> None:
    # Loaded on demand, the command still runs inside the root group's error boundary.
    result = CliRunner().invoke(app, ["query", "select 1", "--data-dir", str(tmp_path / "none")])
    assert result.exit_code == 1
    assert "error:" in result.output


def test_help_through_the_installed_script() -> None:
    proc = run_cli("--help", secret=None)
    assert proc.returncode == 0
    assert "token" in proc.stdout


def test_command_lists_show_each_summary_as_one_reflowed_paragraph() -> None:
    """typer's rich help prints a command's ``short_help or help`` in the list as is, so a
    docstring's line breaks cut sentences mid-line (``init``: "…and the" / "next three
    commands."): every listed summary is one paragraph with no line break."""
    runner = CliRunner()
    groups: list[tuple[str, ...]] = [(), ("pipeline",)]
    for path in groups:
        result = runner.invoke(app, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0, result.output
    root = typer.main.get_command(app)
    ctx = root.make_context("lakesync", ["--help"], resilient_parsing=True)
    for name in root.list_commands(ctx):
        command = root.get_command(ctx, name)
        listed = [command, *getattr(command, "commands", {}).values()]
        for cmd in listed:
            shown = cmd.short_help or cmd.help or ""
            assert "\n" not in shown.split("\n\n")[0], (name, cmd.name, shown)
