"""Run the dbt project on Spark in this process: landing → cells/rows → ``analytics.<table>``.

The runner builds the Spark session (so dbt-spark's ``getOrCreate()`` reuses it), writes the
generated per-table models from the registered schemas, then calls
``dbtRunner().invoke(["build", ...])`` (models and data tests).

dbt parses the project once per project state and :class:`DbtInvoker`: the invoker keeps the
parsed manifest (keyed by the per-data-dir project and a digest of every project file and of the
profile's environment) and hands it to the next invocation, so a warm process
(``lakesync.lakehouse.worker``) pays dbt's parse only when a model, macro or setting changed (a
new table or column rewrites a generated model). The profile's settings reach dbt through
:func:`lakesync.lakehouse.process_env.process_environment` (dbt reads them from the process
environment only; nothing is left set afterwards).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from lakesync.config import Config, load_config
from lakesync.errors import LakeSyncError, without_traces
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.catalog import (
    changes_data,
    open_catalog,
    require_lake,
)
from lakesync.lakehouse.change_sets import (
    build_vars,
    drop_undeclared,
    planned_change_sets,
    read_watermarks,
)
from lakesync.lakehouse.lake_position import landing_sequence, mark_consumed
from lakesync.lakehouse.models import (
    GENERATED,
    LINKED,
    GeneratedModels,
    lake_tables,
    macro_columns,
    mismatched_columns,
    model_name,
    prepare_project,
    table_columns,
    write_change_set_models,
    write_models,
)
from lakesync.lakehouse.object_store import store_failures_raised
from lakesync.lakehouse.process_env import process_environment
from lakesync.lakehouse.registry import registered_table_schemas  # re-exported: public here too
from lakesync.lakehouse.settings import (
    ANALYTICS_NAMESPACE,
    LANDING_NAMESPACE,
    LANDING_TABLE,
    LakeSettings,
)
from lakesync.lakehouse.spark import spark_session
from lakesync.schema import TableSchema

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "PLANNED",
    "DbtInvoker",
    "PipelineError",
    "PipelineResult",
    "ProgressCallback",
    "dbt_invoke",
    "generate_models",
    "registered_table_schemas",
    "run_pipeline",
    "state_as_of_hlc",
]

ProgressCallback = Callable[[str, str], None]
"""Called with ``(node name, status)``: status ``started`` then ``success``/``error``/``pass``/…;
once per dbt invocation before its nodes, with status :data:`PLANNED` and the number of nodes it
will run in place of the name."""

PLANNED = "planned"
"""The :data:`ProgressCallback` status announcing how many nodes an invocation runs."""


class PipelineError(LakeSyncError):
    """A dbt node failed; the message names the failed nodes."""

    code = "PIPELINE_ERROR"
    status = 500

    def __init__(self, message: str, failed_models: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.failed_models: dict[str, str] = dict(failed_models or {})
        """Each failed model (a failed data test counts for the model it tests) and why; empty
        when the failure names no node (a parse or run-operation failure)."""


@dataclass(frozen=True, slots=True)
class PipelineResult:
    """Summary of one pipeline run."""

    rows_merged: int
    """Landing rows (deltas) read by this run's increment."""
    tables_updated: list[str]
    """``analytics`` tables that got a new Iceberg snapshot."""
    elapsed_s: float
    models: list[str] = field(default_factory=list)
    """Every generated current-state model."""
    change_sets: list[str] = field(default_factory=list)
    """The destination change-set models built (one per declared destination and table)."""
    position: int | None = None
    """Landing position (ingest HLC) the models are complete through."""
    failed: dict[str, str] = field(default_factory=dict)
    """Tables this run did not build, and why: a reserved name, a column typed differently by
    two gateways, or their current-state model (or one of its data tests) failed. Their change
    sets must not ship (:func:`lakesync.lakehouse.shipping.ship`'s ``not_built``); every other
    table was built."""
    failed_change_sets: dict[str, str] = field(default_factory=dict)
    """Change-set models that failed, and why (shipping rebuilds them or reports them)."""

    @property
    def failures(self) -> list[str]:
        """One line per table and change set this run did not build, and why."""
        return [*(f"table {t} not built: {why}" for t, why in self.failed.items()),
                *(f"change set {m} not built: {why}"
                  for m, why in self.failed_change_sets.items())]


