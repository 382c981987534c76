"""tree-sitter helpers: language from a file name, syntax check, changed definitions.

Contract:
- :func:`language_for` maps a file name to a language id (``"python"``, ``"tsx"``, ...) or
  ``None``; ids without a tree-sitter grammar (``"shell"``, ``"yaml"``...) still name the code
  fence. :func:`get_language` returns the grammar or ``None`` when its wheel is missing, so
  every function here degrades to "no check" instead of failing.
- :func:`first_syntax_error` returns the first error of a parse (1-based line) or ``None``.
- :func:`outline` lists definitions (functions, classes, methods...) with qualified names;
  :func:`changed_definitions` compares two versions of a file and :func:`enclosing_definition`
  names the definition around a line (used for diff hunk headers).
Grammar modules are imported lazily on first use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from pathlib import PurePath
from typing import Any

# language id -> (grammar module, function returning the language pointer)
_GRAMMARS: dict[str, tuple[str, str]] = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "java": ("tree_sitter_java", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
}

_EXTENSIONS: dict[str, str] = {
    ".py": "python", ".pyi": "python", ".pyw": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "tsx",
    ".go": "go", ".rs": "rust", ".java": "java",
    ".c": "c", ".h": "c",
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".c++": "cpp",
    ".hh": "cpp", ".hpp": "cpp", ".hxx": "cpp",
    # fence tags only (no grammar shipped)
    ".sh": "shell", ".bash": "shell", ".zsh": "shell", ".rb": "ruby", ".php": "php",
    ".kt": "kotlin", ".swift": "swift", ".cs": "csharp", ".scala": "scala", ".lua": "lua",
    ".html": "html", ".css": "css", ".scss": "scss", ".sql": "sql", ".md": "markdown",
    ".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".xml": "xml",
}  # fmt: skip

_NAMES = {"cpp": "C++", "csharp": "C#", "javascript": "JavaScript", "typescript": "TypeScript",
          "tsx": "TypeScript (TSX)", "shell": "shell", "php": "PHP", "html": "HTML",
          "css": "CSS", "scss": "SCSS", "sql": "SQL", "json": "JSON", "yaml": "YAML",
          "toml": "TOML", "xml": "XML", "c": "C"}  # fmt: skip

# definition node types per language; "decl" = name found through the C declarator chain
_DEFS: dict[str, dict[str, str]] = {
    "python": {"function_definition": "name", "class_definition": "name"},
    "javascript": {
        "function_declaration": "name", "generator_function_declaration": "name",
        "class_declaration": "name", "method_definition": "name", "variable_declarator": "fn",
    },
    "go": {"function_declaration": "name", "method_declaration": "name", "type_spec": "name"},
    "rust": {
        "function_item": "name", "function_signature_item": "name", "struct_item": "name",
        "enum_item": "name", "trait_item": "name", "mod_item": "name", "union_item": "name",
        "impl_item": "type", "macro_definition": "name",
    },
    "java": {
        "class_declaration": "name", "interface_declaration": "name", "enum_declaration": "name",
        "record_declaration": "name", "method_declaration": "name",
        "constructor_declaration": "name",
    },
    "c": {"function_definition": "decl", "struct_specifier": "body", "union_specifier": "body",
          "enum_specifier": "body"},
}  # fmt: skip
_DEFS["typescript"] = {
    **_DEFS["javascript"],
    "interface_declaration": "name", "type_alias_declaration": "name", "enum_declaration": "name",
    "abstract_class_declaration": "name", "internal_module": "name",
}  # fmt: skip
_DEFS["tsx"] = _DEFS["typescript"]
_DEFS["cpp"] = {**_DEFS["c"], "class_specifier": "body", "namespace_definition": "name"}


def language_for(filename: str | None) -> str | None:
    """Language id for a file name (by extension), or ``None`` when unknown."""
    if not filename:
        return None
    return _EXTENSIONS.get(PurePath(filename).suffix.lower())


def display_name(lang: str | None) -> str:
    """Human name of a language id, for prompts (``"python"`` -> ``"Python"``)."""
    if not lang:
        return "text"
    return _NAMES.get(lang, lang.capitalize())


@cache
def get_language(lang: str | None) -> Any | None:
    """The tree-sitter ``Language`` for a language id, or ``None`` (unknown or not installed)."""
    if lang not in _GRAMMARS:
        return None
    module_name, attr = _GRAMMARS[lang]
    try:
        from tree_sitter import Language

        module = importlib.import_module(module_name)
        return Language(getattr(module, attr)())
    except (ImportError, AttributeError, ValueError, OSError):
        return None


def has_grammar(lang: str | None) -> bool:
    return get_language(lang) is not None


def parse(text: str, lang: str | None) -> Any | None:
    """Parse ``text``; ``None`` when no grammar is available."""
    language = get_language(lang)
    if language is None:
        return None
    from tree_sitter import Parser

    return Parser(language).parse(text.encode("utf-8"))


@dataclass(frozen=True)
class SyntaxIssue:
    """The first syntax error of a parse."""

    line: int  # 1-based
    column: int  # 1-based, in bytes
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def first_syntax_error(text: str, lang: str | None) -> SyntaxIssue | None:
    """First syntax error in ``text`` (document order), ``None`` if it parses cleanly or
    when the language has no grammar. Python that tree-sitter accepts is also compiled:
    CPython rejects more (a ``from __future__`` import below other code, ``return`` outside
    a function, ...)."""
    tree = parse(text, lang)
    if tree is None:
        return None
    if not tree.root_node.has_error:
        return _python_compile_error(text) if lang == "python" else None
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_missing:
            return _issue(node, f"missing {node.type!r}")
        if node.is_error:
            snippet = text.encode("utf-8")[node.start_byte : node.end_byte].decode(
                "utf-8", "replace"
            )
            first = snippet.strip().splitlines()[0][:40] if snippet.strip() else ""
            return _issue(node, f"syntax error near {first!r}" if first else "syntax error")
        stack.extend(reversed([c for c in node.children if c.has_error or c.is_missing]))
    return _issue(tree.root_node, "syntax error")


def _python_compile_error(text: str) -> SyntaxIssue | None:
    """CPython's own verdict on ``text`` (compiled, never run)."""
    try:
        compile(text, "<edited>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return SyntaxIssue(line=exc.lineno or 1, column=exc.offset or 1, message=exc.msg)
    except (ValueError, RecursionError, MemoryError):  # NUL bytes, absurd nesting
        return None
    return None


def _issue(node: Any, message: str) -> SyntaxIssue:
    row, col = node.start_point
    return SyntaxIssue(line=row + 1, column=col + 1, message=message)


@dataclass(frozen=True)
class Definition:
    """A named definition: ``name`` is qualified by enclosing definitions (``Cls.method``)."""

    name: str
    kind: str  # tree-sitter node type
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    text: str


def outline(text: str, lang: str | None) -> list[Definition]:
    """Definitions in ``text`` in document order (empty without a grammar)."""
    tree = parse(text, lang)
    if tree is None:
        return []
    kinds = _DEFS.get(lang or "", {})
    data = text.encode("utf-8")
    found: list[Definition] = []
    stack: list[tuple[Any, str]] = [(tree.root_node, "")]
    while stack:
        node, prefix = stack.pop()
        child_prefix = prefix
        rule = kinds.get(node.type)
        if rule is not None:
            name = _def_name(node, rule, data)
            if name:
                qual = f"{prefix}.{name}" if prefix else name
                found.append(
                    Definition(
                        name=qual,
                        kind=node.type,
                        start_line=node.start_point[0] + 1,
                        end_line=node.end_point[0] + 1,
                        text=data[node.start_byte : node.end_byte].decode("utf-8", "replace"),
                    )
                )
                child_prefix = qual
        stack.extend((c, child_prefix) for c in reversed(node.children))
    return found


def _def_name(node: Any, rule: str, data: bytes) -> str | None:
    def text_of(n: Any) -> str:
        return data[n.start_byte : n.end_byte].decode("utf-8", "replace")

    if rule == "name":
        n = node.child_by_field_name("name")
        return text_of(n) if n is not None else None
    if rule == "type":  # rust impl blocks
        n = node.child_by_field_name("type")
        return f"impl {text_of(n)}" if n is not None else None
    if rule == "body":  # C/C++ struct/class/enum with a body (not a mere reference)
        n = node.child_by_field_name("name")
        if n is None or node.child_by_field_name("body") is None:
            return None
        return text_of(n)
    if rule == "fn":  # JS/TS: const f = () => ... / function () {...}
        value = node.child_by_field_name("value")
        n = node.child_by_field_name("name")
        if (
            value is None
            or n is None
            or value.type
            not in {
                "arrow_function",
                "function_expression",
                "function",
                "generator_function",
            }
        ):
            return None
        return text_of(n)
    if rule == "decl":  # C/C++ function: follow the declarator chain to the identifier
        n = node.child_by_field_name("declarator")
        while n is not None and n.child_by_field_name("declarator") is not None:
            n = n.child_by_field_name("declarator")
        return text_of(n) if n is not None else None
    return None


@dataclass(frozen=True)
class DefinitionChanges:
    """What changed between two versions, by definition name."""

    changed: list[str]
    added: list[str]
    removed: list[str]
    renamed: list[tuple[str, str]]

    def __bool__(self) -> bool:
        return bool(self.changed or self.added or self.removed or self.renamed)

    def describe(self, limit: int = 6) -> str:
        """Short text such as ``renamed foo -> bar; changed main``."""
        parts: list[str] = []
        for label, items in (
            ("renamed", [f"{a} -> {b}" for a, b in self.renamed]),
            ("changed", self.changed),
            ("added", self.added),
            ("removed", self.removed),
        ):
            if items:
                shown = ", ".join(items[:limit])
                more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
                parts.append(f"{label} {shown}{more}")
        return "; ".join(parts)


def changed_definitions(before: str, after: str, lang: str | None) -> DefinitionChanges:
    """Definitions changed, added, removed or renamed between ``before`` and ``after``.

    A parent is reported as changed only when the change is not inside one of its reported
    children (an edited method reports ``Cls.method``, not also ``Cls``).
    """
    old = _keyed(outline(before, lang))
    new = _keyed(outline(after, lang))
    changed = [k for k in old if k in new and old[k].text != new[k].text]
    added = [k for k in new if k not in old]
    removed = [k for k in old if k not in new]
    renamed: list[tuple[str, str]] = []
    for r in list(removed):
        for a in added:
            if _same_but_name(old[r], new[a]):
                renamed.append((_plain(r), _plain(a)))
                removed.remove(r)
                added.remove(a)
                break
    touched = set(changed) | set(added) | set(removed) | {a for _, a in renamed}
    changed = [
        k for k in changed if not any(t != k and t.startswith(_plain(k) + ".") for t in touched)
    ]
    return DefinitionChanges(
        changed=[_plain(k) for k in changed],
        added=[_plain(k) for k in added],
        removed=[_plain(k) for k in removed],
        renamed=renamed,
    )


def enclosing_definition(defs: list[Definition], line: int) -> Definition | None:
    """The innermost definition spanning 1-based ``line``."""
    best: Definition | None = None
    for d in defs:
        if d.start_line <= line <= d.end_line and (
            best is None or d.end_line - d.start_line <= best.end_line - best.start_line
        ):
            best = d
    return best


def _keyed(defs: list[Definition]) -> dict[str, Definition]:
    """Index by qualified name; repeated names (overloads) get a ``#n`` suffix."""
    out: dict[str, Definition] = {}
    for d in defs:
        key, n = d.name, 1
        while key in out:
            n += 1
            key = f"{d.name}#{n}"
        out[key] = d
    return out


def _plain(key: str) -> str:
    return key.split("#", 1)[0]


def _same_but_name(a: Definition, b: Definition) -> bool:
    if a.kind != b.kind:
        return False
    old_name = a.name.rsplit(".", 1)[-1]
    new_name = b.name.rsplit(".", 1)[-1]
    return a.text.replace(old_name, new_name) == b.text
