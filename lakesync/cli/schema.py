"""``lakesync schema migrate``: give a ``number`` column registered before typed columns existed
its real type (``integer``, or ``decimal`` with a precision and scale).

Registering a narrower type is refused (schemas only widen), so a table registered before keeps
its ``number`` columns as doubles until this command retypes one. It works on the gateway's
store (the one ``lakesync up`` uses: ``store_url`` and the data dir), running gateways included:
they read schemas from the store on every request. It checks every row the gateway holds: each
value of the column must already be a value of the new type (an integer within ±2^53; values
are never rewritten, a delta's id is over what its client wrote), else it names the first rows
that are not and changes nothing. Then the lake rebuilds the table's model in the new type at
its next run (the gateway publishes the schema at its next flush), and each destination changes
the column's type when it next ships the table (``ALTER … TYPE``, or the rebuild its docs name).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from lakesync.cli.lake import DataDirOption
from lakesync.cli.materialise import ConfigOption
from lakesync.config import load_config
from lakesync.errors import NotFoundError, SchemaError
from lakesync.hlc import HLC
from lakesync.hotlog.sharded import open_hot_log
from lakesync.schema import (
    MIGRATABLE,
    ColumnSpec,
    TableSchema,
    migrated,
    migration_refusal,
    parse_schema,
    schema_to_wire,
)

__all__ = ["migrate_column", "schema_app"]

schema_app = typer.Typer(
    help="Table schemas: migrate a column registered before typed columns existed.",
    no_args_is_help=True,
)

_SHOWN = 5  # refused rows named in the error


def migrate_column(store: Any, gateway: str, table: str, spec: ColumnSpec) -> TableSchema:
    """Retype ``table``'s number column ``spec.name`` as ``spec`` in ``store`` (a hot log) for
    ``gateway``, after checking every row it holds (:func:`lakesync.schema.migration_refusal`);
    returns the stored schema. Raises :class:`SchemaError` naming the rows that do not fit, or
    why the column cannot be migrated."""
    stored = store.list_docs(gateway, "schema").get(table)
    if stored is None:
        raise NotFoundError(f"gateway {gateway!r} has no table {table!r}")
    target = migrated(parse_schema(stored, stored=True), spec.name, spec)
    new = next(c for c in target.columns if c.name == spec.name)
    refused = []
    for (row_table, row_id), record in store.read_all_rows(gateway).rows.items():
        cell = record.state.cells.get(spec.name) if row_table == table else None
        why = None if cell is None else migration_refusal(new, cell.value)
        if why is not None:
            refused.append(f"row {row_id!r}: {why}")
    if refused:
        more = f" (and {len(refused) - _SHOWN} more)" if len(refused) > _SHOWN else ""
        raise SchemaError(
            f"column {spec.name!r} of {table!r} cannot become {new.type}: "
            + "; ".join(refused[:_SHOWN]) + more
            + "; write those rows' values as integers first, or add a new column of the type"
        )

    def change(current: dict[str, Any] | None) -> dict[str, Any]:
        if current != stored:  # registered again meanwhile: check the new schema instead
            raise SchemaError(f"the schema of {table!r} changed meanwhile; run the command again")
        return schema_to_wire(target)

    return parse_schema(store.update_doc(gateway, "schema", table, change), stored=True)


@schema_app.command("migrate")
def migrate_command(
    table: Annotated[str, typer.Argument(help="The table.")],
    column: Annotated[str, typer.Argument(help="Its number column.")],
    type_: Annotated[str, typer.Option("--type", help=f"The new type: {', '.join(MIGRATABLE)}.")],
    precision: Annotated[
        int | None, typer.Option(help="A decimal's precision (default 38).")
    ] = None,
    scale: Annotated[int | None, typer.Option(help="A decimal's scale (default 9).")] = None,
    gw: Annotated[
        str | None, typer.Option("--gw", help="Gateway id (default: the only one declared).")
    ] = None,
    data_dir: DataDirOption = None,
    config: ConfigOption = None,
) -> None:
    """Retype a number column registered before typed columns existed as an integer or a
    decimal, after checking every value it holds fits."""
    loaded = load_config(Path(config) if config else None)
    if gw is None:
        if len(loaded.gateways) != 1:
            raise SchemaError("name the gateway with --gw (the config declares "
                              f"{len(loaded.gateways)} gateways)")
        gw = next(iter(loaded.gateways))
    # The same checks as a registration: precision and scale belong to decimal alone.
    spec = parse_schema({"table": table, "columns": [
        {"name": column, "type": type_, "precision": precision, "scale": scale}
    ]}, stored=True).columns[0]
    store = open_hot_log(loaded.store_url, loaded.shards, data_dir or loaded.data_dir, HLC(),
                         loaded.pg_schema)
    try:
        schema = migrate_column(store, gw, table, spec)
    finally:
        store.close()
    new = next(c for c in schema.columns if c.name == column)
    shape = f"({new.precision},{new.scale})" if new.type == "decimal" else ""
    typer.echo(f"{gw}.{table}.{column} is now {new.type}{shape}; the lake rebuilds the table at "
               "its next pipeline run, each destination changes the column when it next ships it")
