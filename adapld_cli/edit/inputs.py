"""The files of a run, read up front so bad inputs are reported before the model loads.

Contract: :func:`read_inputs` returns, in the order given, an :class:`EditInput` for each file
that can be edited and an :class:`~adapld_cli.edit.outcome.Outcome` (status ``error``, exit 2)
for each that cannot: a missing, binary or non-UTF-8 file, a FIFO, device or socket, a
notebook (:func:`adapld_cli.edit.formats.precheck`), and — when the mode writes in place — a
read-only file unless ``force``. A file named twice — the same path, another spelling of it,
or another hard link to it — is edited once (its first mention counts). ``-`` and
``/dev/stdin`` read stdin.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import BinaryIO

from adapld_cli.edit.errors import EditError, InputError
from adapld_cli.edit.files.source import (
    SourceFile,
    check_writable,
    decode_source,
    is_stdin_path,
    read_source,
    unique_paths,
)
from adapld_cli.edit.formats import precheck
from adapld_cli.edit.outcome import Outcome, strip_name
from adapld_cli.edit.syntax import language_for
from adapld_cli.edit.writeback import Mode, WriteBack

STDIN_NAME = "<stdin>"


@dataclass(frozen=True)
class EditInput:
    """One file to edit: its name in messages, its content, its language (``None``: guess)."""

    name: str
    source: SourceFile
    lang: str | None = None


def read_inputs(
    paths: list[str],
    writeback: WriteBack,
    *,
    force: bool = False,
    stdin: BinaryIO | None = None,
    stdin_filename: str | None = None,
) -> list[EditInput | Outcome]:
    """Read every input (see the module contract)."""
    items: list[EditInput | Outcome] = []
    for path in unique_paths(paths):
        try:
            items.append(_read_one(path, writeback, force, stdin, stdin_filename))
        except EditError as exc:
            items.append(Outcome.failed(STDIN_NAME if is_stdin_path(path) else path, exc))
    return items


def _read_one(
    path: str,
    writeback: WriteBack,
    force: bool,
    stdin: BinaryIO | None,
    stdin_filename: str | None,
) -> EditInput:
    stdin_path = is_stdin_path(path)
    name = (stdin_filename or STDIN_NAME) if stdin_path else path
    checked = stdin_filename if stdin_path else path
    reason = precheck(checked)
    if reason is not None:  # it starts with the file's base name
        raise InputError(f"{name}: {strip_name(reason, PurePath(checked or '').name)}")
    if stdin_path:
        raw = stdin.read() if stdin is not None else b""
        item = EditInput(name, decode_source(raw, name), language_for(stdin_filename))
    else:
        item = EditInput(path, read_source(path))
        if writeback.mode is Mode.IN_PLACE:
            check_writable(path, force=force)
    if writeback.mode is Mode.OUTPUT and writeback.output is not None:
        check_writable(writeback.output, str(writeback.output), force=force)
    return item
