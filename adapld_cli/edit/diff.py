"""Unified diffs whose hunk headers name the enclosing definition, like ``git diff``.

Contract: :func:`unified_diff` returns the patch text (``""`` when equal) for two ``\\n``
texts, with ``a/`` and ``b/`` headers; it applies with ``patch -p1`` / ``git apply``. A hunk
header gets the first line of the innermost tree-sitter definition around the hunk's first
changed line of ``before`` (for an insertion, the line after it), e.g.
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
    out = list(difflib.unified_diff(a, b, f"a/{name}", f"b/{name}", n=n))
    for i, line in enumerate(out):
        m = _HUNK.match(line.rstrip("\n"))
        if m and defs:
            d = enclosing_definition(
                defs, min(_first_change(out, i, int(m.group(1))), max(1, len(a)))
            )
            if d is not None:
                header = lines_of(before, d.start_line).strip()
                out[i] = f"{line.rstrip(chr(10))} {header[:80]}\n"
    return "".join(
        f"{line}\n\\ No newline at end of file\n" if not line.endswith("\n") else line
        for line in out
    )


def _first_change(diff: list[str], header: int, start: int) -> int:
    """The 1-based line of ``before`` at the first ``-``/``+`` line of the hunk whose header is
    ``diff[header]`` and whose old range starts at ``start`` (0 for an empty file)."""
    line = max(start, 1)
    for row in diff[header + 1 :]:
        if not row.startswith(" "):
            break
        line += 1
    return line


def lines_of(text: str, line: int) -> str:
    """The 1-based ``line`` of ``text`` (empty when out of range)."""
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""
