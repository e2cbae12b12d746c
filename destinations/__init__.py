"""Destinations: the databases synced tables are materialised into (SPEC §11).

Pure statement building lives in :mod:`destinations.statements` (sqlglot ASTs per dialect); the
adapters behind :class:`destinations.base.Destination` are the I/O edges: PostgreSQL and
MySQL/MariaDB (:mod:`destinations.sql`), BigQuery (:mod:`destinations.bigquery`), opened from a
``destinations:`` declaration by :func:`destinations.factory.open_destination`.
"""
