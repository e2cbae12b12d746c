"""dbt parses the project once per project state and invoker (the warm worker's saving), and
leaves the process environment as it found it."""

from __future__ import annotations

import os
from pathlib import Path

from lakesync.lakehouse import runner
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.models import prepare_project, write_models
from lakesync.lakehouse.settings import LakeSettings


def _models(settings: LakeSettings, dbt: runner.DbtInvoker) -> set[str]:
    listed = dbt.invoke(settings, ["ls", "--resource-type", "model", "--output", "name"])
    return set(listed.result)


def test_an_unchanged_project_is_parsed_once_and_a_changed_one_again(tmp_path: Path) -> None:
    before = dict(os.environ)
    settings = bootstrap(LakeSettings.from_env(tmp_path, env={}))
    generated = prepare_project(settings.dbt_project_dir, settings.dbt_run_project_dir)
    write_models(generated, {"items": [("title", "string")]})
    dbt = runner.DbtInvoker()
    assert "analytics__items" in _models(settings, dbt)
    kept = dbt.manifest(settings)
    assert kept is not None
    assert "analytics__items" in _models(settings, dbt)
    assert dbt.manifest(settings) is kept  # no second parse

    write_models(generated, {"items": [("title", "string")], "notes": [("body", "string")]})
    assert {"analytics__items", "analytics__notes"} <= _models(settings, dbt)
    assert dbt.manifest(settings) is not kept
    # Another invoker (another process's) keeps its own.
    assert runner.DbtInvoker().manifest(settings) is None
    # dbt read the profile's settings from the environment; none of them is left set.
    assert dict(os.environ) == before
