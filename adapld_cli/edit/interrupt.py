"""SIGINT and SIGTERM during a run: stop generating, never half-report a write.

Contract: inside ``with Signals():`` (main thread only; elsewhere it does nothing) SIGINT
and SIGTERM raise :class:`Interrupted` — a ``KeyboardInterrupt`` carrying the exit code, 130
or 143 — so the code that already handles Ctrl-C (nothing written, generator closed) handles
both. Inside ``with signals.deferred():`` a signal is only recorded; :meth:`Signals.check`
raises it (call it just before the point of no return), and once the block is left the
pending signal stays in :attr:`Signals.pending` for the caller to stop the run. So a file that
was written is reported as written whatever arrives after it. Previous handlers are restored
on exit — except in the `adapld` process itself (:func:`ignore_after_run`, called by the
console-script entry point), where leaving the block means the outcome is decided and only
the exit remains: a signal then is ignored, so it can neither kill the process (-2/-15) nor
turn a written file's exit code into 130/143.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from adapld_cli.edit.errors import EXIT_INTERRUPTED, EXIT_TERMINATED

_CODES = {signal.SIGINT: EXIT_INTERRUPTED, signal.SIGTERM: EXIT_TERMINATED}
_ignore_after_run = False


def ignore_after_run() -> None:
    """Once a ``with Signals():`` block is left, ignore SIGINT/SIGTERM until the process exits
    (for the console-script process only; in-process callers such as tests keep handlers)."""
    global _ignore_after_run
    _ignore_after_run = True


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM: ``exit_code`` 130 or 143, ``name`` for messages."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = _CODES.get(signal.Signals(signum), 128 + signum)
        self.name = signal.Signals(signum).name


def exit_code_of(exc: BaseException) -> int:
    """130 for a plain ``KeyboardInterrupt``, the signal's code for :class:`Interrupted`."""
    return getattr(exc, "exit_code", EXIT_INTERRUPTED)


def describe(exc: BaseException) -> str:
    """``interrupted`` (Ctrl-C) or ``terminated (SIGTERM)``."""
    return "terminated (SIGTERM)" if exit_code_of(exc) == EXIT_TERMINATED else "interrupted"


class Signals:
    """Handlers for SIGINT and SIGTERM (see the module contract)."""

    def __init__(self) -> None:
        self.pending: int | None = None
        self._deferring = False
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():
            for signum in _CODES:
                self._saved[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._saved.items():
            signal.signal(signum, signal.SIG_IGN if _ignore_after_run else handler)
        self._saved.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self._deferring:
            if self.pending is None:
                self.pending = signum
            return
        raise Interrupted(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Record signals instead of raising them for the duration of the block."""
        outer, self._deferring = self._deferring, True
        try:
            yield
        finally:
            self._deferring = outer

    def check(self) -> None:
        """Raise the pending signal, if any (before anything irreversible is done)."""
        if self.pending is not None:
            signum, self.pending = self.pending, None
            raise Interrupted(signum)
