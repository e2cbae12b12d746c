"""The docs site's build hooks: generated references, and reST markup read as Markdown.

As an MkDocs hook (``hooks:`` in ``mkdocs.yml``) it generates the configuration and CLI
references from the code at build time. As a griffe extension (:class:`ReSTRoles`, listed under
mkdocstrings' ``extensions``) it turns the reST roles and literals of the package's docstrings
(``:class:`X```, ````x````) into Markdown code spans for the API reference.


A page holding the marker ``<!-- lakesync:config-reference -->`` gets one table per section of
``lakesync.yaml``, read from the msgspec Structs that parse it (:mod:`lakesync.config`,
:mod:`lakesync.destination_specs`, :mod:`lakesync.connector_specs`): every key, its type, its
default (the value an empty file resolves to), its environment variable and its docstring. A key
without a docstring is a build warning, so ``mkdocs build --strict`` fails on it. A page holding
``<!-- lakesync:cli-reference -->`` gets typer's own Markdown for the ``lakesync`` command, and
one holding ``<!-- lakesync:type-mapping -->`` the column types' mapping table
(:data:`lakesync.column_types.TYPE_MAPPING`).

The hook imports the package from the checkout that holds ``mkdocs.yml`` (not from whatever
``lakesync`` the environment has installed), so the references describe the code being built.
"""

from __future__ import annotations

import inspect
import logging
import re
import sys
import tempfile
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import griffe
import msgspec

log = logging.getLogger("mkdocs.hooks.lakesync")

CONFIG_MARKER = "<!-- lakesync:config-reference -->"
CLI_MARKER = "<!-- lakesync:cli-reference -->"
TYPES_MARKER = "<!-- lakesync:type-mapping -->"
METRICS_MARKER = "<!-- lakesync:metrics-reference -->"
ROOT = Path(__file__).resolve().parents[2]

# Keys a Struct carries that a file does not set (filled in by the parser).
DERIVED = {("DestinationSpec", "name")}

_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path"}


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the reference markers of a page with the generated Markdown."""
    if CONFIG_MARKER in markdown:
        markdown = markdown.replace(CONFIG_MARKER, config_reference())
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if TYPES_MARKER in markdown:
        markdown = markdown.replace(TYPES_MARKER, type_mapping())
    if METRICS_MARKER in markdown:
        markdown = markdown.replace(METRICS_MARKER, metrics_reference())
    return markdown


def _import_checkout() -> None:
    # The checkout's package first: an editable install may point at another worktree.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


# -- types and values ---------------------------------------------------------------------------
def type_text(tp: Any) -> str:
    """A field's type as a reader of ``lakesync.yaml`` thinks of it."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return type_text(args[0]) + _constraints(args[1:])
    if origin is typing.Literal:
        return " | ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [type_text(a) for a in args if a is not type(None)]
        nullable = " or null" if type(None) in args else ""
        return " or ".join(parts) + nullable
    if origin is list:
        return f"list of {type_text(args[0])}"
    if origin is dict:
        return f"map of {type_text(args[0])} to {type_text(args[1])}"
    if tp is Any:
        return "any"
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return "object"
    if isinstance(tp, type) and tp in _SCALARS:
        return _SCALARS[tp]
    return getattr(tp, "__name__", str(tp))


def _constraints(metas: tuple[Any, ...]) -> str:
    out = []
    for meta in metas:
        if not isinstance(meta, msgspec.Meta):
            continue
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(meta, attr)
            if value is not None:
                out.append(f"{sign} {value}")
        if meta.min_length == 1:
            out.append("non-empty")
        elif meta.min_length is not None:
            out.append(f"at least {meta.min_length} characters")
        if meta.pattern is not None:
            out.append(f"matching `{meta.pattern}`")
    return f" ({', '.join(out)})" if out else ""


def value_text(value: Any) -> str:
    """A default as it would be written in YAML."""
    if isinstance(value, msgspec.Struct):
        return "see below"
    if value is None:
        return "`null`"
    if isinstance(value, Path):
        value = str(value)
    return f"`{msgspec.json.encode(value).decode()}`"


def _default(field: msgspec.structs.FieldInfo) -> Any:
    if field.default is not msgspec.NODEFAULT:
        return field.default
    if field.default_factory is not msgspec.NODEFAULT:
        return field.default_factory()
    return msgspec.NODEFAULT


