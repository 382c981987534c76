"""The files of a run, read up front so bad inputs are reported before the model loads.

Contract: :func:`read_inputs` returns, in the order given, an :class:`EditInput` for each file
that can be edited and an :class:`~adapld_cli.edit.outcome.Outcome` (status ``error``, exit 2)
for each that cannot. A file named twice — the same path, another spelling of it, or another
hard link to it — is edited once (its first mention counts). ``-`` reads stdin.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import BinaryIO

from adapld_cli.edit.errors import EditError
from adapld_cli.edit.outcome import Outcome
from adapld_cli.edit.source import SourceFile, check_writable, decode_source, read_source
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
    stdin: BinaryIO | None = None,
    stdin_filename: str | None = None,
) -> list[EditInput | Outcome]:
    """Read every input (see the module contract)."""
    items: list[EditInput | Outcome] = []
    seen: set[object] = set()
    for path in paths:
        key = _identity(path)
        if key in seen:
            continue
        seen.add(key)
        try:
            items.append(_read_one(path, writeback, stdin, stdin_filename))
        except EditError as exc:
            items.append(Outcome.failed(STDIN_NAME if path == "-" else path, exc))
    return items


def _read_one(
    path: str, writeback: WriteBack, stdin: BinaryIO | None, stdin_filename: str | None
) -> EditInput:
    if path == "-":
        name = stdin_filename or STDIN_NAME
        raw = stdin.read() if stdin is not None else b""
        item = EditInput(name, decode_source(raw, name), language_for(stdin_filename))
    else:
        item = EditInput(path, read_source(path))
        if writeback.mode is Mode.IN_PLACE:
            check_writable(path)
    if writeback.mode is Mode.OUTPUT and writeback.output is not None:
        check_writable(writeback.output, str(writeback.output))
    return item


def _identity(path: str) -> object:
    """What makes two paths the same file: device and inode, else the resolved path."""
    if path == "-":
        return "-"
    try:
        st = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return (st.st_dev, st.st_ino)
