"""``python -m lakesync.cli``: the ``lakesync`` command."""

from lakesync.cli.main import run

run()