# -- docstrings (static: attribute docstrings exist only in the source) -------------------------
class Docstrings:
    """Attribute docstrings of Struct fields, read with griffe from the checkout's source."""

    def __init__(self) -> None:
        self._modules: dict[str, Any] = {}

    def of(self, cls: type, field: str) -> str | None:
        """The docstring of ``cls.field``, looked up along the class's bases; None if none."""
        for klass in cls.__mro__:
            module = klass.__module__
            if not module.startswith("lakesync"):
                continue
            if module not in self._modules:
                self._modules[module] = griffe.load(module, search_paths=[str(ROOT)])
            obj = self._modules[module].members.get(klass.__name__)
            member = None if obj is None else obj.members.get(field)
            if member is not None and member.docstring is not None:
                return _plain(member.docstring.value)
        return None


def _cell(text: str) -> str:
    # Markdown tables: keep each cell on one line and escape the column separator.
    return " ".join(text.split()).replace("|", "\\|")


def struct_table(
    cls: type,
    docs: Docstrings,
    *,
    prefix: str,
    env: Callable[[str], str | None],
    defaults: Mapping[str, Any] | None = None,
    required: tuple[str, ...] = (),
) -> str:
    """One Markdown table: a row per field of the Struct ``cls``."""
    rows = ["| key | type | default | environment | description |", "|---|---|---|---|---|"]
    for field in msgspec.structs.fields(cls):
        if (cls.__name__, field.name) in DERIVED:
            continue
        doc = docs.of(cls, field.name)
        if doc is None:
            log.warning("lakesync.yaml key %s%s has no docstring (%s)", prefix, field.name, cls)
            doc = ""
        default = _default(field) if defaults is None else defaults.get(field.name, _default(field))
        if field.name in required or default is msgspec.NODEFAULT:
            shown = "required"
        else:
            shown = value_text(default)
        variable = env(field.name)
        rows.append(
            "| "
            + " | ".join(
                _cell(x)
                for x in (
                    f"`{prefix}{field.encode_name}`",
                    type_text(field.type),
                    shown,
                    f"`{variable}`" if variable else "",
                    doc,
                )
            )
            + " |"
        )
    return "\n".join(rows)


def _top_level_env(config: Any, apply_environment: Callable[..., Any]) -> Callable[[str], str]:
    """The top-level keys ``apply_environment`` overrides, found by trying each: a variable
    that changes the resolved key is that key's."""
    found: dict[str, str] = {}
    for name, value in msgspec.structs.asdict(config).items():
        if not isinstance(value, str | Path):
            continue
        variable = f"LAKESYNC_{name.upper()}"
        probe = apply_environment(config, {variable: "probe"})
        if str(getattr(probe, name)) == "probe":
            found[name] = variable
    return lambda name: found.get(name, "")


def config_reference() -> str:
    """Every ``lakesync.yaml`` section as a table."""
    _import_checkout()
    from lakesync import config as cfg
    from lakesync import connector_specs, destination_specs, shard_specs

    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "lakesync.yaml"
        empty.write_text("", encoding="utf-8")
        resolved = cfg.load_config(empty, env={})
    docs = Docstrings()
    top = msgspec.structs.asdict(resolved)
    section_env: Callable[[str], str] = lambda name: f"LAKESYNC_{name.upper()}"  # noqa: E731
    no_env: Callable[[str], None] = lambda _: None  # noqa: E731
    parts = [
        "## Top level",
        struct_table(
            cfg._File, docs, prefix="", env=_top_level_env(resolved, cfg.apply_environment),
            defaults=top,
        ),
        "## `server:`",
        _class_doc(cfg.ServerConfig),
        struct_table(cfg.ServerConfig, docs, prefix="server.", env=section_env),
        "## `store:`",
        _class_doc(cfg.StoreConfig),
        struct_table(cfg.StoreConfig, docs, prefix="store.", env=section_env),
        "## `lake:`",
        _class_doc(cfg.LakeConfig),
        struct_table(cfg.LakeConfig, docs, prefix="lake.", env=section_env),
        "## `gateways:`",
        _class_doc(cfg._GatewayFile),
        struct_table(cfg._GatewayFile, docs, prefix="gateways.GW.", env=no_env),
        "## `destinations:`",
        _class_doc(destination_specs.DestinationSpec),
        struct_table(
            destination_specs.DestinationSpec, docs, prefix="destinations.NAME.", env=no_env
        ),
        "## `shards:`",
        _class_doc(shard_specs.ShardSpec),
        struct_table(shard_specs.ShardSpec, docs, prefix="shards[].", env=no_env),
        "## `connectors:`",
    ]
    for spec in _union_members(connector_specs.ConnectorSpec):
        kind = msgspec.inspect.type_info(spec).tag  # type: ignore[attr-defined]
        parts += [
            f"### `kind: {kind}`",
            _class_doc(spec),
            struct_table(
                spec,
                docs,
                prefix="connectors.NAME.",
                env=no_env,
                # Keys a kind cannot do without (checked when the connector is parsed).
                required=connector_specs._REQUIRED[kind],
            ),
        ]
    return "\n\n".join(p for p in parts if p) + "\n"


