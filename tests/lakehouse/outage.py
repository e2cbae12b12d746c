"""What the outage tests do to a real gateway process and read back from its lake: push deltas
(acknowledged or the test fails) and count how many times each deltaId landed."""

from __future__ import annotations

from collections import Counter

import httpx

from lakesync.lakehouse.catalog import LANDING_IDENTIFIER, open_catalog
from lakesync.lakehouse.settings import LakeSettings
from tests.api.helpers import auth, delta, token
from tests.gateway_process import ServerProcess
from tests.wire_json import as_json

__all__ = ["landed", "push"]


def push(gw: ServerProcess, client: str, n: int, start: int = 0) -> list[str]:
    """Push ``n`` deltas of ``client`` to gateway ``gw1`` in batches of 10; the deltaIds
    acknowledged."""
    acked: list[str] = []
    with httpx.Client(base_url=gw.url, timeout=30, headers=auth(token(client))) as http:
        for first in range(start, start + n, 10):
            batch = [delta("INSERT", f"{client}-{i}", client, v=i)
                     for i in range(first, min(first + 10, start + n))]
            r = http.post("/v1/sync/gw1/push",
                          json={"clientId": client, "deltas": [as_json(d) for d in batch]})
            assert r.status_code == 200, r.text
            acked += [d.delta_id for d in batch]
    return acked


def landed(settings: LakeSettings) -> Counter[str]:
    """How many times each deltaId is in the landing table (none before it exists)."""
    # heavy, optional (extra "pipeline")
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = open_catalog(settings).load_table(LANDING_IDENTIFIER)
    except NoSuchTableError:
        return Counter()
    return Counter(table.scan(selected_fields=("delta_id",)).to_arrow()["delta_id"].to_pylist())
