"""Tables on stdout: laid out by rich in a terminal, printed whole anywhere else; and values
printed as the text they are.

Every value the CLI prints that it did not write itself (client ids, table, connector and
destination names, upstream errors, rows) goes through :func:`plain` (or :func:`printable`
where a plain string is printed): rich would read ``[red]`` or ``[link=…]`` in it as markup (and
``[/]`` crashes it), and a terminal would obey an escape sequence in it.

Every error and log line the CLI prints goes through :func:`redacted`: credentials of every
shape masked, and once a command has loaded its configuration (:func:`hide_secrets`), the
secrets that configuration resolves too, wherever they appear (a driver's error may quote a DSN
with its password, or a ``${VAR}``'s value where no pattern would find it).

Rich fits a table to the terminal's width, and to 80 columns when stdout is a pipe or a file,
shortening cells with an ellipsis (``1176793…``): a value copied from a piped ``lakesync
query`` would be wrong. Off a terminal every table is printed at the width its widest cells
need, so nothing is ever cut.
"""

from __future__ import annotations

import logging
import re
import sys

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from lakesync.redaction import Redactor

__all__ = ["hide_secrets", "log_redacted", "plain", "print_table", "printable", "redacted"]

_UNBOUNDED = 1_000_000
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Characters a terminal obeys rather than shows: C0 and C1 controls but tab and newline (ESC
starts escape sequences, CR and backspace overwrite what is shown) and the bidirectional
marks and overrides (they reorder what is shown)."""


_known = [Redactor()]
"""The redaction of this process's output: the last one :func:`hide_secrets` was given."""


def hide_secrets(redactor: Redactor) -> None:
    """From now on, mask with ``redactor`` (the secrets of the configuration the command
    loaded: :func:`lakesync.lakehouse.settings.config_redactor`) in every line
    :func:`redacted` passes."""
    _known[0] = redactor


def redacted(text: str) -> str:
    """``text`` as the CLI may print it: every credential shape masked, and the secrets
    :func:`hide_secrets` made known."""
    return _known[0](text)


class _RedactedStderr(logging.Handler):
    """Log lines on the current ``sys.stderr`` (as Python's last-resort handler writes them,
    in :data:`logging.BASIC_FORMAT`), each through :func:`redacted`."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(logging.BASIC_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(redacted(self.format(record)) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def log_redacted() -> None:
    """Send the process's log lines (the lake's warnings, a driver's errors) to stderr through
    :func:`redacted`; once per process."""
    root = logging.getLogger()
    if not any(isinstance(h, _RedactedStderr) for h in root.handlers):
        root.addHandler(_RedactedStderr())


def printable(value: object) -> str:
    """``value`` as a string whose control characters are shown escaped (``\\x1b``,
    ``\\u202e``), so that printed it is only text; tab and newline stay."""
    return _CONTROLS.sub(lambda m: m[0].encode("unicode_escape").decode(), str(value))


def plain(value: object, style: str = "") -> Text:
    """``value`` as rich text that is only text: its brackets are not markup and its control
    characters are shown escaped (:func:`printable`); ``style`` colours it whole."""
    return Text(printable(value), style=style)


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
