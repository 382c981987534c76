"""Changes nobody asked for: a rename the result did not make, and data tables it rewrote.

Contract: :func:`check_unasked` returns the reason a result must not be written as it is
(``None``: nothing found). Unlike :func:`~.check.check_scope` it looks at what the result
*changed*, not at what it lost:

- **a rename not made**: the instruction says ``rename X to Y`` (``rename the method X to
  Y``, with or without backticks, ``X`` possibly qualified), ``X`` is a definition of the
  file, and in the result ``Y`` appears nowhere or ``X`` is still defined (the reason names each
  definition still holding ``X``, qualified, with its line, so a repair knows which);
- **a data table rewritten**: a top-level assignment whose value holds at least
  :data:`TABLE_LITERALS` literals (strings, numbers) keeps its name but not its literals,
  and the instruction neither names it nor speaks of data in general.

Both read the file with tree-sitter (no grammar or a file that does not parse: nothing
found). The reasons are written for the user's line and, after ``The file you returned``,
for the model's repair attempt. See ``docs/scope-guard.md#changes-nobody-asked-for``.
"""

from __future__ import annotations

import re
from collections import Counter

from adapld_cli.edit.guard.intent import names_in
from adapld_cli.edit.guard.items import Item
from adapld_cli.edit.guard.scan import is_structural, scan

SHOWN_NAMES = 4  # definitions a rename-not-made reason names
TABLE_LITERALS = 6  # literals in an assignment's value that make it a data table
# "rename [the method] `old` to `new`": a kind word or two may stand before the old name
RENAME_PAIR_RE = re.compile(
    r"\brenam(?:e|ing)\s+(?:the\s+)?(?:[a-z]+\s+){0,2}?`?([A-Za-z_][\w.]*)`?\s+(?:to|into|as)\s+"
    r"`?([A-Za-z_]\w*)`?",
    re.IGNORECASE,
)
LITERAL_RE = re.compile(r"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|\b\d[\w.]*\b")
# an instruction that speaks of data may change a table it does not name
DATA_WORDS_RE = re.compile(
    r"\b(?:tables?|entr(?:y|ies)|values?|constants?|mapping|dict(?:ionary)?|list of|data|"
    r"keys?|spelling|typos?|strings?|names)\b",
    re.IGNORECASE,
)


def check_unasked(before: str, after: str, *, language: str | None, instruction: str) -> str | None:
    """Why ``after`` changes what ``instruction`` did not ask (module contract), or ``None``."""
    if before == after or not is_structural(before, language):
        return None
    return _rename_not_made(before, after, language, instruction) or _tables_rewritten(
        before, after, language, instruction
    )


def rename_pairs(instruction: str) -> list[tuple[str, str]]:
    """``(old, new)`` for each ``rename X to Y`` of the instruction, ``old`` unqualified."""
    return [
        (_last(old), new) for old, new in RENAME_PAIR_RE.findall(instruction) if _last(old) != new
    ]


def _rename_not_made(before: str, after: str, language: str | None, instruction: str) -> str | None:
    pairs = rename_pairs(instruction)
    if not pairs:
        return None
    old_items = _definitions(before, language) or []
    new_items = _definitions(after, language)
    if new_items is None:
        return None
    old_defs = {_last(i.name) for i in old_items}
    new_defs = {_last(i.name) for i in new_items}
    for old, new in pairs:
        if old not in old_defs:
            continue  # not a definition of this file: nothing to check
        if not re.search(r"(?<![\w$])" + re.escape(new) + r"(?![\w$])", after):
            return f"does not make the rename: `{new}` appears nowhere"
        if old in new_defs and new not in old_defs:
            return f"does not make the rename: {_still_there(old_items, new_items, old, new)}"
    olds = {old for old, _ in pairs}
    gone = [n for n in sorted(old_defs - new_defs - olds) if not names_in(n, instruction)]
    if gone:
        return f"renames or removes `{gone[0]}`, which the instruction does not name"
    return None


def _still_there(before: list[Item], after: list[Item], old: str, new: str) -> str:
    """Which definitions still hold ``old`` and, where the file had several, all of them by
    name: the model's repair attempt tends to copy its answer back unless told which."""
    kept = [i for i in after if _last(i.name) == old]
    said = ", ".join(f"`{i.name}` (line {i.line})" for i in kept[:SHOWN_NAMES])
    reason = f"{said} {'is' if len(kept) == 1 else 'are'} still defined"
    named = [i.name for i in before if _last(i.name) == old]
    if len(named) > 1:
        every = ", ".join(f"`{n}`" for n in named[:SHOWN_NAMES])
        reason += (
            f"; there are {len(named)} definitions named `{old}`: rename all of them ({every})"
            f" to `{new}`, and every call"
        )
    return reason


def _definitions(text: str, language: str | None) -> list[Item] | None:
    """The items a file defines (definitions and top-level statements, imports left out)."""
    found = scan(text, language)
    if found is None:
        return None
    return [i for i in found.items if i.kind != "import"]


def _last(name: str) -> str:
    """``"Inventory.total_value"`` -> ``"total_value"``."""
    return name.rsplit(".", 1)[-1]


def _tables_rewritten(
    before: str, after: str, language: str | None, instruction: str
) -> str | None:
    if DATA_WORDS_RE.search(instruction):
        return None
    old, new = scan(before, language), scan(after, language)
    if old is None or new is None:
        return None
    new_tables = {i.name: i.text for i in new.items if i.kind == "assignment"}
    changed: list[str] = []
    for item in old.items:
        if item.kind != "assignment" or item.name not in new_tables:
            continue
        literals = _literals(item.text)
        if sum(literals.values()) < TABLE_LITERALS or names_in(item.name, instruction):
            continue
        if _literals(new_tables[item.name]) - literals:  # a literal the table did not hold
            changed.append(item.name)
    if not changed:
        return None
    shown = ", ".join(f"`{n}`" for n in changed[:3])
    more = f" (+{len(changed) - 3} more)" if len(changed) > 3 else ""
    return f"changes the data of {shown}{more}, which the instruction does not name"


def _literals(text: str) -> Counter[str]:
    """The string and number literals of an assignment's text (its target included)."""
    return Counter(LITERAL_RE.findall(text.split("=", 1)[-1]))
