"""The lake's warehouse on S3-compatible object storage: one settings object, read by every
engine that touches the lake's files, each in its own terms.

``lake.warehouse: s3://bucket/prefix`` with ``lake.s3_endpoint``, ``s3_region``,
``s3_path_style``, ``s3_access_key_id`` and ``s3_secret_access_key`` (:class:`S3Settings`); unset
keys are left to each client's AWS chain (the ``AWS_*`` environment variables, the profile).
pyiceberg takes FileIO properties (:func:`pyiceberg_s3_properties`), Spark Iceberg's ``S3FileIO``
catalog properties (``profiles.yml`` renders them from :func:`spark_s3_env`, which
``LakeSettings.dbt_env`` adds), DuckDB an S3 secret (:func:`duckdb_s3_secret`).

The credentials stay out of reprs (:class:`S3Settings`) and out of error messages: an error names
the key or the variable, never a value. A failure of the store itself (unreachable, or refusing
the lake's credentials) becomes an :class:`ObjectStoreError` that names the store and what to
check (:func:`object_store_failure`), in place of a client's stack trace.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from lakesync.config import LakeConfig
from lakesync.errors import ConfigError, LakeSyncError
from lakesync.secrets import resolve_key

__all__ = [
    "S3FILEIO",
    "ObjectStoreError",
    "S3Settings",
    "duckdb_s3_secret",
    "is_object_store",
    "object_store_failure",
    "pyiceberg_s3_properties",
    "spark_s3_env",
    "store_failures_raised",
    "vended_s3",
    "warehouse_full",
]

S3FILEIO = "org.apache.iceberg.aws.s3.S3FileIO"
"""Iceberg's FileIO for S3 (in the Spark runtime; the AWS SDK comes from the AWS bundle)."""


def is_object_store(warehouse: str) -> bool:
    """Whether ``warehouse`` is an ``s3://`` URI (object storage) rather than local files."""
    return urlsplit(warehouse).scheme == "s3"


class ObjectStoreError(LakeSyncError):
    """The lake's storage failed: the object store could not be reached or refused the lake's
    credentials, or the file system of a local warehouse is full or read-only; the message names
    the store and what to check (never a credential)."""

    code = "OBJECT_STORE_ERROR"
    status = 502


# How the S3 clients say the store itself failed: pyarrow's (pyiceberg: the landing flush, the
# runner's reads), the AWS SDK for Java's (Spark's S3FileIO: dbt, compaction) and DuckDB's
# (httpfs: lakesync query).
_REFUSED = re.compile(
    r"AWS Error (?:ACCESS_DENIED|SIGNATURE_DOES_NOT_MATCH|INVALID_ACCESS_KEY_ID)"
    r"|S3Exception: [^\n]*Status Code: 403"
    r"|HTTP Error: [^\n]*\(HTTP 403 Forbidden\)"
)
_UNREACHABLE = re.compile(
    r"AWS Error NETWORK_CONNECTION|SdkClientException: Unable to execute HTTP request"
    r"|IO Error: Could not connect to server"
)


def object_store_failure(
    error: str, location: str, endpoint: str | None
) -> ObjectStoreError | None:
    """The :class:`ObjectStoreError` for ``error`` (an exception's text) when it says the object
    store at ``endpoint`` holding ``location`` (an ``s3://`` URI) could not be reached or
    refused the credentials; None for any other failure, or a location on local files."""
    if not is_object_store(location):
        return None
    refused = _REFUSED.search(error)
    found = refused or _UNREACHABLE.search(error)
    if found is None:
        return None
    # The line that says it, not the stack trace around it.
    start = error.rfind("\n", 0, found.start()) + 1
    end = error.find("\n", found.end())
    cause = error[start : len(error) if end < 0 else end].strip()[:500]
    store = f"{location} at {endpoint or 'the AWS default endpoint'}"
    if refused:
        return ObjectStoreError(
            f"the lake's object store ({store}) refused the lake's credentials: {cause}; check "
            "lake.s3_access_key_id and lake.s3_secret_access_key (or the AWS credential chain) "
            "and the bucket's permissions"
        )
    return ObjectStoreError(
        f"the lake's object store ({store}) could not be reached: {cause}; check that it runs "
        "and answers at lake.s3_endpoint, and the network in between"
    )


_NO_ROOM = re.compile(r"No space left on device|Disk quota exceeded|Read-only file system")


def warehouse_full(exc: BaseException, location: str) -> ObjectStoreError | None:
    """The :class:`ObjectStoreError` for ``exc`` when it says the file system holding the
    warehouse at ``location`` takes no more writes (full, over quota, read-only), wherever in its
    chain of causes it says so (pyarrow's and Python's file errors); None for any other failure."""
    seen: BaseException | None = exc
    while seen is not None:
        found = _NO_ROOM.search(str(seen))
        if found is not None:
            return ObjectStoreError(
                f"the lake's warehouse ({location or 'its local folder'}) takes no more writes: "
                f"{found.group(0)}; free space on its file system (or move lake.warehouse), and "
                "the next flush lands what waits in the hot log"
            )
        seen = seen.__cause__ or seen.__context__
    return None


@contextlib.contextmanager
def store_failures_raised(location: str, endpoint: str | None) -> Iterator[None]:
    """Raise what the block raises, except that a failure of the object store at ``endpoint``
    holding ``location`` (:func:`object_store_failure`) becomes its :class:`ObjectStoreError`
    (what to check, in one line, the client's error chained under it)."""
    try:
        yield
    except ObjectStoreError:
        raise
    except Exception as exc:  # pyarrow's, DuckDB's, Spark's (py4j) or dbt's
        store = object_store_failure(str(exc), location, endpoint)
        if store is None:
            raise
        raise store from exc


