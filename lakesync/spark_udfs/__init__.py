"""Spark SQL functions for the lake (:func:`register_udfs`): decode raw landing cells and HLCs in
Spark SQL, with the pure decoders of :mod:`lakesync.cells` (which ``lakesync.spark_udfs.decode``
still re-exports under its old name)."""

from lakesync.spark_udfs.functions import FUNCTIONS, register_udfs

__all__ = ["FUNCTIONS", "register_udfs"]
