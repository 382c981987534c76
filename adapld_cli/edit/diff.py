"""Unified diffs whose hunk headers name the enclosing definition, like ``git diff``.

Contract: :func:`unified_diff` returns the patch text (``""`` when equal) for two ``\\n``
texts, with ``a/`` and ``b/`` headers; it applies with ``patch -p1`` / ``git apply``. A hunk
header gets the innermost tree-sitter definition around its first line, e.g.
``@@ -3,4 +3,4 @@ def main``.
"""

from __future__ import annotations

import difflib
import re

from adapld_cli.edit.syntax import enclosing_definition, outline

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@$")


def unified_diff(before: str, after: str, name: str, lang: str | None = None, n: int = 3) -> str:
    if before == after:
        return ""
    defs = outline(before, lang) if lang else []
    a = before.splitlines(keepends=True)
    b = after.splitlines(keepends=True)
    out: list[str] = []
    for line in difflib.unified_diff(a, b, f"a/{name}", f"b/{name}", n=n):
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        m = _HUNK.match(line.rstrip("\n"))
        if m and defs:
            start = int(m.group(1)) + (0 if m.group(2) == "0" else n)
            d = enclosing_definition(defs, min(start, max(1, len(a))))
            if d is not None:
                header = lines_of(before, d.start_line).strip()
                line = f"{line.rstrip(chr(10))} {header[:80]}\n"
        out.append(line)
    return "".join(out)


def lines_of(text: str, line: int) -> str:
    """The 1-based ``line`` of ``text`` (empty when out of range)."""
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""
