"""Command-line edges of the lake: ``lakesync pipeline …`` (``lakesync query`` lives in the
lighter :mod:`lakesync.cli.query`; its names are re-exported here).

Listed in ``lakesync/cli/main.py``'s ``LAZY_COMMANDS`` (loaded when one of them runs); its error
boundary turns the errors these commands raise into one line on stderr.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Annotated

import msgspec
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from lakesync import hlc as hlc_mod
from lakesync.cli.handover import InProcessOption, lake_job, record_here
from lakesync.cli.jars import ProgressLine, fetch_spark_jars
from lakesync.cli.materialise import ConfigOption, ShippingStatus, report_shipments
from lakesync.cli.output import plain, print_table, printable
from lakesync.cli.query import DataDirOption, FormatOption, print_result, query_command
from lakesync.config import load_config
from lakesync.destinations.metrics import DestinationMetrics
from lakesync.errors import ConfigError, LakeSyncError
from lakesync.lakehouse.catalog import require_lake
from lakesync.lakehouse.history import record_pipeline_run
from lakesync.lakehouse.models import GENERATED
from lakesync.lakehouse.pipeline import (
    Built,
    NodeProgress,
    NodesPlanned,
    PipelineEvent,
    PipelineOutcome,
    Shipped,
    run_and_ship,
)
from lakesync.lakehouse.query import QueryResult
from lakesync.lakehouse.runner import (
    PipelineError,
    PipelineResult,
    generate_models,
    state_as_of_hlc,
)
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.shipping import ShipResult
from lakesync.lakehouse.worker import Queued, RunReply, WorkerEvent, failed_reply, run_reply
from lakesync.progress import NodeCount

__all__ = [
    "DataDirOption", "FormatOption", "RunView", "dbt_project", "pipeline_app", "query_command",
]

pipeline_app = typer.Typer(
    help="Lakehouse pipeline: landing → dbt on Spark → analytics.<table>.", no_args_is_help=True
)

@pipeline_app.command("run")
def run_command(
    data_dir: DataDirOption = None,
    full_refresh: Annotated[
        bool, typer.Option("--full-refresh", help="Rebuild every model from all landing data.")
    ] = False,
    no_tests: Annotated[
        bool, typer.Option("--no-tests", help="Skip the dbt data tests (dbt run, not build).")
    ] = False,
    config: ConfigOption = None,
    in_process: InProcessOption = False,
) -> None:
    """Run the dbt build once: merge new landing deltas into the current-state tables, then
    ship the changes to the destinations the configuration declares. When lakesync up serves
    the data dir, its warm pipeline worker runs it (queued behind its run going on, if any;
    Ctrl-C stops following, the run goes on there)."""
    cfg = load_config(config)
    settings = LakeSettings.from_config(cfg, data_dir)
    job = lake_job("build", settings.data_dir, cfg, in_process)
    with contextlib.ExitStack() as stack:
        view = RunView(stack, ships=bool(cfg.destinations))
        handed = _HandedRun(view)

        def here() -> PipelineOutcome:
            # A mistyped --data-dir must not become a new empty lake and a minute of Spark: only
            # the commands that make a lake (`lakesync up`, `lakesync demo`) create one.
            require_lake(settings)
            fetch_spark_jars(settings.jars_dir, view.preparing)
            started = time.time()
            metrics = DestinationMetrics()
            try:
                outcome = run_and_ship(settings, cfg, full_refresh=full_refresh,
                                       tests=not no_tests, observer=view, metrics=metrics)
            except Exception as exc:
                failed = msgspec.structs.replace(failed_reply(exc),
                                                 elapsed_s=time.time() - started)
                record_here(cfg, settings.data_dir,
                            lambda store: record_pipeline_run(store, started, failed))
                raise
            reply = run_reply(outcome, metrics)
            record_here(cfg, settings.data_dir,
                        lambda store: record_pipeline_run(store, started, reply))
            return outcome

        run = job.run(handed.event, here, handed.outcome, full_refresh=full_refresh,
                      tests=not no_tests)
    view.finish()
    if cfg.destinations:
        # The tables built ship; those not built are reported failed (and make it exit 1).
        report_shipments(run.shipped)
    if run.built.failures:
        raise PipelineError(
            f"{len(run.built.failures)} tables or change sets were not built (the others were "
            f"built and shipped): {'; '.join(run.built.failures)}"
        )


class _HandedRun:
    """A pipeline run handed to the gateway's worker: its events drawn by ``view``, its
    outcome gathered from them."""

    def __init__(self, view: RunView) -> None:
        self._view = view
        self._built: list[PipelineResult] = []
        self._shipped: list[ShipResult] = []

    def event(self, event: WorkerEvent) -> None:
        """Draw one event of the run (or its wait)."""
        match event:
            case Queued(running=running):
                self._view.waiting(running)
                return
            case Built(result=result):
                self._built.append(result)
            case Shipped(result=result):
                self._shipped.append(result)
            case NodesPlanned() | NodeProgress():
                pass
            case _:
                return  # not a pipeline run's
        self._view(event)

    def outcome(self, reply: RunReply) -> PipelineOutcome:
        """The run's outcome: what it built and shipped."""
        if not self._built:
            raise LakeSyncError(reply.error or "the gateway's pipeline run ended without a build")
        return PipelineOutcome(self._built[0], self._shipped)


