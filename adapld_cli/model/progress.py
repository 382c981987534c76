"""Rich progress on stderr for the slow one-time steps (assembly, conversion).

Contract: :func:`step` yields an ``advance(n_bytes)`` callable. When disabled it draws nothing
and the callable is a no-op, so callers never branch. ``enabled=None`` means "only when stderr
is a terminal". stdout is never written.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def want_progress(progress: bool | None) -> bool:
    """Resolve the tri-state progress flag: None = auto (stderr is a TTY)."""
    if progress is None:
        return sys.stderr.isatty()
    return progress


@contextmanager
def step(
    enabled: bool, description: str, total: int | None = None
) -> Iterator[Callable[[int], None]]:
    """Show one progress line (a byte bar if ``total`` is known, else a spinner + timer)."""
    if not enabled:
        yield lambda _n: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), DownloadColumn()]
    columns.append(TimeElapsedColumn())
    with Progress(
        *columns, console=Console(stderr=True), transient=False, redirect_stdout=False
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
        if total is None:
            bar.update(task, total=1, completed=1)
