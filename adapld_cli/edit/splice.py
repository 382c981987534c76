"""Splicing answers into a file: a part's or a definition's answer comes back dedented, goes
back at the indentation of the lines it replaces (:func:`reindent`, :func:`indent_of`), and
the file with its replaced line spans is the answer text a whole-file prompt would have
given (:func:`spliced_answer`)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any


def reindent(code: str, indent: str) -> str:
    """``code`` (dedented again, in case the model indented it) with ``indent`` before each
    non-blank line; ends with a newline."""
    code = textwrap.dedent(code)
    if code and not code.endswith("\n"):
        code += "\n"
    if not indent:
        return code
    return "".join(indent + line if line.strip() else line for line in code.splitlines(True))


def indent_of(lines: list[str]) -> str:
    """The indentation of the first non-blank line."""
    for line in lines:
        if line.strip():
            return line[: len(line) - len(line.lstrip())]
    return ""


def spliced_answer(lines: list[str], replaced: Mapping[Any, str], fence: str) -> str:
    """``lines`` (with their line ends) with each span ``part.start``..``part.end`` (1-based,
    inclusive, disjoint) of ``replaced`` replaced by its text, then the closing ``fence``
    on a line of its own, as a model answering the whole file ends it."""
    lines = list(lines)
    for part in sorted(replaced, key=lambda p: p.start, reverse=True):
        lines[part.start - 1 : part.end] = [replaced[part]]
    text = "".join(lines)
    return text + ("" if text.endswith("\n") else "\n") + fence
