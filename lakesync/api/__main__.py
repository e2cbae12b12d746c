"""``python -m lakesync.api [--host --port --data-dir --config]``: the gateway without the lakesync CLI."""

import typer

from lakesync.api.cli import up

typer.run(up)
