"""Terminal output of adapld, all on stderr: the live panel and plain result lines.

Public API::

    from adapld_cli.ui import stderr_console, live_wanted, plain_output
    from adapld_cli.ui import ConsoleView, LivePanel, live_view, file_line, emit

The UI consumes engine :class:`~adapld_cli.engine.types.StepEvent` objects and edit outcomes;
it never touches files. Only :func:`~adapld_cli.ui.view.write_stdout` writes to stdout (the
data a run produces: an edited file or a diff).
"""

from adapld_cli.ui.console import live_wanted, plain_output, stderr_console
from adapld_cli.ui.panel import LivePanel, footer_text, live_view, speedup_of
from adapld_cli.ui.summary import emit, file_line, stats_text
from adapld_cli.ui.view import ConsoleView, write_stdout

__all__ = [
    "ConsoleView",
    "LivePanel",
    "emit",
    "file_line",
    "footer_text",
    "live_view",
    "live_wanted",
    "plain_output",
    "speedup_of",
    "stats_text",
    "stderr_console",
    "write_stdout",
]
