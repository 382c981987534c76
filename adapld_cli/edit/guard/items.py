"""The named things of a file that rule 1 compares: definitions and top-level statements.

See ``docs/scope-guard.md#what-a-file-defines`` for what counts as an item in each language.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapld_cli.edit.syntax import Definition

SET_KINDS = {"assignment", "import"}  # compared by presence, not count
DEF_KINDS = {"function", "class"}


@dataclass(frozen=True)
class Item:
    """One named thing of a file: a definition or a top-level statement."""

    name: str  # qualified: "Item.total_value", "DATA", "dataclass"
    kind: str  # "function" | "class" | "assignment" | "import" | "key"
    line: int  # 1-based
    text: str = ""


def def_kind(d: Definition) -> str:
    """The item kind of an outline definition: ``"function"`` (functions, methods,
    constructors, macros, a variable bound to a function) or ``"class"`` (everything else)."""
    kind = d.kind
    if any(w in kind for w in ("function", "method", "constructor", "macro")):
        return "function"
    return "function" if kind == "variable_declarator" else "class"


def end_line(item: Item) -> int:
    """The item's last line (1-based)."""
    return item.line + item.text.count("\n")
