"""``lakesync materialise``: ship the lake's change sets to the declared destinations.

``lakesync pipeline run`` ships after dbt when the configuration declares destinations
(:func:`lakesync.lakehouse.pipeline.run_and_ship`) and prints the same table
(:func:`report_shipments`). Results print as one table; any failed destination or table makes
the command exit 1 after the others were shipped. While it ships, a terminal shows each table
shipped (rows); elsewhere one summary line follows the table. When ``lakesync up`` serves the
data dir, its warm pipeline worker ships (:mod:`lakesync.cli.handover`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from lakesync.cli.handover import InProcessOption, LakeJob, lake_job, record_here
from lakesync.cli.jars import fetch_spark_jars, say_on
from lakesync.cli.output import hide_secrets, plain, print_table
from lakesync.config import Config, load_config
from lakesync.destinations.factory import open_destination
from lakesync.destinations.migrate import migrate_table
from lakesync.errors import ConfigError, LakeSyncError
from lakesync.lakehouse import shipping
from lakesync.lakehouse.catalog import lake_catalog, require_lake
from lakesync.lakehouse.history import record_shipped, shipments
from lakesync.lakehouse.pipeline import NodeProgress, Shipped
from lakesync.lakehouse.settings import LakeSettings, config_redactor
from lakesync.lakehouse.shipping import ShipResult
from lakesync.lakehouse.worker import Queued, WorkerEvent

if TYPE_CHECKING:
    from rich.status import Status

__all__ = [
    "ConfigOption",
    "MaterialiseError",
    "ShippingStatus",
    "materialise_command",
    "migrate_command",
    "report_shipments",
    "ship",
]


def _hide_config_secrets(path: Path | None) -> Path | None:
    """Make the secrets of the configuration at ``path`` known to every line the CLI prints
    (:func:`lakesync.cli.output.hide_secrets`) before the command runs; one that does not
    load is left to the command, which says why."""
    with contextlib.suppress(LakeSyncError):
        hide_secrets(config_redactor(load_config(path)))
    return path


ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", help="Path of lakesync.yaml (default $LAKESYNC_CONFIG or ./lakesync.yaml).",
        callback=_hide_config_secrets,
    ),
]


class MaterialiseError(LakeSyncError):
    """Some destinations or tables failed; the others were shipped."""

    code = "MATERIALISE_ERROR"
    status = 502


class ShippingStatus:
    """The spinner line while shipping: the table just shipped, the change set being built;
    in a terminal each table shipped is also printed above it (rows shipped)."""

    def __init__(self, status: Status) -> None:
        self._status = status
        self._done: list[ShipResult] = []

    @property
    def results(self) -> list[ShipResult]:
        """Every table shipped so far."""
        return list(self._done)

    def shipped(self, r: ShipResult) -> None:
        """One table shipped to one destination."""
        self._done.append(r)
        if self._status.console.is_terminal:  # off a terminal the final table says it
            shipped = plain(f"  shipped {r.destination}/{r.table}: ")
            outcome = plain("failed", style="red") if r.error else plain(f"{r.rows} rows")
            self._status.console.print(shipped + outcome)
        rows = sum(d.rows for d in self._done)
        self._status.update(plain(f"{len(self._done)} tables, {rows} rows shipped; last "
                                  f"{r.destination}/{r.table}: {r.rows} rows …"))

    def building(self, node: str, state: str) -> None:
        """A dbt node of a change-set rebuild started or finished."""
        self._status.update(plain(f"building change set {node} …" if state == "started"
                                  else f"{node}: {state} …"))

    def event(self, event: WorkerEvent) -> None:
        """An event of the run on the gateway's worker (``lakesync materialise`` handed over)."""
        match event:
            case Shipped(result=result):
                self.shipped(result)
            case NodeProgress(node=node, status=status):
                self.building(node, status)
            case Queued(running=running):
                self._status.update(plain(f"waiting for the gateway's {running} …"))


def ship(
    settings: LakeSettings,
    config: Config,
    lifecycle_only: bool = False,
    job: LakeJob | None = None,
) -> None:
    """Ship every declared destination (then tier those with a ``hot_window``) and print what
    happened; raise :class:`MaterialiseError` naming the failures, after shipping everything
    else. ``lifecycle_only`` runs the tiering alone (the ``tier`` job, no Spark); ``job`` says
    where the ``ship`` job runs (:func:`lakesync.cli.handover.lake_job`; default: in this
    process)."""
    if not config.destinations:
        Console(stderr=True).print(
            "no destinations declared: add a destinations: section to lakesync.yaml"
        )
        return
    if job is None:
        job = lake_job("tier" if lifecycle_only else "ship", settings.data_dir, config, True)
    started = time.monotonic()
    console = Console(stderr=True)
    with console.status("starting Spark …") as status:
        show = ShippingStatus(status)

        def here() -> list[ShipResult]:
            if lifecycle_only:
                return shipping.tier(settings, config, on_result=show.shipped)
            require_lake(settings)
            fetch_spark_jars(settings.jars_dir,
                             say_on(console, status.update if console.is_terminal else None))
            shipped = shipping.ship(settings, config, on_result=show.shipped,
                                    on_progress=show.building)
            # As the gateway records the shipments its worker makes.
            done = shipments(shipped)
            record_here(config, settings.data_dir, lambda store: record_shipped(store, done))
            return shipped

        results = job.run(show.event, here, handed=lambda reply: show.results)
    if not console.is_terminal:  # the spinner said nothing: one line for the log
        failed = sum(1 for r in results if r.error)
        console.print(
            f"{'lifecycle' if lifecycle_only else 'materialise'}: {len(results)} tables, "
            f"{sum(r.rows for r in results)} rows shipped, {sum(r.evicted for r in results)} "
            f"evicted, {failed or 'none'} failed, {time.monotonic() - started:.1f} s",
            highlight=False, soft_wrap=True,
        )
    report_shipments(results, lifecycle_only)


