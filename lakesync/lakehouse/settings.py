"""One typed settings object for the lake: catalog, warehouse, jars and Spark's target.

Everything the pipeline, the flusher, queries and the bootstrap need to agree on is derived here,
from the data dir plus the ``lake:`` section of the configuration, so pyiceberg, Spark and DuckDB
always see the same catalog. ``lakesync.config`` reads and validates ``lakesync.yaml`` and the
environment (each ``lake:`` key is overridden by ``LAKESYNC_`` + the key in capitals); unset
values are derived here:

- ``data_dir`` (``LAKESYNC_DATA_DIR``, default ``./.lakesync``): embedded layout
  ``D/catalog.db``, ``D/warehouse``.
- ``catalog_uri``: ``jdbc:sqlite:...`` or ``jdbc:postgresql://host:port/db``
  (default: the SQLite file); ``catalog_user`` / ``catalog_password``: JDBC credentials.
  ``http(s)://...`` selects an Iceberg REST catalog instead, with ``catalog_warehouse`` (the
  warehouse name it serves) and ``catalog_credential`` (OAuth2 ``client_id:client_secret``) or
  ``catalog_token`` (bearer). Secrets may be ``${VAR}`` / ``${file:PATH}`` references
  (:mod:`lakesync.secrets`), resolved here.
- ``warehouse``: warehouse URI every Spark worker reaches (default ``file://D/warehouse``), or
  ``s3://bucket/prefix`` on object storage with the ``s3_*`` keys (:attr:`LakeSettings.s3`,
  :mod:`lakesync.lakehouse.object_store`).
- ``spark_master`` (default ``local[2]``); ``spark_cores_max`` / ``spark_executor_memory``:
  sizing on a cluster master.
- ``spark_driver_host`` / ``spark_driver_port`` / ``spark_block_manager_port``: the address the
  Spark driver advertises to a cluster's executors and the fixed ports it listens on (unset:
  Spark's choice of the machine's address and random ports; :meth:`LakeSettings.driver_conf`).
- ``jars_dir``: where the bootstrap downloads the jars Spark loads (:data:`SPARK_JARS`: the
  Iceberg runtime, its AWS bundle and the JDBC drivers, pinned artifacts of Maven Central;
  default ``<sys.prefix>/share/lakesync/jars``).
- ``dbt_project_dir``: the dbt project (default: the repository root).
- ``snapshot_retention`` (seconds, default 7 days), ``snapshot_retain_last`` (default 1),
  ``orphan_file_age`` (seconds, default 3 days): Iceberg maintenance (``macros/maintenance.sql``,
  ``lakesync compact``): snapshots younger than the retention stay, so time travel to them
  answers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

import yaml

from lakesync.config import Config, LakeConfig, declared_secrets, load_config
from lakesync.errors import ConfigError
from lakesync.lakehouse.object_store import S3Settings, is_object_store, spark_s3_env
from lakesync.redaction import Redactor
from lakesync.schema import ANALYTICS_NAMESPACE, CHANGES_NAMESPACE, LANDING_NAMESPACE
from lakesync.secrets import resolve_key

__all__ = [
    "ANALYTICS_NAMESPACE",
    "CATALOG_NAME",
    "CHANGES_NAMESPACE",
    "ICEBERG_JARS",
    "ICEBERG_VERSION",
    "JDBC_DRIVER_JARS",
    "LANDING_NAMESPACE",
    "LANDING_TABLE",
    "MAVEN_CENTRAL",
    "SPARK_JARS",
    "LakeSettings",
    "MavenJar",
    "config_redactor",
    "default_jars_dir",
    "profile_spark_conf",
]

CATALOG_NAME = "lake"
LANDING_TABLE = "landing"

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
ICEBERG_VERSION = "1.10.1"
"""The Apache Iceberg release the lake's Spark side runs (runtime for Spark 3.5 / Scala 2.12 and
its AWS bundle); a user's cluster needs the same two jars on ``spark.jars``."""


@dataclass(frozen=True)
class MavenJar:
    """One published jar, pinned by version and SHA-256, that the bootstrap downloads once."""

    group: str
    artifact: str
    version: str
    sha256: str
    size: int = 0
    """Its size in bytes (0: not stated), for a download's progress."""

    @property
    def file_name(self) -> str:
        """The jar's file name, as Maven names it."""
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repository: str = MAVEN_CENTRAL) -> str:
        """Where a Maven repository (default Maven Central) serves it."""
        return (
            f"{repository.rstrip('/')}/{self.group.replace('.', '/')}/{self.artifact}/"
            f"{self.version}/{self.file_name}"
        )


