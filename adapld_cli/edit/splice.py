"""Re-indenting code to splice it into a file: a part's or a definition's answer comes back
dedented, and goes back at the indentation of the lines it replaces."""

from __future__ import annotations

import textwrap


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
