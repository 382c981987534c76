"""What became of each file in a run, and the run as a whole.

Contract:
- :class:`~adapld_cli.edit.judge.Status` is the one list of words a result line can carry
  (``calc.py: edited``); the UI colours them, ``--stats-json`` records them, the run report
  counts them.
- :class:`Outcome` is one file's end state: status, exit code, a one-line detail, the edit
  result when there was one, and the bytes destined for stdout (edited file or diff).
- :class:`RunReport` collects outcomes: counts per status, the worst exit code (the process's
  exit code), the summary line printed for runs over several files.
- :class:`StatsLog` writes ``--stats-json`` rows; a failure to write is returned as a message
  (its own error), never raised into the edit that was already written.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from adapld_cli.edit.errors import EXIT_INTERRUPTED, EXIT_OK, EditError, UsageError
from adapld_cli.edit.judge import Status

if TYPE_CHECKING:
    from adapld_cli.edit.judge import EditResult
    from adapld_cli.engine.types import Stats

__all__ = ["Outcome", "RunReport", "StatsLog", "Status", "strip_name"]


@dataclass
class Outcome:
    """One file's end state (see the module contract)."""

    name: str
    status: Status
    exit_code: int = EXIT_OK
    detail: str = ""
    result: EditResult | None = None
    data: bytes = b""  # for stdout: the edited file (--stdout) or its diff (--diff)
    written: Path | None = None  # the file replaced on disk, if any
    tests: dict[str, Any] | None = None  # --test: the command's runs (exit codes, seconds)

    @property
    def stats(self) -> Stats | None:
        return self.result.stats if self.result is not None else None

    @property
    def attempts(self) -> int:
        """Generations the result took (0 without one)."""
        return self.result.attempts if self.result is not None else 0

    @classmethod
    def failed(cls, name: str, exc: EditError) -> Outcome:
        """An edit-layer error on this file (its message loses a leading ``name: ``)."""
        return cls(name, Status.ERROR, exc.exit_code, strip_name(str(exc), name))

    @classmethod
    def interrupted(cls, name: str, exc: BaseException) -> Outcome:
        """Interrupted while generating: nothing written, exit 130 (SIGINT) or 143 (SIGTERM)."""
        code = getattr(exc, "exit_code", EXIT_INTERRUPTED)
        why = "" if code == EXIT_INTERRUPTED else f"{getattr(exc, 'name', 'signal')} received; "
        return cls(name, Status.INTERRUPTED, code, f"{why}nothing written")

    def stats_row(self) -> dict[str, Any]:
        """The ``--stats-json`` row: path, status, then the decoding statistics if any."""
        row: dict[str, Any] = {"path": self.name, "status": self.status.value}
        if self.result is not None:
            row.update(self.result.stats.as_dict())
            row["stop_reason"] = self.result.stop_reason
            row["attempts"] = self.result.attempts
            if self.result.plan is not None:
                row["plan"] = self.result.plan.as_dict()
        if self.tests is not None:
            row["tests"] = self.tests
        if self.status in (Status.ERROR, Status.REFUSED) and self.detail:
            row["message"] = self.detail
        return row


def strip_name(message: str, name: str) -> str:
    """Messages from the edit layer start with ``name: ``; the result line adds it already."""
    prefix = f"{name}: "
    return message[len(prefix) :] if message.startswith(prefix) else message


_SUMMARY_ORDER = tuple(Status)


@dataclass
class RunReport:
    """Counts per status and the worst exit code of a run (0 when nothing happened)."""

    counts: dict[Status, int] = field(default_factory=dict)
    exit_code: int = EXIT_OK
    written: list[Path] = field(default_factory=list)
    inputs: int = 0  # files the run was given (after de-duplication)

    def add(self, outcome: Outcome) -> None:
        self.counts[outcome.status] = self.counts.get(outcome.status, 0) + 1
        self.fail(outcome.exit_code)
        if outcome.written is not None:
            self.written.append(outcome.written)

    def fail(self, code: int) -> None:
        """Raise the run's exit code to at least ``code`` (errors not tied to one file)."""
        self.exit_code = max(self.exit_code, code)

    @property
    def files(self) -> int:
        return sum(self.counts.values())

    def summary_line(self) -> str:
        """``adapld: 3 files: 1 edited, 1 unchanged, 2 errors (exit 2)``."""
        parts = ", ".join(
            f"{n} {s.value}{'s' if s is Status.ERROR and n != 1 else ''}"
            for s in _SUMMARY_ORDER
            if (n := self.counts.get(s, 0))
        )
        total = self.files
        return f"adapld: {total} file{'s' if total != 1 else ''}: {parts} (exit {self.exit_code})"


class StatsLog:
    """``--stats-json``: one JSON row per file. ``None`` path: a log that writes nothing.

    Opening fails with :class:`UsageError` (before anything is read or loaded). A write or
    close failure disables the log and is returned once as a message, so the caller reports
    it as its own error; it never changes the outcome of a file already handled.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._fh: IO[str] | None = None
        if path is not None:
            try:
                self._fh = open(path, "w", encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                raise UsageError(f"--stats-json {path}: {exc.strerror or exc}") from None

    def write(self, outcome: Outcome) -> str | None:
        """Append ``outcome``'s row; return an error message if the row could not be written."""
        if self._fh is None:
            return None
        try:
            self._fh.write(json.dumps(outcome.stats_row()) + "\n")
            self._fh.flush()
        except OSError as exc:
            return self._broken(exc)
        return None

    def close(self) -> str | None:
        """Close the file; return an error message if that failed."""
        if self._fh is None:
            return None
        try:
            self._fh.close()
        except OSError as exc:
            return self._broken(exc)
        self._fh = None
        return None

    def _broken(self, exc: OSError) -> str:
        fh, self._fh = self._fh, None
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.close()
        return f"--stats-json {self.path}: cannot write ({exc.strerror or exc})"
