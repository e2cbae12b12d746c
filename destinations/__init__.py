"""Destinations: the databases synced tables are materialised into (SPEC §11).

Pure statement building lives in :mod:`destinations.statements` (sqlglot ASTs per dialect); the
adapters behind :class:`destinations.base.Destination` are the I/O edges: PostgreSQL and
MySQL/MariaDB (:mod:`destinations.sql`), BigQuery (:mod:`destinations.bigquery`) and the lake's
own Iceberg catalog (:mod:`destinations.lake`), opened from a ``destinations:`` declaration by
:func:`destinations.factory.open_destination`; composite and fan-out destinations
(:mod:`destinations.routing`, failures counted in :mod:`destinations.metrics`) are built from a
declaration's ``routes`` and ``secondaries`` by :func:`destinations.routing.open_declared`.
"""
