"""The terminal side of a run: result lines and messages on stderr, data on stdout.

Contract: :class:`ConsoleView` implements :class:`adapld_cli.edit.run.View`. ``--quiet`` keeps
only errors, refusals and interruptions; ``--verbose`` adds details. A result line carries the
decoding statistics only when the file was not refused, failed or interrupted (those lines
end with their reason: ``inv.py: refused — ...; nothing written (--force writes it
anyway)``). Data (an edited file, a diff) is written to stdout as bytes, untouched.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from typing import Any

from adapld_cli.edit.outcome import Outcome, RunReport, Status
from adapld_cli.ui.console import live_wanted, plain_output
from adapld_cli.ui.panel import live_view
from adapld_cli.ui.summary import emit, file_line

_ALWAYS_SHOWN = (Status.REFUSED, Status.INTERRUPTED)
_NO_STATS = (Status.REFUSED, Status.ERROR, Status.INTERRUPTED)  # the line ends with the reason


class ConsoleView:
    """Shows a run on the stderr console (see the module contract)."""

    def __init__(
        self, console: Any, *, quiet: bool = False, verbose: bool = False, live: bool = True
    ) -> None:
        self.console = console
        self.quiet = quiet
        self.verbose = verbose
        self.live = live

    def progress(self) -> bool | None:
        """The model loader's progress bar: off when quiet or plain, else automatic."""
        return False if self.quiet or plain_output() else None

    def note(self, message: str) -> None:
        if not self.quiet:
            emit(self.console, message)

    def info(self, message: str) -> None:
        if self.verbose and not self.quiet:
            emit(self.console, f"adapld: {message}")

    def error(self, message: str) -> None:
        emit(self.console, f"adapld: error: {message}", Status.ERROR)

    def data(self, data: bytes) -> None:
        write_stdout(data)

    def outcome(self, outcome: Outcome, baseline_tok_s: float | None = None) -> None:
        if self.quiet and outcome.exit_code < 2 and outcome.status not in _ALWAYS_SHOWN:
            return
        line = file_line(
            outcome.name,
            outcome.status,
            detail=outcome.detail,
            stats=None if outcome.status in _NO_STATS else outcome.stats,
            baseline_tok_s=baseline_tok_s,
            attempts=outcome.attempts,
        )
        emit(self.console, line, outcome.status)

    def summary(self, report: RunReport) -> None:
        """The closing line of a run over several files."""
        if report.inputs > 1 and not self.quiet:
            emit(self.console, report.summary_line())

    def generating(
        self,
        name: str,
        tokenizer: Any,
        method: str,
        *,
        baseline_tok_s: float | None = None,
        transient: bool = True,
    ) -> AbstractContextManager[Any]:
        """The live panel for one generation, when wanted (else nothing is drawn)."""
        return live_view(
            self.console,
            tokenizer,
            title=f"{name} · {method}",
            enabled=live_wanted(self.console, no_live=not self.live, quiet=self.quiet),
            baseline_tok_s=baseline_tok_s,
            transient=transient,
        )


def write_stdout(data: bytes) -> None:
    """Write ``data`` to stdout as bytes (decoded only for a text-only stream)."""
    if not data:
        return
    out = getattr(sys.stdout, "buffer", None)
    if out is not None:
        sys.stdout.flush()
        out.write(data)
        out.flush()
    else:  # a text-only stream (some test harnesses)
        sys.stdout.write(data.decode("utf-8", "surrogateescape"))
        sys.stdout.flush()