class RunView(ProgressLine):
    """What ``lakesync pipeline run`` shows while it runs. In a terminal: a progress bar over
    dbt's nodes (done/total, the node running, failures so far, elapsed), each failed node
    printed above it, the run's summary table once built, then the shipping spinner. Elsewhere
    (a pipe, a file, CI) nothing while it runs and one summary line at the end (:meth:`finish`);
    the summary table is printed whole either way."""

    def __init__(self, stack: contextlib.ExitStack, ships: bool,
                 console: Console | None = None) -> None:
        self._stack = stack
        self._ships = ships
        self._console = console or Console(stderr=True)
        self._nodes = NodeCount()
        self._started = time.monotonic()
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if self._console.is_terminal:
            self._progress = stack.enter_context(Progress(
                SpinnerColumn(),
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[failed]}", style="red", markup=False),
                TimeElapsedColumn(),
                console=self._console,
                transient=True,  # the bar goes when the build ends: the summary follows
            ))
            self._task = self._progress.add_task("starting Spark", total=None, failed="")
        self._shipping: ShippingStatus | None = None

    def __call__(self, event: PipelineEvent) -> None:
        match event:
            case NodesPlanned(stage=stage, nodes=nodes):
                self._nodes.planned(nodes)
                if stage == "build":  # the bar is gone once built
                    self._draw()
            case NodeProgress(stage="build", node=node, status=status):
                self._node(node, status)
            case NodeProgress(node=node, status=status):
                self._nodes.node(node, status)
                if self._shipping is not None:
                    self._shipping.building(node, status)
            case Built(result=result):
                if self._progress is not None:
                    self._progress.stop()
                _print_summary(result, self._nodes)
                if not self._ships or not self._console.is_terminal:
                    return
                spinner = self._console.status("starting Spark …")
                self._shipping = ShippingStatus(self._stack.enter_context(spinner))
            case Shipped(result=result):
                if self._shipping is not None:
                    self._shipping.shipped(result)

    def waiting(self, running: str) -> None:
        """The gateway's worker runs ``running`` first: say so until this run starts."""
        self._describe(printable(f"waiting for the gateway's {running}"))

    def finish(self) -> None:
        """Off a terminal, print the one summary line (``pipeline run: 12/12 nodes, none
        failed, 41.0 s``); in a terminal the bar and the table said it already."""
        if not self._console.is_terminal:
            self._console.print(plain(
                f"pipeline run: {self._nodes.summary()}, "
                f"{time.monotonic() - self._started:.1f} s"), soft_wrap=True,
            )

    def _node(self, node: str, status: str) -> None:
        failures = len(self._nodes.failures)
        finished = self._nodes.node(node, status)
        if finished and len(self._nodes.failures) > failures and self._progress is not None:
            self._progress.console.print(plain(f"  {status:>7}", style="red"), plain(node))
        self._draw()

    def _draw(self) -> None:
        if self._progress is None or self._task is None:
            return
        count = self._nodes
        failed = f"{len(count.failures)} failed" if count.failures else ""
        self._progress.update(
            self._task, total=count.total or None, completed=count.done, failed=failed,
            description=printable(f"{count.current} …") if count.current else "dbt",
        )
        self._progress.refresh()  # at each node, not at the next tick: nodes can be quick


