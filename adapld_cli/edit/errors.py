"""Errors of the edit layer, each carrying the process exit code the CLI should use.

Contract: ``str(error)`` is one user-facing line (no traceback needed); ``error.exit_code`` is
2 for bad usage or input (missing path, binary file, empty instruction, file too long for the
model's context, a bad combination of options) and 1 for a result refused by a safety check.
Interruption is not an error class: ``KeyboardInterrupt`` propagates (SIGTERM arrives as
:class:`~adapld_cli.edit.interrupt.Interrupted`, a ``KeyboardInterrupt``) and the run maps it
to 130 or 143.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C)
EXIT_TERMINATED = 143  # SIGTERM


class EditError(Exception):
    """Base class: a one-line message and an exit code."""

    exit_code: int = EXIT_USAGE

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class InputError(EditError):
    """The input cannot be edited (bad path, binary or non-UTF-8 file, too long...). Exit 2."""

    exit_code = EXIT_USAGE


class UsageError(EditError):
    """A bad combination of options (``--check`` with ``--stdout``...). Exit 2."""

    exit_code = EXIT_USAGE


class RefusedError(EditError):
    """A safety check refused to write the model's output. Exit 1."""

    exit_code = EXIT_REFUSED


class ChangedOnDiskError(RefusedError):
    """The file changed on disk between reading it and replacing it; nothing written. Exit 1.

    Raised by :func:`~adapld_cli.edit.files.source.atomic_write` /
    :func:`~adapld_cli.edit.files.source.write_source` when the file no longer matches the
    snapshot taken when it was read.
    """

    exit_code = EXIT_REFUSED


class TooLongError(InputError):
    """The file and its answer do not fit in the model's context (exit 2), unless its edit
    can be made part by part (``adapld_cli.edit.parts``)."""


class SpecialFileError(InputError):
    """The path is a FIFO, a device or a socket, not a regular file; not edited. Exit 2."""

    exit_code = EXIT_USAGE


class ReadOnlyError(InputError):
    """The file has no write permission for its owner; refused unless ``--force``. Exit 2."""

    exit_code = EXIT_USAGE


class UndoError(EditError):
    """``adapld undo`` cannot start: empty journal, no such run. Exit 2."""

    exit_code = EXIT_USAGE


class JournalError(EditError):
    """The undo journal could not record a file's original bytes; nothing written. Exit 2.

    Raised by :meth:`adapld_cli.edit.files.journal.Run.record` (``$ADAPLD_HOME`` not writable, disk
    full, lock timeout): a write that could not be undone is not made.
    """

    exit_code = EXIT_USAGE
