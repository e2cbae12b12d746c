"""The lakehouse side of LakeSync: Iceberg landing table, dbt models on Spark, queries.

Data flow: gateway hot log → :class:`~lakesync.lakehouse.landing.LandingFlusher` → Iceberg table
``lake.lakesync.landing`` → dbt (``models/``) on Spark → ``analytics.<table>`` current-state tables,
readable offline through DuckDB (:mod:`lakesync.lakehouse.query`). Heavy dependencies (pyspark, dbt,
pyiceberg, duckdb) are imported lazily by the modules that need them.
"""