def generate_models(
    settings: LakeSettings, directory: Path | None = None, config: Config | None = None
) -> GeneratedModels:
    """Write the current-state model of every registered table and the change-set model of
    every destination ``config`` declares (default: this process's ``lakesync.yaml``) into
    ``directory`` (default: the dbt project's own ``generated/`` model path, which git ignores),
    so a plain ``dbt build`` from the project builds the marts and change sets too
    (``lakesync pipeline generate``). ``models`` of the result lists both kinds."""
    require_lake(settings)
    config = config or load_config()
    tables = table_columns(registered_table_schemas(settings, config))
    into = directory or settings.dbt_project_dir / GENERATED
    generated = write_models(into, tables)
    changes = write_change_set_models(into, planned_change_sets(settings, config, tables))
    return GeneratedModels([*generated.models, *changes], generated.changed)


def _project_digest(settings: LakeSettings, env: Mapping[str, str]) -> str:
    """A digest of what dbt's parse reads: the project's files (linked and generated), the
    profile, and the environment the profile renders with."""
    run_dir = settings.dbt_run_project_dir
    digest = hashlib.sha256(json.dumps(sorted(env.items())).encode())
    roots = [run_dir / name for name in (*LINKED, GENERATED)]
    files = [settings.dbt_project_dir / "profiles.yml"]
    for root in roots:
        files += [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for path in files:
        digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class DbtInvoker:
    """dbt in this process, with the parsed manifest of each project it ran kept for the next
    invocation.

    dbt parses a project once per project state: the manifest is kept per run project directory
    with the digest (of every project file, the profile and the environment it renders with) it
    was parsed from, and handed to the next invocation, so a warm process (the pipeline worker
    keeps one invoker for its lifetime) pays dbt's parse only when a model, macro or setting
    changed. A one-shot command uses one invoker per command (its build and shipping share it).
    """

    def __init__(self) -> None:
        self._manifests: dict[Path, tuple[str, Any]] = {}

    def manifest(self, settings: LakeSettings) -> Any:
        """The manifest kept for ``settings``' project (None before its first parse), as parsed
        (never handed to dbt itself)."""
        kept = self._manifests.get(settings.dbt_run_project_dir)
        return None if kept is None else kept[1]

    def invoke(
        self,
        settings: LakeSettings,
        args: Sequence[str],
        on_progress: ProgressCallback | None = None,
    ) -> Any:
        """Invoke dbt in-process on the project with this data dir's target and log paths,
        parsing the project first only when it changed since this invoker last parsed it.
        Returns dbt's ``dbtRunnerResult``; raises :class:`PipelineError` when dbt fails."""
        # heavy, optional (extra "pipeline")
        from dbt.cli.main import dbtRunner  # noqa: PLC0415

        prepare_project(settings.dbt_project_dir, settings.dbt_run_project_dir)
        errors: list[str] = []  # e.g. a run-operation's failure, which names no node

        def callback(event: Any) -> None:
            name = event.info.name
            if event.info.level == "error":
                errors.append(event.info.msg)
            if on_progress is None:
                return
            if name == "ConcurrencyLine":  # dbt's plan: how many nodes this invocation runs
                on_progress(str(event.data.node_count), PLANNED)
                return
            if name not in ("NodeStart", "NodeFinished"):
                return
            node = event.data.node_info
            on_progress(node.node_name, "started" if name == "NodeStart" else node.node_status)

        common = [
            "--project-dir", str(settings.dbt_run_project_dir),
            "--profiles-dir", str(settings.dbt_project_dir),
            "--target-path", str(settings.dbt_dir / "target"),
            "--log-path", str(settings.dbt_dir / "logs"),
            "--no-send-anonymous-usage-stats",
            "--quiet",
        ]
        env = settings.dbt_env()
        # dbt reads the profile's env_var() from the process environment (see process_env).
        with process_environment(env):
            digest = _project_digest(settings, env)
            kept = self._manifests.get(settings.dbt_run_project_dir)
            manifest: Any = kept[1] if kept is not None and kept[0] == digest else None
            if manifest is None:
                parsed = dbtRunner(callbacks=[callback]).invoke(["parse", *common])
                if not parsed.success:
                    detail = " ".join(errors) or str(parsed.exception)
                    raise PipelineError(f"dbt parse failed: {detail}")
                manifest = parsed.result
                self._manifests[settings.dbt_run_project_dir] = (digest, manifest)
            # dbt compiles into the manifest it is given (an ephemeral model's CTE, once
            # injected, is not injected again): every invocation gets its own copy.
            fresh = manifest.deepcopy()
            result = dbtRunner(manifest=fresh, callbacks=[callback]).invoke([*args, *common])
        if not result.success:
            failed = []
            models: dict[str, str] = {}
            for r in getattr(result.result, "results", None) or []:
                node = getattr(r, "node", None)  # None for a run-operation: see ``errors``
                if node is not None and str(r.status) in ("error", "fail", "runtime error"):
                    # Spark's errors carry the JVM's stack trace: dbt's log keeps it.
                    why = f"{node.name}: {without_traces(str(r.message))}"
                    failed.append(why)
                    # A data test fails the model it tests (``model.<project>.<name>``).
                    attached = getattr(node, "attached_node", None)
                    model = attached.rsplit(".", 1)[-1] if attached else node.name
                    models.setdefault(model, why)
            detail = "; ".join(failed) or without_traces(
                "\n".join(errors) or str(result.exception)
            )
            log = settings.dbt_dir / "logs" / "dbt.log"
            raise PipelineError(f"dbt {args[0]} failed: {detail} (details in {log})", models)
        return result


def dbt_invoke(
    settings: LakeSettings,
    args: Sequence[str],
    on_progress: ProgressCallback | None = None,
    dbt: DbtInvoker | None = None,
) -> Any:
    """Invoke dbt in-process on the project with this data dir's target and log paths, through
    ``dbt`` (its kept manifests; default: a new invoker, which parses the project). Returns
    dbt's ``dbtRunnerResult``; raises :class:`PipelineError` when dbt fails."""
    return (dbt or DbtInvoker()).invoke(settings, args, on_progress)


def _snapshots(settings: LakeSettings, tables: Sequence[str]) -> dict[str, dict[int, bool]]:
    """Per analytics table: snapshot id → whether that snapshot changed any data file."""
    catalog = open_catalog(settings)
    out: dict[str, dict[int, bool]] = {}
    for t in tables:
        ident = f"{ANALYTICS_NAMESPACE}.{t}"
        snaps = catalog.load_table(ident).snapshots() if catalog.table_exists(ident) else []
        out[t] = {snap.snapshot_id: changes_data(snap) for snap in snaps}
    return out


def _retyped(settings: LakeSettings, tables: Mapping[str, Sequence[Any]]) -> list[str]:
    """The current-state models whose built ``analytics`` table holds a column of the schema in
    another type (:func:`~lakesync.lakehouse.models.mismatched_columns`): a widened column,
    whichever way the model files changed (or were dropped meanwhile)."""
    catalog = open_catalog(settings)
    out: list[str] = []
    for t, cols in tables.items():
        ident = f"{ANALYTICS_NAMESPACE}.{t}"
        if not catalog.table_exists(ident):
            continue
        fields = catalog.load_table(ident).schema().fields
        built = {f.name.lower(): str(f.field_type) for f in fields}
        mismatched = mismatched_columns(cols, built)
        if mismatched:
            _log.info("table %s: columns %s changed type since it was built: rebuilding its "
                      "model in full", t, ", ".join(mismatched))
            out.append(model_name(t))
    return out


def _position(spark: SparkSession) -> int | None:
    if not spark.catalog.tableExists(f"{LANDING_NAMESPACE}.int_rows_merged"):
        return None
    query = exp.select(exp.alias_(exp.Max(this=exp.column("last_ingest_hlc")), "p")).from_(
        exp.table_("int_rows_merged", db=LANDING_NAMESPACE)
    )
    row = spark.sql(query.sql(dialect="spark")).first()
    return None if row is None or row["p"] is None else int(row["p"])


def run_pipeline(
    data_dir: Path | str | None = None,
    *,
    settings: LakeSettings | None = None,
    schemas: Sequence[TableSchema] | None = None,
    config: Config | None = None,
    full_refresh: bool = False,
    tests: bool = True,
    on_progress: ProgressCallback | None = None,
    dbt: DbtInvoker | None = None,
) -> PipelineResult:
    """Build every model once: read new landing rows, merge them, refresh ``analytics.<table>``,
    and build the change set of each destination ``config`` declares (default: this process's
    ``lakesync.yaml``) from the watermark it is at (:mod:`lakesync.lakehouse.change_sets`; a
    destination
    whose watermark cannot be read keeps its last change set).

    ``schemas`` defaults to :func:`registered_table_schemas`; a table
    whose columns changed (a new column: its model's file changed; a widened type: its built
    table's own schema tells) is rebuilt in full, once. ``tests`` runs the data
    tests after each model (``dbt build``). One table's failure is that table's: a table the
    lake cannot build (:func:`~lakehouse.models.lake_tables`) gets no model, and a failing
    current-state or change-set model (or data test) fails only itself and what depends on it
    (dbt skips those); both are reported in the result (``failed``, ``failed_change_sets``)
    and logged. Raises :class:`PipelineError` when a model every table needs fails.
    ``dbt`` keeps the parsed project between runs (default: a new :class:`DbtInvoker`).
    Raises :class:`~lakesync.lakehouse.object_store.ObjectStoreError` when the lake's object
    store could not be reached or refused the credentials (the models' Iceberg commits are
    atomic: the next run takes up from the last one).
    :func:`lakesync.lakehouse.pipeline.run_and_ship` runs this, then ships.
    """
    settings = settings or LakeSettings.from_env(data_dir)
    with store_failures_raised(settings.warehouse, settings.s3.endpoint):
        return _run_pipeline(settings, schemas, config, full_refresh, tests, on_progress, dbt)


def _run_pipeline(
    settings: LakeSettings,
    schemas: Sequence[TableSchema] | None,
    config: Config | None,
    full_refresh: bool,
    tests: bool,
    on_progress: ProgressCallback | None,
    dbt: DbtInvoker | None,
) -> PipelineResult:
    started = time.monotonic()
    dbt = dbt or DbtInvoker()
    config = config or load_config()
    bootstrap(settings)
    tables, unbuildable = lake_tables(
        registered_table_schemas(settings, config) if schemas is None else schemas
    )
    for table, why in unbuildable.items():
        _log.error("table %s is not built: %s", table, why)
    failed = dict(unbuildable)
    generated_dir = prepare_project(settings.dbt_project_dir, settings.dbt_run_project_dir)
    generated = write_models(generated_dir, tables)
    change_sets = planned_change_sets(settings, config, tables)
    write_change_set_models(generated_dir, change_sets)
    marks = read_watermarks(settings, config.destinations, change_sets)
    for name, error in marks.unreadable.items():
        _log.warning("change set %s not built: its destination's watermark is unreadable (%s)",
                     name, error)
    spark = spark_session(settings)
    before_pos = _position(spark)
    landing_seq, late, covered = landing_sequence(settings)
    if late and not full_refresh:
        _log.warning("rows landed late (a held-back gateway caught up): rebuilding the models")
        full_refresh = True
    pending_sql = exp.select(exp.alias_(exp.Count(this=exp.Star()), "n")).from_(
        exp.table_(LANDING_TABLE, db=LANDING_NAMESPACE)
    )
    bound: dict[str, Any] = {}
    if before_pos is not None and not full_refresh:
        pending_sql = pending_sql.where(
            exp.GT(this=exp.column("ingest_hlc"), expression=exp.Placeholder(this="since"))
        )
        bound["since"] = before_pos
    pending_row = spark.sql(pending_sql.sql(dialect="spark"), args=bound or None).first()
    pending = int(pending_row["n"]) if pending_row is not None else 0
    before = _snapshots(settings, list(tables))

    # Unit tests check the SQL, not the data: CI runs them (`dbt test --select test_type:unit`).
    args = ["build", "--exclude-resource-type", "unit_test"] if tests else ["run"]
    if change_sets:
        args += build_vars(marks, change_sets)
    # A model's `+` also names its change sets and data tests.
    changed = [f"{name}+" for name in sorted({*generated.changed, *_retyped(settings, tables)})]
    exclude = [f"{name}+" for name in marks.unreadable]
    if full_refresh:
        args.append("--full-refresh")
    else:
        exclude += changed
    if exclude:
        args += ["--exclude", *exclude]
    owners = {model_name(t): t for t in tables}
    change_set_names = {m.name for m in change_sets}
    failed_change_sets: dict[str, str] = {}

    def build(dbt_args: list[str]) -> None:
        """One dbt invocation; a failure of per-table models is those tables' (recorded)."""
        try:
            dbt.invoke(settings, dbt_args, on_progress)
        except PipelineError as exc:
            shared = [m for m in exc.failed_models if m not in owners and m not in change_set_names]
            if not exc.failed_models or shared:
                raise  # a model every table needs (or dbt itself) failed
            for model, why in exc.failed_models.items():
                if model in owners:
                    failed.setdefault(owners[model], why)
                else:
                    failed_change_sets.setdefault(model, why)
                _log.error("model %s failed (the other tables are built): %s", model, why)

    build(args)
    if changed and not full_refresh:
        # New or retyped columns: rebuild those tables in full, in the new types (cells that
        # landed before a new column then show up).
        rebuild = [*args[: args.index("--exclude")], "--full-refresh", "--select", *changed]
        if marks.unreadable:
            rebuild += ["--exclude", *(f"{name}+" for name in marks.unreadable)]
        build(rebuild)

    # A table whose model or data tests failed leaves the covered position where it was, so
    # the next run checks the same increment again instead of passing over it. A table the
    # lake cannot build at all (a reserved name) has no model to check: it must not hold the
    # position back for good.
    mark_consumed(settings, landing_seq, None if failed.keys() - unbuildable.keys() else covered)
    drop_undeclared(settings, spark, change_sets)
    after = _snapshots(settings, list(tables))
    # A MERGE that matched nothing still commits an empty snapshot: count only real changes.
    updated = sorted(
        t for t in tables
        if any(changed for sid, changed in after[t].items() if sid not in before[t])
    )
    return PipelineResult(
        rows_merged=pending,
        tables_updated=updated,
        elapsed_s=time.monotonic() - started,
        models=[model_name(t) for t in sorted(tables)],
        position=_position(spark),
        change_sets=sorted(m.name for m in change_sets if m.name not in marks.unreadable),
        failed=failed,
        failed_change_sets=failed_change_sets,
    )


def state_as_of_hlc(
    table: str,
    hlc: int,
    *,
    settings: LakeSettings,
    schemas: Sequence[TableSchema] | None = None,
) -> Any:
    """Time travel by HLC: ``table``'s state from the landing deltas with ``hlc <=`` the given one.

    Compiles the project's ``lakesync_state_as_of`` macro (the same merge macros as the models)
    with dbt and runs it on Spark; returns a Spark DataFrame with the current-state columns.
    (Time travel by snapshot needs no dbt: ``select * from analytics.T version as of <id>``.)
    """
    require_lake(settings)
    tables, failed = lake_tables(
        registered_table_schemas(settings) if schemas is None else schemas
    )
    if table in failed:
        raise PipelineError(f"table {table!r} is not built: {failed[table]}")
    if table not in tables:
        raise PipelineError(f"table {table!r} has no registered schema")
    cols = macro_columns(tables[table])
    write_models(prepare_project(settings.dbt_project_dir, settings.dbt_run_project_dir), tables)
    spark = spark_session(settings)
    inline = f"{{{{ lakesync_state_as_of({json.dumps(table)}, {json.dumps(cols)}, {int(hlc)}) }}}}"
    # dbt prints an inline compile's SQL to stdout even with --quiet; the caller prints rows.
    result = dbt_invoke(settings, ["compile", "--inline", inline, "--log-level", "none"])
    return spark.sql(result.result.results[0].node.compiled_code)
