"""Plain one-line results on stderr: one per file, and a final summary for many files.

Contract: :func:`file_line` and :func:`run_summary` return plain strings (no markup), so
they read the same in a terminal, in CI logs and in pre-commit's output; :func:`emit` prints
them on the stderr console with an optional colour for the status word.
"""

from __future__ import annotations

from typing import Any

from adapld_cli.engine.types import Stats
from adapld_cli.ui.panel import speedup_of

STATUS_STYLES = {
    "edited": "green",
    "written": "green",
    "would change": "yellow",
    "unchanged": "dim",
    "refused": "red",
    "error": "red",
    "interrupted": "red",
}


_SUMMARY_ORDER = (
    "edited",
    "written",
    "changed",
    "would change",
    "unchanged",
    "refused",
    "error",
    "interrupted",
)


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
    status: str,
    *,
    detail: str = "",
    stats: Stats | None = None,
    baseline_tok_s: float | None = None,
) -> str:
    """``name: status — detail · stats``."""
    line = f"{name}: {status}"
    if detail:
        line += f" — {detail}"
    extra = stats_text(stats, baseline_tok_s) if stats is not None else ""
    if extra:
        line += f" · {extra}"
    return line


def run_summary(counts: dict[str, int], exit_code: int) -> str:
    """``adapld: 3 files: 1 edited, 1 unchanged, 2 errors (exit 2)``."""
    total = sum(counts.values())
    order = [s for s in _SUMMARY_ORDER if s in counts] + [
        s for s in counts if s not in _SUMMARY_ORDER
    ]
    parts = ", ".join(
        f"{counts[s]} {s}{'s' if s == 'error' and counts[s] != 1 else ''}"
        for s in order
        if counts[s]
    )
    return f"adapld: {total} file{'s' if total != 1 else ''}: {parts} (exit {exit_code})"


def emit(console: Any, line: str, status: str | None = None) -> None:
    """Print ``line`` on the stderr console, colouring the status word when allowed."""
    from rich.text import Text

    text = Text(line)
    if status and status in STATUS_STYLES:
        start = line.find(f": {status}")
        if start >= 0:
            text.stylize(STATUS_STYLES[status], start + 2, start + 2 + len(status))
    console.print(text, soft_wrap=True)
