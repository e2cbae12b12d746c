"""``destinations:`` in lakesync.yaml: the fixed shape, validation, references, redaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakesync.config import load_config
from lakesync.destination_specs import DestinationSpec, resolve_url
from lakesync.errors import ConfigError

YAML = """\
destinations:
  warehouse:
    kind: postgres
    url: postgresql://sync:hunter2@db.internal:5432/app
    gateway: gw1
    tables: [todos]
    delete: soft
  reporting:
    kind: mysql
    url: ${REPORTING_URL}
    gateway: gw1
    delete: hard
  bq:
    kind: bigquery
    url: bigquery://my-project/analytics
    gateway: gw2
  lake_copy:
    kind: lake
    url: lake://exports
    gateway: gw1
"""


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def load(tmp_path: Path, text: str) -> dict[str, DestinationSpec]:
    path = tmp_path / "conf.yaml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, env={}).destinations


def test_the_documented_shape_parses(tmp_path: Path) -> None:
    dests = load(tmp_path, YAML)
    assert list(dests) == ["warehouse", "reporting", "bq", "lake_copy"]
    wh = dests["warehouse"]
    assert (wh.name, wh.kind, wh.gateway, wh.tables, wh.delete) == (
        "warehouse", "postgres", "gw1", ["todos"], "soft"
    )
    assert wh.ships("todos") and not wh.ships("notes")
    reporting = dests["reporting"]
    assert reporting.tables is None and reporting.ships("anything")
    assert reporting.delete == "hard"
    assert reporting.url == "${REPORTING_URL}"  # kept as a reference, resolved when opened
    assert dests["bq"].delete == "soft"  # the default


def test_no_section_means_no_destinations(tmp_path: Path) -> None:
    assert load(tmp_path, "data_dir: x\n") == {}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{kind: oracle, url: x, gateway: gw1}", "kind"),
        ("{kind: postgres, gateway: gw1}", "url"),
        ("{kind: postgres, url: 'postgresql://h/db'}", "gateway"),
        ("{kind: postgres, url: 'postgresql://h/db', gateway: gw1, delete: maybe}", "delete"),
        ("{kind: postgres, url: 'postgresql://h/db', gateway: gw1, colour: red}", "colour"),
        ("{kind: postgres, url: 'mysql://h/db', gateway: gw1}", "postgresql://"),
        ("{kind: mysql, url: 'postgresql://h/db', gateway: gw1}", "mysql://"),
        ("{kind: bigquery, url: 'https://x', gateway: gw1}", "bigquery://project/dataset"),
        ("{kind: postgres, url: 'postgresql://h/db', gateway: 'g w'}", "gateway"),
        ("{kind: postgres, url: 'postgresql://h/db', gateway: gw1, tables: ['a;b']}", "table"),
        ("{kind: postgres, url: 'postgresql://h/db', gateway: gw1, tables: [a, a]}", "twice"),
    ],
)
def test_invalid_declarations_name_the_problem(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, f"destinations:\n  d1: {body}\n")
    assert message in info.value.message
    assert "conf.yaml" in info.value.message


def test_destination_names_are_identifiers(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="destination name"):
        load(tmp_path, "destinations:\n  'x; drop': {kind: lake, url: 'lake://x', gateway: g}\n")


def test_errors_and_reprs_never_show_an_inline_password(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "destinations:\n  d: {kind: mysql, url: 'postgresql://u:s3cret@h/db', "
                       "gateway: gw1}\n")
    assert "s3cret" not in info.value.message and "***" in info.value.message
    spec = load(tmp_path, YAML)["warehouse"]
    assert "hunter2" not in repr(spec)
    assert "hunter2" not in repr(load_config(tmp_path / "conf.yaml", env={}))


def test_resolve_url_from_environment_and_secrets_file(tmp_path: Path) -> None:
    spec = load(tmp_path, YAML)["reporting"]
    url = resolve_url(spec, {"REPORTING_URL": "mysql://r:pw@h/db"}, lambda p: "")
    assert url == "mysql://r:pw@h/db"
    secret = tmp_path / "pw.txt"
    secret.write_text("s3cret\n", encoding="utf-8")
    filed = DestinationSpec(
        "postgres", "postgresql://u:${file:" + str(secret) + "}@h/db", "gw1", name="f"
    )
    read = lambda p: Path(p).read_text(encoding="utf-8")  # noqa: E731
    assert resolve_url(filed, {}, read) == "postgresql://u:s3cret@h/db"


def test_resolve_url_errors_name_the_variable_not_the_value(tmp_path: Path) -> None:
    spec = load(tmp_path, YAML)["reporting"]
    with pytest.raises(ConfigError, match="REPORTING_URL is not set") as info:
        resolve_url(spec, {}, lambda p: "")
    assert "reporting" in info.value.message
    with pytest.raises(ConfigError, match="mysql://") as info:
        resolve_url(spec, {"REPORTING_URL": "postgresql://u:topsecret@h/db"}, lambda p: "")
    assert "topsecret" not in info.value.message
    missing = DestinationSpec("lake", "${file:/nonexistent/pw}", "gw1", name="m")
    with pytest.raises(ConfigError, match="cannot read secrets file /nonexistent/pw"):
        resolve_url(missing, {}, lambda p: Path(p).read_text(encoding="utf-8"))


ROUTED = """\
destinations:
  app:
    kind: postgres
    url: postgresql://h/app
    gateway: gw1
    tables: [todos]
    routes: {events: reporting}
    secondaries: [copy]
    hot_window: 30d
  reporting: {kind: mysql, url: "mysql://h/rep", gateway: gw1}
  copy: {kind: mysql, url: "mysql://h/copy", gateway: gw1}
  alone: {kind: lake, url: "lake://exports", gateway: gw1}