def _union_members(union: Any) -> Iterator[type]:
    yield from typing.get_args(union)


def _class_doc(cls: type) -> str:
    return _plain(inspect.cleandoc(cls.__doc__ or ""))


def _plain(doc: str) -> str:
    """A docstring's text with its reST roles and literals as Markdown code spans."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", doc.strip())
    return re.sub(r"``([^`]+)``", r"`\1`", text)


class ReSTRoles(griffe.Extension):
    """Griffe extension: docstrings written with reST roles read as Markdown."""

    def on_object(self, *, obj: griffe.Object, **_: Any) -> None:
        """Rewrite one loaded object's docstring."""
        if obj.docstring is not None:
            obj.docstring.value = _plain(obj.docstring.value)


# -- column types -------------------------------------------------------------------------------
TYPE_COLUMNS = (
    ("type", "type"),
    ("wire", "wire encoding (JSON)"),
    ("ts_reads", "TypeScript client reads"),
    ("python", "Python client"),
    ("spark_iceberg", "lake (Spark / Iceberg)"),
    ("postgres", "PostgreSQL"),
    ("mysql", "MySQL / MariaDB"),
    ("bigquery", "BigQuery"),
)


def type_mapping() -> str:
    """The column types' mapping table, one row per type, from ``TYPE_MAPPING``."""
    _import_checkout()
    from lakesync.column_types import TYPE_MAPPING

    lines = [
        "| " + " | ".join(title for _, title in TYPE_COLUMNS) + " |",
        "|" + "---|" * len(TYPE_COLUMNS),
    ]
    for row in TYPE_MAPPING:
        cells = [getattr(row, name) for name, _ in TYPE_COLUMNS]
        cells[0] = f"`{cells[0]}`"
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def metrics_reference() -> str:
    """The gateway's metric set, one row per metric, as ``/metrics`` and OTLP report it
    (:func:`lakesync.telemetry.metric_definitions` of a gateway's registry)."""
    _import_checkout()
    from lakesync.api.metrics import GatewayMetrics
    from lakesync.destinations.metrics import DestinationMetrics
    from lakesync.telemetry import metric_definitions

    gateway, shipping = GatewayMetrics(), DestinationMetrics()
    gateway.registry.register(shipping)  # as the gateway that runs the scheduled pipeline
    # One sample per labelled metric, so the families show their label names.
    for what in ("pushes", "deltas", "pulls"):
        gateway.count("gw", what)
    gateway.errors.labels("code").inc()
    shipping.secondary_failed("destination", "secondary")
    lines = ["| Name | Kind | Unit | Labels | Meaning |", "|---|---|---|---|---|"]
    for m in metric_definitions(gateway.registry):
        labels = ", ".join(f"`{label}`" for label in m.labels) or "—"
        lines.append(f"| `{m.name}` | {m.kind} | `{m.unit}` | {labels} | {_cell(m.help)} |")
    return "\n".join(lines) + "\n"


# -- CLI ----------------------------------------------------------------------------------------
def cli_reference() -> str:
    """typer's Markdown for the ``lakesync`` command and every subcommand."""
    _import_checkout()
    import typer
    import typer.cli

    from lakesync.cli.main import fully_loaded

    command = fully_loaded()  # the lazy commands too, with their options
    context = typer.Context(command)
    return typer.cli.get_docs_for_click(obj=command, ctx=context, name="lakesync", indent=1)