@dataclass(frozen=True)
class S3Settings:
    """Where and as whom the ``s3://`` warehouse is reached (``lake.s3_*``), with the
    credentials' ``${VAR}`` / ``${file:PATH}`` references resolved; None: the AWS chain's."""

    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False
    # Out of the repr: a settings object may end up in a log line or a traceback.
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    """Only in credentials a REST catalog vends (:func:`vended_s3`): temporary ones."""

    @classmethod
    def from_config(
        cls,
        lake: LakeConfig,
        env: Mapping[str, str] | None = None,
        read_file: Callable[[str], str] | None = None,
    ) -> S3Settings:
        """The ``lake:`` section's S3 keys, checked, with the credentials' references resolved
        from ``env`` (default ``os.environ``) and secrets files (``read_file``, default: read
        the path)."""
        env = os.environ if env is None else env
        read = read_file or (lambda path: Path(path).read_text(encoding="utf-8"))
        if lake.s3_endpoint:
            parts = urlsplit(lake.s3_endpoint)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(
                    "lake.s3_endpoint must be an http:// or https:// URL of the S3 endpoint "
                    "(e.g. http://127.0.0.1:9000)"
                )

        return cls(
            endpoint=lake.s3_endpoint or None,
            region=lake.s3_region or None,
            path_style=lake.s3_path_style,
            access_key_id=resolve_key("lake.s3_access_key_id", lake.s3_access_key_id, env, read),
            secret_access_key=resolve_key(
                "lake.s3_secret_access_key", lake.s3_secret_access_key, env, read
            ),
        )

    @property
    def secrets(self) -> list[str]:
        """The values a log must never show (for a redacting log filter): the secret access key
        and a session token. The access key id is no secret (:attr:`identifiers`)."""
        return [s for s in (self.secret_access_key, self.session_token) if s]

    @property
    def identifiers(self) -> list[str]:
        """The access key id, if set: an identifier, not a secret (AWS prints it in its errors),
        which a redacting log filter masks only as a whole word long enough not to be an
        ordinary one (:class:`lakesync.api.logs.RedactingFilter`)."""
        return [self.access_key_id] if self.access_key_id else []


def vended_s3(s3: S3Settings, io_properties: Mapping[str, str]) -> S3Settings | None:
    """``s3`` with the storage credentials a REST catalog vended for one table (pyiceberg holds
    them in the table's FileIO properties), or None when it vended none or the lake's own."""
    key = io_properties.get("s3.access-key-id")
    secret = io_properties.get("s3.secret-access-key")
    if not key or not secret or (key, secret) == (s3.access_key_id, s3.secret_access_key):
        return None
    return replace(s3, access_key_id=key, secret_access_key=secret,
                   session_token=io_properties.get("s3.session-token"))


def pyiceberg_s3_properties(s3: S3Settings) -> dict[str, str]:
    """pyiceberg FileIO properties (``s3.*``) for ``s3``; unset keys are left out."""
    props = {
        "s3.endpoint": s3.endpoint,
        "s3.region": s3.region,
        "s3.access-key-id": s3.access_key_id,
        "s3.secret-access-key": s3.secret_access_key,
        # pyarrow's S3 client takes path style for any custom endpoint unless told otherwise.
        "s3.force-virtual-addressing": "false" if s3.path_style else "true",
    }
    return {k: v for k, v in props.items() if v}


def spark_s3_env(s3: S3Settings) -> dict[str, str]:
    """The variables ``profiles.yml`` renders into Spark's Iceberg catalog properties for an
    ``s3://`` warehouse: ``io-impl`` :data:`S3FILEIO` and its ``s3.*`` / ``client.region``
    settings (each named like its ``lake:`` key's variable); unset keys are left out, so the
    AWS chain supplies them."""
    env = {
        "LAKESYNC_SPARK_IO_IMPL": S3FILEIO,
        "LAKESYNC_S3_ENDPOINT": s3.endpoint,
        "LAKESYNC_S3_REGION": s3.region,
        "LAKESYNC_S3_PATH_STYLE": "true" if s3.path_style else "false",
        "LAKESYNC_S3_ACCESS_KEY_ID": s3.access_key_id,
        "LAKESYNC_S3_SECRET_ACCESS_KEY": s3.secret_access_key,
    }
    return {k: v for k, v in env.items() if v}


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def duckdb_s3_secret(s3: S3Settings, scope: str, name: str = "lake_s3") -> str:
    """DuckDB's ``CREATE SECRET`` statement for reading ``scope`` (the warehouse URI) with
    ``s3``'s settings. Without keys it takes the AWS chain (``credential_chain``, which needs
    DuckDB's ``aws`` extension loaded)."""
    params = ["TYPE s3", f"SCOPE {_sql_text(scope)}"]
    if s3.access_key_id or s3.secret_access_key:
        params += [
            "PROVIDER config",
            f"KEY_ID {_sql_text(s3.access_key_id or '')}",
            f"SECRET {_sql_text(s3.secret_access_key or '')}",
        ]
        if s3.session_token:
            params.append(f"SESSION_TOKEN {_sql_text(s3.session_token)}")
    else:
        params.append("PROVIDER credential_chain")
    if s3.region:
        params.append(f"REGION {_sql_text(s3.region)}")
    if s3.endpoint:
        parts = urlsplit(s3.endpoint)
        # DuckDB takes host[:port] and whether to use TLS, not a URL.
        params += [f"ENDPOINT {_sql_text(parts.netloc)}",
                   f"USE_SSL {'true' if parts.scheme == 'https' else 'false'}"]
    params.append(f"URL_STYLE {_sql_text('path' if s3.path_style else 'vhost')}")
    return f"CREATE OR REPLACE SECRET {name} ({', '.join(params)})"
