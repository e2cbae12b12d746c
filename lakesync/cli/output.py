"""Tables on stdout: laid out by rich in a terminal, printed whole anywhere else.

Rich fits a table to the terminal's width, and to 80 columns when stdout is a pipe or a file,
shortening cells with an ellipsis (``1176793…``): a value copied from a piped ``lakesync
query`` would be wrong. Off a terminal every table is printed at the width its widest cells
need, so nothing is ever cut.
"""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

__all__ = ["print_table"]

_UNBOUNDED = 1_000_000


def print_table(table: Table, console: Console | None = None) -> None:
    """Print ``table`` on ``console`` (default: stdout): as rich lays it out in a terminal,
    else whole, at the width its cells need (never cut, never wrapped)."""
    console = console or Console()
    if console.is_terminal:
        console.print(table)
        return
    needed = Measurement.get(console, console.options.update_width(_UNBOUNDED), table).maximum
    whole = Console(
        file=console.file, width=max(needed, console.width), highlight=False, color_system=None
    )
    whole.print(table)
