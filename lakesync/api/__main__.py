"""``python -m lakesync.api [--host --port --data-dir --config]``: the gateway alone, the same
command as ``lakesync up``, with the CLI's error handling (an expected failure, such as a
mistake in ``lakesync.yaml``, is one ``error:`` line and exit 2, not a traceback)."""

import sys

from lakesync.cli.main import main

sys.exit(main(["up", *sys.argv[1:]]))