def _print_summary(result: PipelineResult, nodes: NodeCount) -> None:
    summary = Table(title="pipeline run", show_header=False)
    summary.add_row("rows merged", str(result.rows_merged))
    summary.add_row("tables updated", plain(", ".join(result.tables_updated) or "none"))
    summary.add_row("models", str(len(result.models)))
    summary.add_row("dbt nodes", plain(nodes.summary()))
    summary.add_row("landing position", "none" if result.position is None else str(result.position))
    summary.add_row("time", f"{result.elapsed_s:.1f} s")
    for failure in result.failures:
        summary.add_row(plain("not built", style="red"), plain(failure))
    print_table(summary)


@pipeline_app.command("as-of")
def as_of_command(
    table: Annotated[str, typer.Argument(help="Synced table name.")],
    hlc: Annotated[str, typer.Argument(help="HLC (decimal) to reconstruct the state at.")],
    data_dir: DataDirOption = None,
    fmt: FormatOption = "table",
) -> None:
    """Time travel by HLC: print TABLE's state from the landing deltas with hlc <= HLC."""
    frame = state_as_of_hlc(
        table, hlc_mod.parse(hlc, "hlc"), settings=LakeSettings.from_env(data_dir)
    )
    rows = frame.collect()
    print_result(QueryResult(list(frame.columns), [tuple(r) for r in rows]), fmt)


@pipeline_app.command("generate")
def generate_command(
    data_dir: DataDirOption = None,
    project: Annotated[
        Path | None,
        typer.Option(
            "--project",
            help="The dbt project to write into (default: the one the current directory is "
            "in, else lake.dbt_project_dir).",
        ),
    ] = None,
    into: Annotated[
        Path | None,
        typer.Option(
            "--into", help="Model directory (default: generated/ of the dbt project, git-ignored)."
        ),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Write the current-state model of every registered table, and the change-set model of
    every declared destination and table, into the dbt project (the one this is run in, or
    --project), so a plain `dbt build` there builds the analytics tables and the change sets
    too."""
    cfg = load_config(config)
    settings = LakeSettings.from_config(cfg, data_dir)
    directory = into or dbt_project(project, settings.dbt_project_dir) / GENERATED
    result = generate_models(settings, directory, cfg)
    names = ", ".join(result.models) or "none (no table is registered yet)"
    typer.echo(f"{len(result.models)} models into {directory.resolve()}: {names}")


def dbt_project(given: Path | None, configured: Path) -> Path:
    """The dbt project ``lakesync pipeline generate`` writes into: ``given`` (``--project``),
    else the nearest directory from the current one up that holds a ``dbt_project.yml`` (the
    project it is run in, like git finds its repository), else ``configured``
    (``lake.dbt_project_dir``, by default the installed project). A ``given`` directory
    without ``dbt_project.yml`` is a :class:`ConfigError`."""
    marker = "dbt_project.yml"
    if given is not None:
        if not (given / marker).is_file():
            raise ConfigError(
                f"{given} holds no {marker}; pass --project the directory of a dbt project"
            )
        return given.resolve()
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / marker).is_file():
            return candidate
    return configured
