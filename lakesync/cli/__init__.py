"""The ``lakesync`` command-line tool: gateway, lake pipeline, queries and the demo.

The protocol itself lives in :mod:`lakesync` (pure); this package is the edge that reads files,
starts servers and prints. The command is :func:`lakesync.cli.main.run`; ``python -m lakesync.cli``
runs it too.
"""
