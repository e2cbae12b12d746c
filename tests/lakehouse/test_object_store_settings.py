"""An ``s3://`` warehouse's settings as each engine takes them: pyiceberg FileIO properties,
Spark's Iceberg catalog (S3FileIO), a DuckDB secret; credentials resolved from references and
never in a repr or an error (also when the S3 server refuses them: pyiceberg and DuckDB against
the local S3 server, no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakesync.errors import ConfigError
from lakesync.lakehouse.bootstrap import bootstrap
from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog
from lakesync.lakehouse.object_store import (
    S3Settings,
    duckdb_s3_secret,
    object_store_failure,
    pyiceberg_s3_properties,
    warehouse_full,
)
from lakesync.lakehouse.query import run_query
from lakesync.lakehouse.settings import LakeSettings
from tests.conftest import fresh_s3_bucket, s3_lake_env

ENV = {
    "LAKESYNC_WAREHOUSE": "s3://bucket/lake",
    "LAKESYNC_S3_ENDPOINT": "http://127.0.0.1:9000",
    "LAKESYNC_S3_REGION": "eu-west-3",
    "LAKESYNC_S3_PATH_STYLE": "true",
    "LAKESYNC_S3_ACCESS_KEY_ID": "${MY_KEY}",
    "LAKESYNC_S3_SECRET_ACCESS_KEY": "${MY_SECRET}",
    "MY_KEY": "AKIDEXAMPLE",
    "MY_SECRET": "wJalr/secret'quote",
}


def test_every_engine_gets_the_same_s3_settings(tmp_path: Path) -> None:
    s = LakeSettings.from_env(tmp_path, env=ENV)
    assert s.on_object_store and s.warehouse == "s3://bucket/lake"
    assert s.s3 == S3Settings("http://127.0.0.1:9000", "eu-west-3", True, "AKIDEXAMPLE",
                              "wJalr/secret'quote")
    assert pyiceberg_s3_properties(s.s3) == {
        "s3.endpoint": "http://127.0.0.1:9000", "s3.region": "eu-west-3",
        "s3.access-key-id": "AKIDEXAMPLE", "s3.secret-access-key": "wJalr/secret'quote",
        "s3.force-virtual-addressing": "false",
    }
    conf = s.spark_conf()
    assert conf.items() >= {
        "spark.sql.catalog.lake.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "spark.sql.catalog.lake.s3.endpoint": "http://127.0.0.1:9000",
        "spark.sql.catalog.lake.s3.path-style-access": "true",
        "spark.sql.catalog.lake.client.region": "eu-west-3",
        "spark.sql.catalog.lake.s3.access-key-id": "AKIDEXAMPLE",
        "spark.sql.catalog.lake.s3.secret-access-key": "wJalr/secret'quote",
        "spark.sql.catalog.lake.warehouse": "s3://bucket/lake",
    }.items()
    assert duckdb_s3_secret(s.s3, s.warehouse) == (
        "CREATE OR REPLACE SECRET lake_s3 (TYPE s3, SCOPE 's3://bucket/lake', PROVIDER config, "
        "KEY_ID 'AKIDEXAMPLE', SECRET 'wJalr/secret''quote', REGION 'eu-west-3', "
        "ENDPOINT '127.0.0.1:9000', USE_SSL false, URL_STYLE 'path')"
    )


def test_credentials_stay_out_of_reprs(tmp_path: Path) -> None:
    s = LakeSettings.from_env(tmp_path, env=ENV)
    assert "AKIDEXAMPLE" not in repr(s) and "wJalr" not in repr(s)
    assert s.s3.secrets == ["wJalr/secret'quote"]
    assert s.s3.identifiers == s.identifiers == ["AKIDEXAMPLE"]


def test_unset_keys_are_left_to_the_aws_chain(tmp_path: Path) -> None:
    s = LakeSettings.from_env(tmp_path, env={"LAKESYNC_WAREHOUSE": "s3://bucket"})
    assert s.s3 == S3Settings()
    assert pyiceberg_s3_properties(s.s3) == {"s3.force-virtual-addressing": "true"}
    conf = s.spark_conf()
    assert conf["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert not any(".s3.access" in k or ".s3.secret" in k or "region" in k for k in conf)
    assert duckdb_s3_secret(s.s3, s.warehouse) == (
        "CREATE OR REPLACE SECRET lake_s3 (TYPE s3, SCOPE 's3://bucket', "
        "PROVIDER credential_chain, URL_STYLE 'vhost')"
    )


def test_a_local_warehouse_gets_no_s3_settings(tmp_path: Path) -> None:
    s = LakeSettings.from_env(tmp_path, env={"LAKESYNC_S3_ENDPOINT": "http://127.0.0.1:9000"})
    assert not s.on_object_store
    conf = s.spark_conf()
    # Iceberg's own default FileIO, spelled out (dbt-spark would pass an empty value on).
    assert conf["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.hadoop.HadoopFileIO"
    assert not any(k.startswith("spark.sql.catalog.lake.s3.") and k != (
        "spark.sql.catalog.lake.s3.path-style-access") for k in conf)


def test_a_secrets_file_holds_the_secret(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("from-file\n")
    s = LakeSettings.from_env(tmp_path, env={
        "LAKESYNC_WAREHOUSE": "s3://b/p",
        "LAKESYNC_S3_SECRET_ACCESS_KEY": f"${{file:{tmp_path / 'secret'}}}",
    })
    assert s.s3.secret_access_key == "from-file"


@pytest.mark.parametrize(("env", "message"), [
    ({"LAKESYNC_S3_SECRET_ACCESS_KEY": "${NOT_SET}"},
     "lake.s3_secret_access_key: environment variable NOT_SET is not set"),
    ({"LAKESYNC_S3_ENDPOINT": "127.0.0.1:9000"}, "lake.s3_endpoint must be an http:// or https://"),
    ({"LAKESYNC_WAREHOUSE": "s3:///prefix"}, "names no bucket"),
])
def test_bad_s3_settings_name_the_key_never_a_value(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        LakeSettings.from_env(tmp_path, env={"LAKESYNC_WAREHOUSE": "s3://b", **env})
    assert message in err.value.message


WRONG = "wrong-secret-0123456789"


def test_refused_credentials_are_named_nowhere(tmp_path: Path) -> None:
    env = s3_lake_env(fresh_s3_bucket())
    good = bootstrap(LakeSettings.from_env(tmp_path, env=env))
    assert open_catalog(good).load_table(LANDING_IDENTIFIER).metadata_location.startswith(
        env["LAKESYNC_WAREHOUSE"])
    assert run_query(good, "select count(*) from landing").rows == [(0,)]

    bad = LakeSettings.from_env(tmp_path, env={**env, "LAKESYNC_S3_SECRET_ACCESS_KEY": WRONG})
    # pyiceberg writes a table's metadata through the warehouse's FileIO: refused.
    with pytest.raises(Exception) as write:
        open_catalog(bad).create_table("lakesync.refused", schema=open_catalog(
            good).load_table(LANDING_IDENTIFIER).schema())
    # A query loads the landing table's metadata from the warehouse: refused.
    with pytest.raises(Exception) as read:
        run_query(bad, "select count(*) from landing")
    for err in (write.value, read.value):
        assert "ACCESS_DENIED" in str(err)
        assert WRONG not in str(err) and WRONG not in repr(err)
    assert WRONG not in repr(bad)


JAVA_TRACE = (
    "Job aborted due to stage failure: java.io.UncheckedIOException: Failed to close writer\n"
    "\tat org.apache.iceberg.io.RollingFileWriter.close(RollingFileWriter.java:156)\n"
    "Caused by: java.io.IOException: software.amazon.awssdk.core.exception.SdkClientException: "
    "Unable to execute HTTP request: Connect to 127.0.0.1:9000 failed: Connection refused\n"
    "\tat software.amazon.awssdk.core.internal.http.pipeline.stages.RetryableStage.execute\n"
)


@pytest.mark.parametrize(("error", "says", "line"), [
    ("When getting information for key 'lake/x' in bucket 'bucket': AWS Error "
     "NETWORK_CONNECTION during HeadObject operation: curlCode: 7, Could not connect to server",
     "could not be reached", "curlCode: 7"),
    (JAVA_TRACE, "could not be reached", "Connect to 127.0.0.1:9000 failed"),
    ("When initiating multiple part upload for key 'k' in bucket 'b': AWS Error "
     "SIGNATURE_DOES_NOT_MATCH during CreateMultipartUpload operation: The request signature",
     "refused the lake's credentials", "SIGNATURE_DOES_NOT_MATCH"),
    ("software.amazon.awssdk.services.s3.model.S3Exception: Access Denied (Service: S3, "
     "Status Code: 403, Request ID: 1)", "refused the lake's credentials", "Access Denied"),
    ("IO Error: Could not connect to server error for HTTP HEAD to 'http://127.0.0.1:9000/b/k'"
     "\nLINE 1: CREATE VIEW", "could not be reached", "HTTP HEAD to"),
    ("HTTP Error: HTTP GET error reading 'http://127.0.0.1:9000/b/k' in region 'us-east-1' "
     "(HTTP 403 Forbidden)\n\nSignatureDoesNotMatch: The request signature",
     "refused the lake's credentials", "HTTP 403 Forbidden"),
])
def test_a_store_failure_names_the_store_and_what_to_check(
    error: str, says: str, line: str
) -> None:
    failure = object_store_failure(error, "s3://bucket/lake", "http://127.0.0.1:9000")
    assert failure is not None and failure.code == "OBJECT_STORE_ERROR"
    assert says in failure.message and line in failure.message
    assert "s3://bucket/lake at http://127.0.0.1:9000" in failure.message
    assert ("lake.s3_endpoint" if says == "could not be reached" else "lake.s3_secret_access_key") \
        in failure.message
    assert "RollingFileWriter" not in failure.message  # the line that says it, not the trace


@pytest.mark.parametrize(("error", "location"), [
    ("AWS Error NETWORK_CONNECTION during HeadObject", "file:///data/warehouse"),
    ("NotADirectoryError: [Errno 20] Not a directory: '/w/landing/data/gateway_id=gw3'",
     "s3://bucket/lake"),
    ("psycopg.OperationalError: connection refused", "s3://bucket/lake"),
])
def test_other_failures_are_not_the_stores(error: str, location: str) -> None:
    assert object_store_failure(error, location, None) is None


def _raised_from(cause: BaseException) -> RuntimeError:
    try:
        try:
            raise cause
        except OSError as exc:
            raise RuntimeError("the landing commit failed") from exc
    except RuntimeError as wrapped:
        return wrapped


@pytest.mark.parametrize("cause", [
    OSError(28, "No space left on device"),
    OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device"),
    OSError(30, "Read-only file system"),
])
def test_a_full_or_read_only_warehouse_says_so_in_one_line(cause: OSError) -> None:
    failure = warehouse_full(_raised_from(cause), "file:///data/warehouse")
    assert failure is not None and failure.status == 502
    assert failure.code == "OBJECT_STORE_ERROR"
    assert "file:///data/warehouse" in failure.message and "\n" not in failure.message
    assert "free space" in failure.message


def test_other_file_errors_are_not_a_full_warehouse() -> None:
    assert warehouse_full(_raised_from(OSError(2, "No such file or directory")), "/w") is None