"""


def test_routes_secondaries_and_hot_window_are_optional_keys(tmp_path: Path) -> None:
    from lakesync.destination_specs import shipped_on_their_own

    dests = load(tmp_path, ROUTED)
    app = dests["app"]
    assert app.routes == {"events": "reporting"} and app.secondaries == ["copy"]
    assert app.ships("todos") and app.ships("events") and not app.ships("notes")
    assert app.hot_window_seconds == 30 * 86_400
    assert dests["copy"].routes == {} and dests["copy"].hot_window_seconds is None
    assert [s.name for s in shipped_on_their_own(dests)] == ["app", "alone"]


@pytest.mark.parametrize(("window", "seconds"), [
    ("90s", 90), ("15m", 900), ("12h", 43_200), ("1d", 86_400), ("2w", 1_209_600),
])
def test_parse_window(window: str, seconds: int) -> None:
    from lakesync.destination_specs import parse_window

    assert parse_window(window) == seconds


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("routes: {events: nowhere}", "routes names 'nowhere', which is not declared"),
        ("secondaries: [d1]", "secondaries names the destination itself"),
        ("secondaries: [other_gw]", "both must serve gateway 'gw1'"),
        ("secondaries: [chained]", "has routes or secondaries of its own"),
        ("secondaries: [plain, plain]", "lists a secondary twice"),
        ("secondaries: [windowed]", "secondary 'windowed' has a hot_window"),
        ("routes: {'a;b': plain}", "table name in routes"),
        ("hot_window: 30 days", "hot_window '30 days' is not a window"),
        ("hot_window: 0d", "is not a window"),
    ],
)
def test_invalid_routes_secondaries_and_windows(tmp_path: Path, extra: str, message: str) -> None:
    text = f"""\
destinations:
  d1: {{kind: postgres, url: "postgresql://h/db", gateway: gw1, {extra}}}
  plain: {{kind: mysql, url: "mysql://h/db", gateway: gw1}}
  other_gw: {{kind: mysql, url: "mysql://h/db", gateway: gw2}}
  chained: {{kind: mysql, url: "mysql://h/db", gateway: gw1, secondaries: [plain]}}
  windowed: {{kind: mysql, url: "mysql://h/db", gateway: gw1, hot_window: 1d}}
"""
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    assert message in info.value.message and "conf.yaml" in info.value.message


def test_a_lake_destination_has_no_hot_window(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cold tier itself"):
        load(tmp_path, "destinations:\n  l: {kind: lake, url: 'lake://x', gateway: g, "
                       "hot_window: 1d}\n")
