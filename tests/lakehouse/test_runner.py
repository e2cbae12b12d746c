"""dbt parses the project once per project state in a process (the warm worker's saving)."""

from __future__ import annotations

from pathlib import Path

from lakesync.lakehouse import runner
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.models import prepare_project, write_models
from lakesync.lakehouse.settings import LakeSettings


def _models(settings: LakeSettings) -> set[str]:
    listed = runner.dbt_invoke(settings, ["ls", "--resource-type", "model", "--output", "name"])
    return set(listed.result)


def test_an_unchanged_project_is_parsed_once_and_a_changed_one_again(tmp_path: Path) -> None:
    settings = bootstrap(LakeSettings.from_env(tmp_path, env={}))
    generated = prepare_project(settings.dbt_project_dir, settings.dbt_run_project_dir)
    write_models(generated, {"items": [("title", "string")]})
    assert "analytics__items" in _models(settings)
    kept = runner._manifests[settings.dbt_run_project_dir][1]
    assert "analytics__items" in _models(settings)
    assert runner._manifests[settings.dbt_run_project_dir][1] is kept  # no second parse

    write_models(generated, {"items": [("title", "string")], "notes": [("body", "string")]})
    assert {"analytics__items", "analytics__notes"} <= _models(settings)
    assert runner._manifests[settings.dbt_run_project_dir][1] is not kept
