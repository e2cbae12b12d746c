"""``python -m cli``: the ``lakesync`` command."""

from cli.main import run

run()
