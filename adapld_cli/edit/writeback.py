"""What happens to an edit result: the write-back mode and the one function applying it.

Contract:
- :class:`WriteBack` is built once per run from the options (:meth:`WriteBack.from_options`
  raises :class:`~adapld_cli.edit.errors.UsageError` for combinations that make no sense).
- :func:`apply_result` turns one :class:`~adapld_cli.edit.judge.EditResult` into an
  :class:`~adapld_cli.edit.outcome.Outcome`: it writes the file when the mode says so (in
  place or ``--output``, atomically) and returns the bytes for stdout (edited file or diff)
  without printing them. Nothing is written for a refused result, in ``--check``, ``--diff``
  and ``--stdout``, or for an unchanged file in place. ``checkpoint`` is called right before
  the write begins: raising there (an interrupt) leaves the disk untouched.
- A write goes through the undo journal's run when one is given (every write of a CLI run
  is journalled) and through :mod:`adapld_cli.edit.files.source`'s checks either way: a file that
  changed on disk since it was read is ``refused`` (exit 1), a read-only file (unless
  ``force``: the run's ``--force``, :attr:`~adapld_cli.edit.request.EditOptions.force`), a
  special file or a journal failure is an ``error`` (exit 2); in all of these nothing is
  written. Owner, group, mode bits and hard links are kept.
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from adapld_cli.edit.diff import unified_diff
from adapld_cli.edit.errors import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    ChangedOnDiskError,
    EditError,
    UsageError,
)
from adapld_cli.edit.files.source import atomic_write, is_stdin_path, write_source
from adapld_cli.edit.judge import Status
from adapld_cli.edit.outcome import Outcome, strip_name

if TYPE_CHECKING:
    from adapld_cli.edit.files.journal import Run
    from adapld_cli.edit.files.source import SourceFile
    from adapld_cli.edit.judge import EditResult


class Mode(Enum):
    """Where an edited file goes."""

    IN_PLACE = "in place"  # replace the file (the default)
    STDOUT = "stdout"  # print the edited file (--stdout, and always for '-')
    OUTPUT = "output"  # write it to another file (--output)
    DIFF = "diff"  # print a unified diff (--diff)
    CHECK = "check"  # write nothing; a change is exit 1 (--check; with --diff also print it)

    @property
    def writes(self) -> bool:
        """Whether this mode writes files."""
        return self in (Mode.IN_PLACE, Mode.OUTPUT)


@dataclass(frozen=True)
class WriteBack:
    """The run's write-back policy: a mode, the ``--output`` target, whether to print diffs."""

    mode: Mode = Mode.IN_PLACE
    output: Path | None = None
    diff: bool = False

    @classmethod
    def from_options(
        cls,
        *,
        paths: list[str],
        to_stdout: bool = False,
        output: Path | None = None,
        diff: bool = False,
        check: bool = False,
    ) -> WriteBack:
        """The mode the options ask for; :class:`UsageError` when they contradict."""
        stdin = any(is_stdin_path(p) for p in paths)
        if stdin and len(paths) > 1:
            raise UsageError("'-' (stdin) cannot be combined with other paths")
        if sum([to_stdout, output is not None, diff]) > 1:
            raise UsageError("choose one of --stdout, --output and --diff")
        if check and (to_stdout or output is not None):
            raise UsageError("--check writes nothing; it combines only with --diff")
        if output is not None and len(paths) != 1:
            raise UsageError("--output takes exactly one input path")
        if check:
            return cls(Mode.CHECK, diff=diff)
        if diff:
            return cls(Mode.DIFF, diff=True)
        if output is not None:
            return cls(Mode.OUTPUT, output=output)
        if to_stdout or stdin:
            return cls(Mode.STDOUT)
        return cls(Mode.IN_PLACE)

    def target(self, source: SourceFile) -> Path | None:
        """The file a result for ``source`` would be written to (``None``: none)."""
        if self.mode is Mode.OUTPUT:
            return self.output
        if self.mode is Mode.IN_PLACE:
            return source.path
        return None


