"""What a file defines: its items (definitions of the outline and top-level statements; for
JSON, TOML and YAML every mapping key as a dotted path), with the parse tree rule 3 measures.

See ``docs/scope-guard.md#what-a-file-defines``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from adapld_cli.edit.formats import data_keys, first_format_error
from adapld_cli.edit.guard.items import Item, def_kind
from adapld_cli.edit.guard.statements import statements
from adapld_cli.edit.syntax import Definition, first_syntax_error, has_grammar, outline, parse

DATA_FORMATS = frozenset({"json", "toml", "yaml"})  # language ids whose "definitions" are keys


@dataclass(frozen=True)
class Scan:
    """A file's items in source order, and what rule 3 needs to find their bodies."""

    items: list[Item]
    root: Any = None  # the tree's root node (None for data formats)
    data: bytes = b""
    defs: tuple[Definition, ...] = ()


def is_structural(before: str, language: str | None) -> bool:
    """Whether rule 1 compares names: ``language`` has a grammar (or is a data format) and
    ``before`` parses cleanly."""
    if language in DATA_FORMATS:
        return first_format_error(before, language) is None
    return has_grammar(language) and first_syntax_error(before, language) is None


@lru_cache(maxsize=8)  # the same ``before`` is often judged against several results
def scan(text: str, language: str | None) -> Scan | None:
    """The items of ``text``; ``None`` without a grammar. Cached: do not modify the result."""
    if language in DATA_FORMATS:
        keys = data_keys(text, language)
        return Scan([Item(k, "key", n) for n, k in enumerate(keys or [], start=1)])
    tree = parse(text, language)
    if tree is None:
        return None
    data = text.encode("utf-8")
    defs = outline(text, language)
    items = [Item(d.name, def_kind(d), d.start_line, d.text) for d in defs]
    index = {(d.kind, d.start_line, d.end_line): d.name for d in defs}
    items += statements(tree.root_node, data, index)
    return Scan(sorted(items, key=lambda i: i.line), tree.root_node, data, tuple(defs))