def report_shipments(results: Sequence[ShipResult], lifecycle_only: bool = False) -> None:
    """Print one row per shipped (destination, table) and a warning per fan-out secondary that
    failed; raise :class:`MaterialiseError` naming the failed shipments (the others shipped)."""
    table = Table(title="lifecycle" if lifecycle_only else "materialise")
    for heading in ("destination", "table", "rows", "evicted", "watermark", "time", "status"):
        table.add_column(heading)
    for r in results:
        table.add_row(
            plain(r.destination), plain(r.table), str(r.rows), str(r.evicted),
            "none" if r.position is None else str(r.position), f"{r.elapsed_s:.1f} s",
            "[red]failed[/red]" if r.error else "[green]ok[/green]",
        )
    print_table(table)
    for r in results:
        if r.secondary_failures:
            Console(stderr=True).print(plain(
                f"warning: {r.destination}/{r.table}: {r.secondary_failures} writes to fan-out "
                "secondaries failed (logged above; the primary has the rows)"
            ))
    failed = [f"{r.destination}/{r.table}: {r.error}" for r in results if r.error]
    if failed:
        raise MaterialiseError(
            f"{len(failed)} of {len(results)} shipments failed (the rest were shipped; "
            f"fix these and run lakesync materialise again): {'; '.join(failed)}"
        )


def materialise_command(
    config: ConfigOption = None,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Data dir (default $LAKESYNC_DATA_DIR or ./.lakesync)."),
    ] = None,
    lifecycle_only: Annotated[
        bool,
        typer.Option(
            "--lifecycle-only",
            help="Only tier: remove rows whose last change is older than each destination's "
            "hot_window (no Spark).",
        ),
    ] = False,
    in_process: InProcessOption = False,
) -> None:
    """Ship each destination's changes since its watermark (no dbt run: see pipeline run), then
    move rows whose last change is older than a destination's hot_window out of it (the lake
    keeps them). When lakesync up serves the data dir, its warm pipeline worker ships."""
    cfg = load_config(config)
    settings = LakeSettings.from_config(cfg, data_dir)
    # The gateway's data dir holds its lake; any other is checked (a mistyped --data-dir is an
    # error, even with nothing to ship).
    job = lake_job("tier" if lifecycle_only else "ship", settings.data_dir, cfg, in_process)
    if job.runs_here and not lifecycle_only:
        require_lake(settings)
    ship(settings, cfg, lifecycle_only, job)


def migrate_command(
    source: Annotated[str, typer.Option("--from", help="Destination to copy from (its name).")],
    target: Annotated[str, typer.Option("--to", help="Destination to copy into (its name).")],
    table: Annotated[
        list[str] | None, typer.Option("--table", help="Only this table (repeatable).")
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Copy tables between two declared destinations (idempotent: run it again to finish).

    The tables and their columns are the source gateway's schemas in the configuration.
    """
    cfg = load_config(config)
    for name in (source, target):
        if name not in cfg.destinations:
            known = ", ".join(sorted(cfg.destinations)) or "none declared"
            raise ConfigError(f"no destination {name!r} in the configuration ({known})")
    spec = cfg.destinations[source]
    gateway = cfg.gateways.get(spec.gateway)
    schemas = [s for s in (gateway.schemas if gateway else []) if spec.ships(s.table)]
    if table:
        schemas = [s for s in schemas if s.table in table]
    if not schemas:
        raise ConfigError(
            f"no table schemas for gateway {spec.gateway!r} in the configuration: declare them "
            "under gateways: so migrate knows the columns"
        )
    lake = lake_catalog(LakeSettings.from_config(cfg))
    with open_destination(spec, catalog=lake) as src, \
            open_destination(cfg.destinations[target], catalog=lake) as dst:
        for schema in schemas:
            n = migrate_table(src, dst, schema.table, schema.columns, schema.external_id_column)
            Console().print(plain(f"{schema.table}: {n} rows from {source} to {target}"))