def apply_result(
    result: EditResult,
    writeback: WriteBack,
    *,
    force: bool = False,
    name: str | None = None,
    checkpoint: Callable[[], None] | None = None,
    journal: Run | None = None,
) -> Outcome:
    """Apply ``result`` under ``writeback`` and say what happened (see the module contract)."""
    name = name if name is not None else result.source.name
    if result.status is Status.REFUSED:
        return Outcome(name, Status.REFUSED, EXIT_REFUSED, result.message or "", result)
    changed = result.status is Status.CHANGED
    outcome = Outcome(name, _status(writeback.mode, changed), result=result)
    outcome.exit_code = EXIT_REFUSED if outcome.status is Status.WOULD_CHANGE else EXIT_OK
    outcome.detail = _detail(result, writeback, changed)
    outcome.data = _stdout_data(result, writeback, changed, name)
    target = writeback.target(result.source) if changed or writeback.mode is Mode.OUTPUT else None
    if target is None:
        return outcome
    if checkpoint is not None:
        checkpoint()
    failed = _write(result, target, writeback, journal, force)
    if failed is not None:
        failed.name, failed.result = name, result
        failed.detail = strip_name(failed.detail, result.source.name)
        return failed
    outcome.written = target
    if force and not (mode := target.stat().st_mode) & stat.S_IWUSR:
        # say it: without --force this file is refused
        note = f"--force: written although read-only (mode {stat.S_IMODE(mode):04o} kept)"
        outcome.detail = "; ".join(p for p in (outcome.detail, note) if p)
    return outcome


def _status(mode: Mode, changed: bool) -> Status:
    if mode is Mode.OUTPUT:
        return Status.WRITTEN  # the output file is written, changed or not
    if not changed:
        return Status.UNCHANGED
    return {
        Mode.IN_PLACE: Status.EDITED,
        Mode.CHECK: Status.WOULD_CHANGE,
    }.get(mode, Status.CHANGED)


def _detail(result: EditResult, writeback: WriteBack, changed: bool) -> str:
    parts = []
    if writeback.mode is Mode.OUTPUT:
        parts.append(f"to {writeback.output}")
    if not changed:
        parts.append("the model made no change")
    elif result.changes:
        parts.append(result.changes.describe())
    if result.syntax_error is not None:
        parts.append(f"--force: kept despite a syntax error ({result.syntax_error})")
    if result.lost:
        parts.append(f"--force: kept although it {result.lost}")
    if changed and result.undefined:
        parts.append(f"warning: uses names it never defines or imports: {result.undefined}")
    return "; ".join(p for p in parts if p)


def _stdout_data(result: EditResult, writeback: WriteBack, changed: bool, name: str) -> bytes:
    if writeback.mode is Mode.STDOUT:
        return result.new_bytes
    if writeback.diff and changed:
        return unified_diff(result.source.text, result.new_text, name, result.lang).encode()
    return b""


def _write(
    result: EditResult, target: Path, writeback: WriteBack, journal: Run | None, force: bool
) -> Outcome | None:
    """Write the result to ``target``; ``None`` when written, else the failure's outcome."""
    src, data = result.source, result.new_bytes
    try:
        if writeback.mode is Mode.IN_PLACE:
            if journal is not None:
                journal.write(src, data, force=force)
            else:
                write_source(src, data, force=force)
            return None
        bits = None if target.exists() else _mode_bits(src.path)  # a new file: the source's
        if journal is not None:
            journal.write_output(target, data, mode=bits)
        else:
            atomic_write(target, data, mode=bits)
    except ChangedOnDiskError as exc:
        return Outcome(src.name, Status.REFUSED, exc.exit_code, str(exc))
    except EditError as exc:
        return Outcome(src.name, Status.ERROR, exc.exit_code, str(exc))
    except OSError as exc:
        what = f"cannot write {target}" if writeback.mode is Mode.OUTPUT else "cannot write"
        return Outcome(src.name, Status.ERROR, EXIT_USAGE, f"{what}: {exc.strerror or exc}")
    return None


def _mode_bits(path: Path | None) -> int | None:
    """The permission bits of ``path`` (``None`` for stdin or when it cannot be read)."""
    if path is None:
        return None
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None
