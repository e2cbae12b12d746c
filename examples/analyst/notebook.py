# %% [markdown]
# # The todos, from the lake: a notebook
#
# Cells (`# %%`) run in Jupyter, VS Code or as a plain script: `python
# examples/analyst/notebook.py`. Every read goes through `lakesync query` (DuckDB over the
# lake's Iceberg tables, no Spark): the change log `lakesync.landing`, and with `--fresh` the
# current state including the changes the pipeline has not merged yet. `LAKESYNC_DATA_DIR` (or
# `--data-dir`) names the gateway's data dir; the gateway may be running. Prints the answers as
# JSON at the end.

# %%
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

DATA_DIR = os.environ.get("LAKESYNC_DATA_DIR", ".lakesync")
GATEWAY = os.environ.get("LAKESYNC_GATEWAY", "todos_app")


def query(sql: str, *, fresh: bool = False) -> list[dict[str, Any]]:
    """Rows of ``lakesync query --format json`` (``fresh``: with what is not merged yet)."""
    command = [sys.executable, "-m", "lakesync.cli.main", "query", "--format", "json",
               "--data-dir", DATA_DIR, *(["--fresh"] if fresh else []), sql]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip())
    return [json.loads(line) for line in done.stdout.splitlines() if line]


# %% [markdown]
# ## Who changed what: the change log
# One row per accepted change, with its writer and its clock (`hlc`), whatever the rules showed.

# %%
activity = query(f"""
    select client_id, op, count(*) as changes
    from lakesync.landing
    where gateway_id = '{GATEWAY}' and table_name = 'todos'
    group by client_id, op
    order by client_id, op
""")
activity  # noqa: B018 - a notebook cell shows its last expression

# %% [markdown]
# ## The todos now
# `--fresh`: the merged state (column-level last-writer-wins) including changes the pipeline
# has not merged yet, seconds after they were made.

# %%
todos = query(f"""
    select owner, count(*) as todos, count(*) filter (where done) as done
    from analytics.todos
    where gateway_id = '{GATEWAY}'
    group by owner
    order by owner
""", fresh=True)
todos  # noqa: B018 - a notebook cell shows its last expression

# %%
if __name__ == "__main__":
    json.dump({"activity": activity, "todos": todos}, sys.stdout, indent=1)
    sys.stdout.write("\n")
