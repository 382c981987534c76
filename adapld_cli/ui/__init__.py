"""Terminal output of adapld, all on stderr: the live panel and plain result lines.

Public API::

    from adapld_cli.ui import stderr_console, live_wanted, plain_output
    from adapld_cli.ui import LivePanel, file_line, run_summary, emit

The UI consumes engine :class:`~adapld_cli.engine.types.StepEvent` objects and edit results;
it never touches files and never writes to stdout.
"""

from adapld_cli.ui.console import live_wanted, plain_output, stderr_console
from adapld_cli.ui.panel import LivePanel, footer_text, speedup_of
from adapld_cli.ui.summary import emit, file_line, run_summary, stats_text

__all__ = [
    "LivePanel",
    "emit",
    "file_line",
    "footer_text",
    "live_wanted",
    "plain_output",
    "run_summary",
    "speedup_of",
    "stats_text",
    "stderr_console",
]
