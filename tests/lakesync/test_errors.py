"""Stack traces out of the one-line errors: what failed stays, the frames go."""

from __future__ import annotations

import traceback

from lakesync.errors import without_traces

SPARK = """Runtime Error in model analytics__t (generated/analytics/analytics__t.sql)
  An error occurred while calling o60.sql.
  : java.lang.IllegalArgumentException: Bucket cannot be empty
  \tat software.amazon.awssdk.utils.Validate.paramNotBlank(Validate.java:156)
  \tat org.apache.iceberg.aws.s3.S3URI.<init>(S3URI.java:83)
  \t... 45 more
  Caused by: java.io.IOException: boom
  \tat a.b.C.d(C.java:1)"""

PYSPARK = """[CANNOT_SAFELY_CAST] Cannot write `b`: cannot cast "STRING" to "BINARY".
JVM stacktrace:
org.apache.spark.sql.AnalysisException: [CANNOT_SAFELY_CAST] Cannot write `b`
\tat org.apache.spark.sql.errors.QueryCompilationErrors$.cannotSafelyCast(X.scala:1)"""


def test_java_frames_go_and_the_exception_lines_stay() -> None:
    assert without_traces(SPARK).splitlines() == [
        "Runtime Error in model analytics__t (generated/analytics/analytics__t.sql)",
        "  An error occurred while calling o60.sql.",
        "  : java.lang.IllegalArgumentException: Bucket cannot be empty",
        "  Caused by: java.io.IOException: boom",
    ]
    assert without_traces(PYSPARK) == (
        '[CANNOT_SAFELY_CAST] Cannot write `b`: cannot cast "STRING" to "BINARY".'
    )


def test_a_python_traceback_leaves_its_exception_line() -> None:
    try:
        {}["key"]
    except KeyError:
        text = "lookup failed\n" + traceback.format_exc()
    assert without_traces(text) == "lookup failed\nKeyError: 'key'"
    assert without_traces("one line") == "one line"
