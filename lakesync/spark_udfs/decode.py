"""The pure cell decoders, now in the core (:mod:`lakesync.cells`): this module keeps their old
import path working."""

from lakesync.cells import (
    MAX_TIMESTAMP_MS,
    decoder,
    hlc_to_timestamp,
    json_to_boolean,
    json_to_bytes,
    json_to_date,
    json_to_decimal,
    json_to_double,
    json_to_integer,
    json_to_json_text,
    json_to_string,
    json_to_timestamp,
)

__all__ = [
    "MAX_TIMESTAMP_MS",
    "decoder",
    "hlc_to_timestamp",
    "json_to_boolean",
    "json_to_bytes",
    "json_to_date",
    "json_to_decimal",
    "json_to_double",
    "json_to_integer",
    "json_to_json_text",
    "json_to_string",
    "json_to_timestamp",
]