ICEBERG_RUNTIME = MavenJar(
    "org.apache.iceberg", "iceberg-spark-runtime-3.5_2.12", ICEBERG_VERSION,
    "39ea09e6c03550a300b9d9ab498949836d2d434e441da4c12a943a086e396940", 47140434,
)
# The AWS SDK that the runtime's S3FileIO (and the REST catalog's SigV4 signer) load at runtime.
ICEBERG_AWS_BUNDLE = MavenJar(
    "org.apache.iceberg", "iceberg-aws-bundle", ICEBERG_VERSION,
    "86bf20892ea5b4c17688f19b075399885f6aa5303f6b2dc9f491e76ceef9633b", 62673230,
)
ICEBERG_JARS = (ICEBERG_RUNTIME, ICEBERG_AWS_BUNDLE)
"""The Iceberg jars Spark loads: the official, self-contained artifacts (Jackson, httpclient5
and the AWS SDK relocated inside), downloaded into :attr:`LakeSettings.jars_dir` by the
bootstrap so later runs stay offline."""

# The JDBC drivers Spark loads: Iceberg's JDBC catalog (SQLite, PostgreSQL) and the destinations'
# staging tables (materialise: PostgreSQL, MariaDB/MySQL). SQLite's is the version Apache
# Iceberg's REST catalog server runs here too (scripts/rest-catalog/pom.xml).
SQLITE_JDBC = MavenJar(
    "org.xerial", "sqlite-jdbc", "3.49.1.0",
    "5c8609d2ca341deb8c6f71778974b5ba4995c7d32d7c7c89d9392a3e72c39291", 14317659,
)
POSTGRES_JDBC = MavenJar(
    "org.postgresql", "postgresql", "42.7.14",
    "73914527305a40cce504b0d3d90b23caf565136912d607ae8ae7c5895512332c", 1221004,
)
MARIADB_JDBC = MavenJar(
    "org.mariadb.jdbc", "mariadb-java-client", "3.5.11",
    "42604178b9e57ec08ee0035079961516f086e455d0141f0b22c6eff29fb2fff4", 793387,
)
JDBC_DRIVER_JARS = (SQLITE_JDBC, POSTGRES_JDBC, MARIADB_JDBC)
"""The JDBC drivers Spark loads (the catalog's and the destinations'), published artifacts of
Maven Central pinned like :data:`ICEBERG_JARS`."""
SPARK_JARS = ICEBERG_JARS + JDBC_DRIVER_JARS
"""Every jar on ``spark.jars`` (driver and executors alike), downloaded by the bootstrap into
:attr:`LakeSettings.jars_dir`; the driver serves them to a cluster's executors."""


def default_jars_dir() -> Path:
    """Directory for the jars setup downloads: inside the active environment (per venv, stable)."""
    return Path(sys.prefix) / "share" / "lakesync" / "jars"


def default_dbt_project_dir() -> Path:
    """The dbt project (``dbt_project.yml``, ``models/``, ``macros/``) the package carries:
    ``lakesync/dbt_project``, which links to the repository root's files in a checkout and holds
    copies of them in an installed wheel."""
    return Path(__file__).resolve().parents[1] / "dbt_project"


