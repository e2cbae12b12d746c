"""The shared-lists example, run as a user would against a real gateway process: a membership
row shares a list's todos, its removal takes them away."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples.test_first_hour import EXAMPLES, _run
from tests.gateway_process import ServerProcess

pytestmark = [pytest.mark.slow]


def test_a_membership_shares_a_list_and_its_removal_unshares_it(tmp_path: Path) -> None:
    config = EXAMPLES / "shared_lists" / "lakesync.yaml"
    with ServerProcess(tmp_path / "gw", config=config) as gw:
        seen = _run(EXAMPLES / "shared_lists" / "app.py",
                    {"LAKESYNC_URL": gw.url, "LAKESYNC_JWT_SECRET": gw.secret,
                     "LISTS_DIR": str(tmp_path)})
    both = [{"row_id": "groceries:bread", "title": "Bread"},
            {"row_id": "groceries:milk", "title": "Milk"}]
    assert seen == {
        "bob before": [],
        "bob shared": [{"row_id": "groceries:milk", "title": "Milk"}],
        "alice": both,
        "bob after": [],
    }
