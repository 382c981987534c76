"""Plain one-line results on stderr: one per file, and a final summary for many files.

Contract: :func:`file_line` returns a plain string (no markup), so it reads the same in a
terminal, in CI logs and in pre-commit's output; :func:`emit` prints such lines on the stderr
console with an optional colour for the status word (a
:class:`~adapld_cli.edit.outcome.Status`). The run's summary line comes from
:meth:`adapld_cli.edit.outcome.RunReport.summary_line`.
"""

from __future__ import annotations

from typing import Any

from adapld_cli.edit.outcome import Status
from adapld_cli.engine.types import Stats
from adapld_cli.ui.panel import speedup_of

STATUS_STYLES = {
    Status.EDITED: "green",
    Status.WRITTEN: "green",
    Status.WOULD_CHANGE: "yellow",
    Status.UNCHANGED: "dim",
    Status.REFUSED: "red",
    Status.ERROR: "red",
    Status.INTERRUPTED: "red",
}


def stats_text(stats: Stats, baseline_tok_s: float | None = None) -> str:
    if not stats.new_tokens and not stats.forward_passes:
        return ""
    text = (
        f"{stats.new_tokens} tokens in {stats.forward_passes} passes "
        f"(T={stats.mean_accepted:.2f}), {stats.total_s:.1f}s, {stats.decode_tok_s:.1f} tok/s"
    )
    speed, label = speedup_of(stats, baseline_tok_s)
    if speed > 0 and label:
        text += f", {speed:.1f}x ({label})"
    return text


def file_line(
    name: str,
    status: Status | str,
    *,
    detail: str = "",
    stats: Stats | None = None,
    baseline_tok_s: float | None = None,
    attempts: int = 1,
) -> str:
    """``name: status — detail · stats``; ``status after N attempts`` when the result took
    more than one generation (``--attempts``)."""
    line = f"{name}: {status!s}"
    if attempts > 1:
        line += f" after {attempts} attempts"
    if detail:
        line += f" — {detail}"
    extra = stats_text(stats, baseline_tok_s) if stats is not None else ""
    if extra:
        line += f" · {extra}"
    return line


def emit(console: Any, line: str, status: Status | None = None) -> None:
    """Print ``line`` on the stderr console, colouring the status word when allowed."""
    from rich.text import Text

    text = Text(line)
    style = STATUS_STYLES.get(status) if status is not None else None
    if style and status is not None:
        start = line.find(f": {status.value}")
        if start >= 0:
            text.stylize(style, start + 2, start + 2 + len(status.value))
    console.print(text, soft_wrap=True)