@dataclass(frozen=True)
class LakeSettings:
    """Catalog, warehouse, jars and Spark target shared by every lake component."""

    data_dir: Path
    catalog_uri: str
    warehouse: str
    catalog_user: str | None = None
    catalog_password: str | None = None
    catalog_warehouse: str | None = None
    catalog_credential: str | None = None
    catalog_token: str | None = None
    spark_master: str = LakeConfig().spark_master
    spark_cores_max: int | None = None
    spark_executor_memory: str | None = None
    spark_driver_host: str | None = None
    spark_driver_port: int | None = None
    spark_block_manager_port: int | None = None
    jars_dir: Path = field(default_factory=default_jars_dir)
    dbt_project_dir: Path = field(default_factory=default_dbt_project_dir)
    shuffle_partitions: int = 4
    snapshot_retention_s: float = LakeConfig().snapshot_retention
    snapshot_retain_last: int = LakeConfig().snapshot_retain_last
    orphan_file_age_s: float = LakeConfig().orphan_file_age
    s3: S3Settings = field(default_factory=S3Settings)
    warehouse_declared: bool = False
    """Whether ``lake.warehouse`` was set (not derived from the data dir): a REST catalog must
    then create the lake's tables under it (:meth:`holds`)."""

    @classmethod
    def from_env(
        cls, data_dir: Path | str | None = None, env: Mapping[str, str] | None = None
    ) -> LakeSettings:
        """Settings for ``data_dir`` (else the configured data dir) and the ``lake:`` configuration.

        The configuration is ``lakesync.config.load_config(None, env)``: ``env`` (default
        ``os.environ``) over ``lakesync.yaml``; an explicit ``data_dir`` wins over both.
        """
        return cls.from_config(load_config(None, env), data_dir, env)

    @classmethod
    def from_config(
        cls,
        config: Config,
        data_dir: Path | str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> LakeSettings:
        """Settings from an already resolved configuration (e.g. ``lakesync up --config X``'s);
        an explicit ``data_dir`` wins over the configured one.

        The catalog's secrets (``catalog_password``, ``catalog_credential``, ``catalog_token``)
        and the S3 credentials may be ``${VAR}`` / ``${file:PATH}`` references, resolved from
        ``env`` (default ``os.environ``); a :class:`ConfigError` names the key and the variable
        or file, never a value.
        """
        root = Path(data_dir or config.data_dir).resolve()
        lake = config.lake
        if lake.spark_driver_port and lake.spark_driver_port == lake.spark_block_manager_port:
            raise ConfigError(
                f"lake.spark_driver_port and lake.spark_block_manager_port are both "
                f"{lake.spark_driver_port}: the driver listens on each, so they must differ"
            )
        catalog_uri = lake.catalog_uri or f"jdbc:sqlite:{root / 'catalog.db'}"
        _catalog_type(catalog_uri)  # an unsupported URI fails here, naming the key
        warehouse = lake.warehouse or (root / "warehouse").as_uri()
        if is_object_store(warehouse) and not urlsplit(warehouse).netloc:
            raise ConfigError(f"lake.warehouse {warehouse!r} names no bucket (s3://bucket/prefix)")

        def secret(key: str, value: str | None) -> str | None:
            return resolve_key(
                f"lake.{key}", value, os.environ if env is None else env,
                lambda path: Path(path).read_text(encoding="utf-8"),
            )

        return cls(
            data_dir=root,
            catalog_uri=catalog_uri,
            warehouse=warehouse,
            catalog_user=lake.catalog_user or None,
            catalog_password=secret("catalog_password", lake.catalog_password),
            catalog_warehouse=lake.catalog_warehouse or None,
            catalog_credential=secret("catalog_credential", lake.catalog_credential),
            catalog_token=secret("catalog_token", lake.catalog_token),
            spark_master=lake.spark_master,
            spark_cores_max=lake.spark_cores_max,
            spark_executor_memory=lake.spark_executor_memory or None,
            spark_driver_host=lake.spark_driver_host or None,
            spark_driver_port=lake.spark_driver_port,
            spark_block_manager_port=lake.spark_block_manager_port,
            jars_dir=Path(lake.jars_dir) if lake.jars_dir else default_jars_dir(),
            dbt_project_dir=(
                Path(lake.dbt_project_dir) if lake.dbt_project_dir else default_dbt_project_dir()
            ),
            snapshot_retention_s=lake.snapshot_retention,
            snapshot_retain_last=lake.snapshot_retain_last,
            orphan_file_age_s=lake.orphan_file_age,
            s3=S3Settings.from_config(lake, env),
            warehouse_declared=bool(lake.warehouse),
        )

    def holds(self, location: str) -> bool:
        """Whether ``location`` (a table's, as its catalog reports it) lies under the warehouse:
        ``s3a://`` is ``s3://``, ``file:/x`` is ``file:///x``, a trailing slash is no part."""
        def parts(uri: str) -> tuple[str, str, str]:
            u = urlsplit(uri)
            scheme = "s3" if u.scheme in ("s3a", "s3n") else u.scheme
            return scheme, u.netloc, u.path.rstrip("/")

        (scheme, netloc, path), (w_scheme, w_netloc, w_path) = map(
            parts, (location, self.warehouse)
        )
        return (scheme, netloc) == (w_scheme, w_netloc) and (
            path == w_path or path.startswith(w_path + "/")
        )

    @property
    def catalog_type(self) -> str:
        """``rest`` for an Iceberg REST catalog (an ``http(s)://`` URI), else ``jdbc``."""
        return _catalog_type(self.catalog_uri)

    @property
    def is_rest(self) -> bool:
        """Whether the catalog is an Iceberg REST catalog (the workarounds for the JDBC
        catalog's tables and SQLite's WAL do not apply to it)."""
        return self.catalog_type == "rest"

    @property
    def secrets(self) -> list[str]:
        """The lake's secrets as resolved, for log redaction: the JDBC password, the OAuth2
        client secret (and the whole ``client_id:client_secret``), the bearer token and the S3
        secret access key (and session token)."""
        found = [self.catalog_password, self.catalog_token, self.catalog_credential,
                 *self.s3.secrets]
        if self.catalog_credential and ":" in self.catalog_credential:
            found.append(self.catalog_credential.split(":", 1)[1])
        return [value for value in found if value]

    @property
    def identifiers(self) -> list[str]:
        """The lake's credential identifiers (the S3 access key id), for log redaction as whole
        words only (:attr:`S3Settings.identifiers`)."""
        return self.s3.identifiers

    @property
    def is_sqlite(self) -> bool:
        """Whether the catalog lives in an embedded SQLite file."""
        return self.catalog_uri.startswith("jdbc:sqlite:")

    @property
    def sqlite_path(self) -> Path:
        """Path of the SQLite catalog file (only meaningful when :attr:`is_sqlite`)."""
        return Path(self.catalog_uri.removeprefix("jdbc:sqlite:"))

    @property
    def warehouse_path(self) -> Path | None:
        """Local filesystem path of the warehouse, or None when it is not a ``file:`` URI."""
        parts = urlsplit(self.warehouse)
        return Path(parts.path) if parts.scheme == "file" else None

    @property
    def on_object_store(self) -> bool:
        """Whether the warehouse is on S3-compatible object storage (``s3://``), reached with
        :attr:`s3`."""
        return is_object_store(self.warehouse)

    @property
    def spark_jars(self) -> list[Path]:
        """Every jar Spark needs on ``spark.jars`` (:data:`SPARK_JARS`) in :attr:`jars_dir`,
        driver and executors alike."""
        return [self.jars_dir / jar.file_name for jar in SPARK_JARS]

    def sqlalchemy_uri(self) -> str:
        """The same catalog as a SQLAlchemy URL for pyiceberg's ``SqlCatalog``."""
        if self.is_sqlite:
            return f"sqlite:///{self.sqlite_path}"
        if self.catalog_uri.startswith("jdbc:postgresql://"):
            rest = self.catalog_uri.removeprefix("jdbc:postgresql://")
            auth = ""
            if self.catalog_user:
                auth = quote(self.catalog_user, safe="")
                if self.catalog_password:
                    auth += ":" + quote(self.catalog_password, safe="")
                auth += "@"
            return f"postgresql+psycopg://{auth}{rest}"
        raise ConfigError(
            f"the catalog {self.catalog_uri!r} is not a JDBC catalog (jdbc:sqlite: or "
            "jdbc:postgresql:)"
        )

    def dbt_env(self) -> dict[str, str]:
        """Environment ``profiles.yml`` reads (it only uses ``env_var()``), for this target: the
        profile's defaults apply to what is left out."""
        env = {
            "LAKESYNC_DATA_DIR": str(self.data_dir),
            "LAKESYNC_SPARK_MASTER": self.spark_master,
            "LAKESYNC_SPARK_JARS": ",".join(str(p) for p in self.spark_jars),
            "LAKESYNC_CATALOG_URI": self.catalog_uri,
            "LAKESYNC_CATALOG_TYPE": self.catalog_type,
            "LAKESYNC_WAREHOUSE": self.warehouse,
            "PYSPARK_PYTHON": sys.executable,
            # Iceberg maintenance (macros/maintenance.sql), in whole seconds.
            "LAKESYNC_SNAPSHOT_RETENTION": str(int(self.snapshot_retention_s)),
            "LAKESYNC_SNAPSHOT_RETAIN_LAST": str(self.snapshot_retain_last),
            "LAKESYNC_ORPHAN_FILE_AGE": str(int(self.orphan_file_age_s)),
        }
        if self.catalog_user:
            env["LAKESYNC_CATALOG_USER"] = self.catalog_user
        if self.catalog_password:
            env["LAKESYNC_CATALOG_PASSWORD"] = self.catalog_password
        if self.catalog_warehouse:
            env["LAKESYNC_CATALOG_WAREHOUSE"] = self.catalog_warehouse
        if self.catalog_credential:
            env["LAKESYNC_CATALOG_CREDENTIAL"] = self.catalog_credential
        if self.catalog_token:
            env["LAKESYNC_CATALOG_TOKEN"] = self.catalog_token
        if self.spark_cores_max:
            env["LAKESYNC_SPARK_CORES_MAX"] = str(self.spark_cores_max)
        if self.spark_executor_memory:
            env["LAKESYNC_SPARK_EXECUTOR_MEMORY"] = self.spark_executor_memory
        if self.on_object_store:
            env.update(spark_s3_env(self.s3))
        env["LAKESYNC_SHUFFLE_PARTITIONS"] = str(self.shuffle_partitions)
        # Keep Spark's own (unused) warehouse dir out of the working directory.
        env["LAKESYNC_SPARK_WAREHOUSE_DIR"] = (self.data_dir / "spark-warehouse").as_uri()
        return env

    @property
    def dbt_dir(self) -> Path:
        """dbt's working files for this data dir: generated models, target/, logs/."""
        return self.data_dir / "dbt"

    @property
    def spark_log(self) -> Path:
        """Where the Spark driver's own log lines go (see ``lakesync.lakehouse.spark``)."""
        return self.data_dir / "spark.log"

    @property
    def dbt_run_project_dir(self) -> Path:
        """The per-data-dir dbt project: links to the repository's project plus generated models."""
        return self.dbt_dir / "project"

    def spark_conf(self) -> dict[str, str]:
        """Spark settings (Iceberg JDBC catalog ``lake`` as the default catalog).

        One source: the ``server_side_parameters`` of the shipped ``profiles.yml``, which a
        plain ``dbt build`` reads too, rendered here with :meth:`dbt_env`; a value that renders
        empty (credentials not set) is left out. Then the driver's address and ports
        (:meth:`driver_conf`).
        """
        profile = profile_spark_conf(self.dbt_project_dir / "profiles.yml", self.dbt_env())
        return {**profile, **self.driver_conf()}

    def driver_conf(self) -> dict[str, str]:
        """The driver's advertised host and fixed ports (``lake.spark_driver_host``,
        ``spark_driver_port``, ``spark_block_manager_port``), each only when set: a cluster's
        executors connect back to them. Not in ``profiles.yml``: dbt-spark passes a value that
        renders empty on to Spark, and an empty ``spark.driver.host`` breaks the session."""
        conf = {}
        if self.spark_driver_host:
            conf["spark.driver.host"] = self.spark_driver_host
        if self.spark_driver_port:
            conf["spark.driver.port"] = str(self.spark_driver_port)
        if self.spark_block_manager_port:
            conf["spark.blockManager.port"] = str(self.spark_block_manager_port)
        return conf


def _catalog_type(uri: str) -> str:
    """``rest`` or ``jdbc`` for a catalog URI; a :class:`ConfigError` for anything else."""
    if uri.startswith(("http://", "https://")):
        return "rest"
    if uri.startswith(("jdbc:sqlite:", "jdbc:postgresql://")):
        return "jdbc"
    raise ConfigError(
        f"lake.catalog_uri {uri!r} is not supported: jdbc:sqlite:..., jdbc:postgresql://... "
        "(a JDBC catalog) or http(s)://... (an Iceberg REST catalog)"
    )


def profile_spark_conf(profile: Path, env: Mapping[str, str]) -> dict[str, str]:
    """The Spark settings of ``profile`` (a dbt ``profiles.yml``: its target's
    ``server_side_parameters``), each value rendered as dbt renders it, ``env_var()`` reading
    ``env``; values that render empty are left out."""
    # optional (extra "pipeline")
    import jinja2  # noqa: PLC0415

    try:
        doc = yaml.safe_load(profile.read_text(encoding="utf-8"))
        target = doc["lakesync"]["outputs"][doc["lakesync"]["target"]]
        params = dict(target["server_side_parameters"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"cannot read the Spark settings (lakesync target's server_side_parameters) from "
            f"{profile}: {exc!r}; restore the shipped profiles.yml"
        ) from None

    def env_var(name: str, default: str | None = None) -> str:
        value = env.get(name, default)
        if value is None:
            raise ConfigError(f"{profile} reads {name}, which is not set")
        return value

    jinja = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    conf = {str(k): jinja.from_string(str(v)).render(env_var=env_var) for k, v in params.items()}
    return {k: v for k, v in conf.items() if v}


def config_redactor(config: Config, env: Mapping[str, str] | None = None) -> Redactor:
    """The redaction of every output of a process that runs ``config``: it masks the JWT
    secrets, the lake's secrets and credential identifiers, and what the ``${…}`` references
    of the declared destinations and connectors resolve to in ``env`` (default
    ``os.environ``) and the secrets files. Lake settings that do not resolve leave the lake's
    out (the process that needs them fails saying why)."""
    env = os.environ if env is None else env

    def read(path: str) -> str:
        return Path(path).read_text(encoding="utf-8")

    known = [*config.jwt_secrets,
             *declared_secrets(config.destinations.values(), config.connectors.values(), env,
                               read)]
    try:
        lake = LakeSettings.from_config(config, env=env)
    except ConfigError:
        return Redactor(known)
    return Redactor([*known, *lake.secrets], lake.identifiers)
