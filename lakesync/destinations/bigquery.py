"""BigQuery through the official ``google-cloud-bigquery`` client.

URL: ``bigquery://PROJECT/DATASET``, optionally ``?endpoint=http://host:port`` for an emulator
(``local-bigquery``; anonymous credentials then). A change set is bulk-loaded into the staging
table with one load job (newline-delimited JSON: Spark's executors write it in parallel when
shipping, see :meth:`BigQueryDestination.load_staging`; :meth:`~BigQueryDestination.apply_changes`
serialises a driver-side change set the same way), then one ``MERGE`` and one delete apply it
and the watermark row is merged. BigQuery has no multi-statement transaction here, so the
watermark moves after the rows: a crash in between re-applies the same change set next time,
which changes nothing (rows carry their whole state).
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from lakesync.destination_specs import DestinationSpec
from lakesync.destinations import statements as st
from lakesync.destinations.base import (
    Change,
    Destination,
    DestinationError,
    TieringMark,
    eviction_batches,
    latest_per_row,
    normalise_row,
)
from lakesync.destinations.statements import DELETED, Columns, TableLayout, column_spec
from lakesync.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["BigQueryDestination"]


class BigQueryDestination(Destination):
    """One BigQuery dataset."""

    def __init__(self, spec: DestinationSpec, client: Any, project: str, dataset: str) -> None:
        self.spec = spec
        self._client = client
        self._project = project
        self._dataset = dataset
        self._qualifier = (project, dataset)
        self._bookkept = False

    @classmethod
    def from_url(
        cls, spec: DestinationSpec, url: str, env: Mapping[str, str] | None = None
    ) -> BigQueryDestination:
        """Connect from ``bigquery://project/dataset[?endpoint=…]``."""
        try:
            # heavy, optional (extras "connectors", "destinations")
            from google.api_core.client_options import ClientOptions  # noqa: PLC0415
            from google.auth.credentials import AnonymousCredentials  # noqa: PLC0415
            from google.cloud import bigquery  # noqa: PLC0415
        except ImportError:
            raise DestinationError(
                "the bigquery destination needs google-cloud-bigquery: "
                "pip install 'lakesync[destinations]'"
            ) from None
        parts = urlsplit(url)
        project, dataset = parts.hostname or "", parts.path.strip("/")
        if not project or not dataset or "/" in dataset:
            raise ConfigError(
                f"destination {spec.name!r}: a bigquery url is bigquery://project/dataset"
            )
        endpoint = parse_qs(parts.query).get("endpoint", [None])[0]
        if endpoint:
            client = bigquery.Client(
                project=project,
                credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
                client_options=ClientOptions(api_endpoint=endpoint),
            )
        else:
            client = bigquery.Client(project=project)
        dest = cls(spec, client, project, dataset)
        dest._run(st.create_dataset(project, dataset), {}, "creating the dataset")
        return dest

    def layout(
        self, table: str, columns: Columns, external_id: str | None = None
    ) -> TableLayout:
        specs = [column_spec(c) for c in columns]
        return TableLayout(table, specs, self.spec.delete, external_id, self._qualifier)

    def _job(self, sql: str, params: Mapping[str, Any], what: str) -> Any:
        """Run a statement to completion; the finished query job."""
        # heavy, optional (extras "connectors", "destinations")
        from google.api_core.exceptions import GoogleAPIError  # noqa: PLC0415
        from google.cloud import bigquery  # noqa: PLC0415

        config = bigquery.QueryJobConfig(query_parameters=[
            bigquery.ScalarQueryParameter(name, _param_type(value), value)
            for name, value in params.items()
        ])
        try:
            job = self._client.query(sql, job_config=config)
            job.result()
            return job
        except GoogleAPIError as exc:
            raise DestinationError(
                f"destination {self.spec.name!r} (BigQuery {self._project}.{self._dataset}): "
                f"{what} failed: {exc}"
            ) from None

    def _run(self, sql: str, params: Mapping[str, Any], what: str) -> list[dict[str, Any]]:
        return [dict(row.items()) for row in self._job(sql, params, what).result()]

    def _columns(self, table: str) -> dict[str, str]:
        """Each column of ``table`` (folded to lower case) and its type as BigQuery names it,
        with a decimal's precision and scale."""
        # heavy, optional (extras "connectors", "destinations")
        from google.api_core.exceptions import NotFound  # noqa: PLC0415

        try:
            found = self._client.get_table(f"{self._project}.{self._dataset}.{table}")
        except NotFound:
            return {}
        return {
            f.name.lower(): f.field_type + (
                f"({f.precision},{f.scale or 0})" if f.precision is not None else "")
            for f in found.schema
        }

    def ensure_table(self, layout: TableLayout) -> None:
        if not self._bookkept:
            self._run(st.create_watermarks("bigquery", self._qualifier), {}, "creating watermarks")
            self._bookkept = True
        what = f"creating table {layout.table!r}"
        self._run(st.create_table(layout, "bigquery"), {}, what)
        found = self._columns(layout.table)
        changes = [*st.add_columns(layout, list(found), "bigquery"),
                   *st.widen_columns(layout, found, "bigquery")]
        for alter in changes:
            self._run(alter, {}, what)
        staged = self._columns(layout.staging().table)
        if changes or any(c.name.lower() not in staged for c in layout.columns):
            # Recreated in the new shape (it holds json and bytes as text, not as the table).
            self._run(st.drop_staging(layout, "bigquery"), {}, what)
        self._run(st.create_staging(layout, "bigquery"), {}, what)

    def apply_changes(
        self, layout: TableLayout, changes: Sequence[Change], position: int | None = None
    ) -> None:
        rows = io.BytesIO()
        for change in latest_per_row(changes):
            staged = {"row_id": change.row_id, **change.values, DELETED: change.deleted}
            line = json.dumps(staged, ensure_ascii=False, default=_load_json)
            rows.write(line.encode() + b"\n")
        rows.seek(0)
        self.load_staging(layout, rows)
        self._apply_staged(layout, position)

    def apply_change_set(self, layout: TableLayout, rows: DataFrame) -> tuple[int, int | None]:
        """The executors write the change set as newline-delimited JSON part files in parallel
        (into a local temporary directory: local Spark, or a cluster whose workers share this
        machine's disk); the driver sends them to the staging table as one load job, then
        applies it (:meth:`apply_staged`)."""
        with tempfile.TemporaryDirectory(prefix="lakesync-bigquery-") as tmp:
            parts = Path(tmp) / "change_set"
            # Spark writes binary as base64, as a load job reads BYTES; its timestamps need
            # their microseconds spelled out.
            rows.write.option("timestampFormat", _SPARK_TIMESTAMP).json(parts.as_uri())
            with (Path(tmp) / "change_set.ndjson").open("w+b") as combined:
                for part in sorted(parts.glob("part-*")):
                    with part.open("rb") as src:
                        shutil.copyfileobj(src, combined)
                combined.seek(0)
                self.load_staging(layout, combined)
        return self.apply_staged(layout)

    def load_staging(self, layout: TableLayout, rows: IO[bytes]) -> None:
        """Empty the staging table, then bulk-load ``rows`` into it with one load job:
        newline-delimited JSON, one object per changed row (``row_id``, the layout's columns
        with ``json`` ones as canonical text, ``_deleted``, ``_position``; a missing key is
        null), as Spark's JSON writer produces."""
        # heavy, optional (extras "connectors", "destinations")
        from google.api_core.exceptions import GoogleAPIError  # noqa: PLC0415
        from google.cloud import bigquery  # noqa: PLC0415

        what = f"loading the change set of {layout.table!r}"
        self._run(st.clear_staging(layout, "bigquery"), {}, what)
        if not rows.read(1):
            return
        rows.seek(0)
        staging = bigquery.TableReference(
            bigquery.DatasetReference(self._project, self._dataset), layout.staging().table
        )
        config = bigquery.LoadJobConfig(
            source_format=bigquery.SourceFormat.NEWLINE_DELIMITED_JSON,
            write_disposition=bigquery.WriteDisposition.WRITE_APPEND,
        )
        try:
            self._client.load_table_from_file(rows, staging, job_config=config).result()
        except GoogleAPIError as exc:
            raise DestinationError(
                f"destination {self.spec.name!r} (BigQuery {self._project}.{self._dataset}): "
                f"{what} failed: {exc}"
            ) from None

    def apply_staged(self, layout: TableLayout) -> tuple[int, int | None]:
        """Apply what :meth:`load_staging` loaded, advance the watermark to the greatest staged
        ``_position``, empty the staging table. Returns the number of rows applied and that
        position (nothing staged: ``(0, None)``)."""
        rows = self._run(st.staged_summary(layout, "bigquery"), {},
                         f"applying changes to {layout.table!r}")
        count, top = rows[0].values() if rows else (0, None)
        if not count:
            return 0, None
        position = None if top is None else int(top)
        self._apply_staged(layout, position)
        return int(count), position

    def _apply_staged(self, layout: TableLayout, position: int | None) -> None:
        what = f"applying changes to {layout.table!r}"
        now = {"now": datetime.now(UTC)}
        self._run(st.upsert_from_staging(layout, "bigquery"), now, what)
        self._run(st.apply_deletes(layout, "bigquery"), now, what)
        if position is not None:
            self._run(st.write_watermark("bigquery", self._qualifier), {
                "gateway_id": self.spec.gateway, "table_name": layout.table,
                "position": Decimal(position), **now,
            }, what)
        self._run(st.clear_staging(layout, "bigquery"), {}, what)

    def read_rows(self, layout: TableLayout) -> list[dict[str, Any]]:
        rows = self._run(st.select_rows(layout, "bigquery"), {}, f"reading {layout.table!r}")
        # The client decodes JSON columns itself.
        return [normalise_row(layout, r, json_decoded=True) for r in rows]

    def read_changes(
        self, layout: TableLayout, since: datetime, limit: int | None = None
    ) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"since": since}
        if limit is not None:
            params["limit"] = limit
        rows = self._run(st.select_changes(layout, "bigquery", limit is not None), params,
                         f"reading changes of {layout.table!r}")
        # The client decodes JSON columns itself.
        return [normalise_row(layout, r, json_decoded=True) for r in rows]

    def evict(
        self, layout: TableLayout, row_ids: Sequence[str], mark: TieringMark | None = None
    ) -> int:
        what = f"evicting old rows of {layout.table!r}"
        evicted = 0
        for params in eviction_batches(row_ids):
            job = self._job(st.delete_rows(layout, "bigquery", len(params)), params, what)
            evicted += int(job.num_dml_affected_rows or 0)
        if mark is not None:  # after the deletes (no transaction here): a crash re-evicts all
            self._run(st.create_tiering("bigquery", self._qualifier), {}, what)
            self._run(st.write_tiering("bigquery", self._qualifier), {
                "gateway_id": self.spec.gateway, "table_name": layout.table,
                "cutoff": Decimal(mark.cutoff), "position": Decimal(mark.position),
                "now": datetime.now(UTC),
            }, what)
        return evicted

    def tiering_mark(self, table: str) -> TieringMark | None:
        what = "reading the tiering mark"
        self._run(st.create_tiering("bigquery", self._qualifier), {}, what)
        rows = self._run(st.read_tiering("bigquery", self._qualifier),
                         {"gateway_id": self.spec.gateway, "table_name": table}, what)
        return TieringMark(int(rows[0]["cutoff"]), int(rows[0]["position"])) if rows else None

    def watermark(self, table: str) -> int | None:
        if not self._bookkept:
            self._run(st.create_watermarks("bigquery", self._qualifier), {}, "creating watermarks")
            self._bookkept = True
        rows = self._run(st.read_watermark("bigquery", self._qualifier),
                         {"gateway_id": self.spec.gateway, "table_name": table},
                         "reading the watermark")
        return int(rows[0]["position"]) if rows else None

    def close(self) -> None:
        self._client.close()


_SPARK_TIMESTAMP = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"


def _load_json(value: Any) -> Any:
    """A typed value as a BigQuery JSON load job reads it: a decimal as its text (a JSON number
    would be read as a double), times and dates in ISO 8601, bytes in base64."""
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"cannot load a {type(value).__name__} into BigQuery")


def _param_type(value: Any) -> str:
    if isinstance(value, bool):
        return "BOOL"
    if isinstance(value, float):
        return "FLOAT64"
    if isinstance(value, int):
        return "INT64"
    if isinstance(value, Decimal):
        return "BIGNUMERIC"
    if isinstance(value, datetime):
        return "TIMESTAMP"
    return "STRING"
