"""One pipeline run: build the models with dbt, then ship the change sets to the destinations.

:func:`run_and_ship` is the orchestration every caller shares: ``lakesync pipeline run``, the
warm worker behind ``lakesync up``'s scheduled runs (:mod:`lakesync.lakehouse.worker`) and
``lakesync demo``. It runs :func:`lakesync.lakehouse.runner.run_pipeline` (landing → merged
models → ``analytics.<table>`` and the change sets), then, when the configuration declares
``destinations:``, :func:`lakesync.lakehouse.shipping.ship` (tables the build did not
build are reported failed, not shipped). Both stages share one :class:`DbtInvoker`, so dbt
parses the project at most once.

Callers show progress through one observer that receives :data:`PipelineEvent` values in order:
:class:`NodesPlanned` when a dbt invocation says how many nodes it runs, :class:`NodeProgress`
for each dbt node (stage ``build``, then ``ship`` for a change-set rebuild), :class:`Built` once
the build ended, and :class:`Shipped` per destination and table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from lakesync import telemetry
from lakesync.config import Config
from lakesync.destinations.metrics import DestinationMetrics
from lakesync.lakehouse.runner import (
    PLANNED,
    DbtInvoker,
    PipelineResult,
    ProgressCallback,
    run_pipeline,
)
from lakesync.lakehouse.settings import LakeSettings
from lakesync.lakehouse.shipping import ShipResult, ship
from lakesync.schema import TableSchema

__all__ = [
    "Built",
    "NodeProgress",
    "NodesPlanned",
    "PipelineEvent",
    "PipelineObserver",
    "PipelineOutcome",
    "Shipped",
    "node_events",
    "run_and_ship",
]


@dataclass(frozen=True, slots=True)
class NodeProgress:
    """A dbt node started or finished: ``status`` is ``started``, then ``success``, ``error``,
    ``pass``, ``fail``, ``skipped``…; ``stage`` says whether the build or shipping (a change-set
    rebuild) ran it."""

    stage: Literal["build", "ship"]
    node: str
    status: str


@dataclass(frozen=True, slots=True)
class NodesPlanned:
    """A dbt invocation of ``stage`` will run ``nodes`` nodes (a run may have several: the
    build, then a change-set rebuild when shipping)."""

    stage: Literal["build", "ship"]
    nodes: int


@dataclass(frozen=True, slots=True)
class Built:
    """The build ended (shipping, if any, starts next)."""

    result: PipelineResult


@dataclass(frozen=True, slots=True)
class Shipped:
    """One table shipped to one destination (or failed to: ``result.error``)."""

    result: ShipResult


PipelineEvent = NodesPlanned | NodeProgress | Built | Shipped
"""What :func:`run_and_ship` reports to its observer, in order."""

PipelineObserver = Callable[[PipelineEvent], None]
"""Called with each :data:`PipelineEvent` of a run."""


@dataclass(frozen=True, slots=True)
class PipelineOutcome:
    """What one :func:`run_and_ship` did: the build's result and each shipment's."""

    built: PipelineResult
    shipped: list[ShipResult] = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        """One line per table or change set not built and per failed shipment, each table once
        (a table not built is not shipped either, and says so only once)."""
        return [
            *self.built.failures,
            *(f"shipping {s.destination}/{s.table}: {s.error}" for s in self.shipped
              if s.error and s.table not in self.built.failed),
        ]


def node_events(stage: Literal["build", "ship"], observer: PipelineObserver) -> ProgressCallback:
    """A dbt progress callback (:func:`lakesync.lakehouse.runner.dbt_invoke`'s) that hands
    ``observer`` the :class:`NodesPlanned` and :class:`NodeProgress` events of ``stage``."""

    def on_node(node: str, status: str) -> None:
        observer(NodesPlanned(stage, int(node)) if status == PLANNED
                 else NodeProgress(stage, node, status))

    return on_node


def run_and_ship(
    settings: LakeSettings,
    config: Config,
    *,
    schemas: Sequence[TableSchema] | None = None,
    full_refresh: bool = False,
    tests: bool = True,
    observer: PipelineObserver | None = None,
    metrics: DestinationMetrics | None = None,
    dbt: DbtInvoker | None = None,
    pushes: Sequence[str] | None = None,
) -> PipelineOutcome:
    """Run the pipeline once, then ship to ``config``'s destinations (none declared: no
    shipping); returns what both did. ``schemas``, ``full_refresh`` and ``tests`` are
    :func:`~lakesync.lakehouse.runner.run_pipeline`'s; ``metrics`` counts failed writes to
    fan-out secondaries; ``dbt`` keeps the parsed project between runs (a warm process passes
    its own); ``pushes`` are the W3C ``traceparent`` values of the pushes this run continues
    (default: those this process landed, :func:`lakesync.telemetry.take_landed`). Raises
    :class:`~lakesync.lakehouse.runner.PipelineError` when a model every table needs failed
    (nothing ships then); one table's failure is in the result instead."""
    dbt = dbt or DbtInvoker()
    with telemetry.pipeline_span({"lakesync.full_refresh": full_refresh}, pushes):
        return _run_and_ship(settings, config, schemas, full_refresh, tests, observer, metrics, dbt)


def _run_and_ship(
    settings: LakeSettings,
    config: Config,
    schemas: Sequence[TableSchema] | None,
    full_refresh: bool,
    tests: bool,
    observer: PipelineObserver | None,
    metrics: DestinationMetrics | None,
    dbt: DbtInvoker,
) -> PipelineOutcome:
    def notify(event: PipelineEvent) -> None:
        if isinstance(event, Shipped):
            r = event.result
            telemetry.completed_span(
                "lakesync.shipment",
                {"lakesync.destination": r.destination, "lakesync.table": r.table,
                 "lakesync.rows": r.rows},
                r.elapsed_s,
                r.error,
            )
        if observer is not None:
            observer(event)

    built = run_pipeline(
        settings=settings,
        schemas=schemas,
        config=config,
        full_refresh=full_refresh,
        tests=tests,
        on_progress=node_events("build", notify),
        dbt=dbt,
    )
    notify(Built(built))
    if not config.destinations:
        return PipelineOutcome(built)
    shipped = ship(
        settings,
        config,
        metrics=metrics,
        on_result=lambda r: notify(Shipped(r)),
        on_progress=node_events("ship", notify),
        not_built=built.failed,
        dbt=dbt,
    )
    return PipelineOutcome(built, shipped)
