"""``python -m api [--host --port --data-dir --config]``: the gateway without the lakesync CLI."""

import typer

from api.cli import up

typer.run(up)
