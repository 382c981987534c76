"""The top-level statements of a parsed file, as items: assignments and constants by target
name, imports by imported name, C macros and includes.

Statements inside ``if``/``try``/preprocessor blocks count; those inside function or class
bodies do not; those inside a namespace or module are qualified by it (``n.z``). See
``docs/scope-guard.md#what-a-file-defines``.
"""

from __future__ import annotations

import re
from typing import Any

from adapld_cli.edit.guard.items import Item
from adapld_cli.edit.guard.nodes import STOP, field_text, node_text

CONTAINERS = {"namespace_definition", "mod_item", "internal_module"}  # qualify statements
FN_VALUES = {"arrow_function", "function_expression", "function", "generator_function"}


def statements(root: Any, data: bytes, defs: dict[tuple[str, int, int], str]) -> list[Item]:
    """Top-level statements: walk the tree, entering blocks but not function/class bodies.
    ``defs`` maps the outline's definitions, ``(node type, first line, last line)``, to their
    names."""
    found: list[Item] = []
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        node, prefix = stack.pop()
        key = (node.type, node.start_point[0] + 1, node.end_point[0] + 1)
        if key in defs:
            if node.type not in CONTAINERS:
                continue
            prefix = defs[key] + "."
        elif node.type in STOP:
            continue
        names, kind = _statement_names(node, data)
        if kind is not None:
            line = node.start_point[0] + 1
            body = node_text(node, data)
            found.extend(Item(prefix + n, kind, line, body) for n in names if n)
            continue
        stack.extend((c, prefix) for c in reversed(node.children))
    return found


def _statement_names(node: Any, data: bytes) -> tuple[list[str], str | None]:
    """Names bound by a statement node and its kind, or ``([], None)`` to keep walking."""
    t = node.type
    if t in {"import_statement", "import_from_statement", "future_import_statement"}:
        return _import_names(node, data), "import"
    if t == "import_declaration" and any("import_spec" in c.type for c in node.children):
        return [], None  # Go: walk on to the import specs
    if t in {"import_spec", "preproc_include", "import_declaration", "use_declaration"}:
        return _other_import_names(node, data), "import"
    if t in {"assignment", "assignment_expression"}:
        return _assignment_names(node, data), "assignment"
    if t == "variable_declarator":
        value = node.child_by_field_name("value")
        if value is not None and value.type in FN_VALUES:
            return [], "assignment"  # an outline definition already
        return _pattern_names(node.child_by_field_name("name"), data), "assignment"
    if t in {"const_spec", "var_spec"}:
        return [node_text(n, data) for n in node.children_by_field_name("name")], "assignment"
    if t in {"const_item", "static_item", "preproc_def", "preproc_function_def"}:
        return [field_text(node, "name", data)], "assignment"
    if t in {"alias_declaration"}:
        return [field_text(node, "name", data)], "class"
    if t in {"declaration", "type_definition"}:
        names = [_declarator_name(d, data) for d in node.children_by_field_name("declarator")]
        return [n for n in names if n], "assignment"
    if t == "using_declaration":
        named = [c for c in node.named_children]
        return [node_text(named[-1], data)] if named else [], "import"
    return [], None


# -- imports -----------------------------------------------------------------------------------
def _import_names(node: Any, data: bytes) -> list[str]:
    """Python imports: the imported names (``numpy`` for ``import numpy as np``)."""
    names = []
    for child in node.children_by_field_name("name"):
        target = child.child_by_field_name("name") if child.type == "aliased_import" else child
        names.append(node_text(target, data))
    if node.type == "import_from_statement" and any(
        c.type == "wildcard_import" for c in node.children
    ):
        names.append(field_text(node, "module_name", data) + ".*")
    if node.type == "import_statement" and node.child_by_field_name("source") is not None:
        names = _js_import_names(node, data)
    return names


def _js_import_names(node: Any, data: bytes) -> list[str]:
    names: list[str] = []
    for clause in (c for c in node.named_children if c.type == "import_clause"):
        for part in clause.named_children:
            if part.type == "identifier":
                names.append(node_text(part, data))
            elif part.type == "namespace_import":
                names += [node_text(c, data) for c in part.named_children]
            elif part.type == "named_imports":
                for spec in part.named_children:
                    target = spec.child_by_field_name("name")
                    if target is not None:
                        names.append(node_text(target, data))
    if not names:  # side-effect import: import "./style.css"
        names.append(node_text(node.child_by_field_name("source"), data).strip("'\"`"))
    return names


def _other_import_names(node: Any, data: bytes) -> list[str]:
    t = node.type
    if t == "import_spec":  # Go: the path
        return [field_text(node, "path", data).strip('"`')]
    if t == "preproc_include":  # C/C++: the header
        return [field_text(node, "path", data).strip('<>"')]
    if t == "import_declaration":  # Java: the class (or package.*)
        text = node_text(node, data)
        body = re.sub(r"^import\s+(?:static\s+)?|;\s*$", "", text).strip()
        return [body if body.endswith("*") else body.rsplit(".", 1)[-1]]
    return _use_leaves(node.child_by_field_name("argument"), data)  # Rust


def _use_leaves(node: Any, data: bytes) -> list[str]:
    if node is None:
        return []
    t = node.type
    if t == "scoped_use_list":
        return _use_leaves(node.child_by_field_name("list"), data)
    if t == "use_list":
        return [n for c in node.named_children for n in _use_leaves(c, data)]
    if t == "use_as_clause":
        return _use_leaves(node.child_by_field_name("path"), data)
    if t == "scoped_identifier":
        return [field_text(node, "name", data)]
    return [node_text(node, data)]  # identifier, self, use_wildcard ("c::*")


# -- assignments and declarations --------------------------------------------------------------
def _assignment_names(node: Any, data: bytes) -> list[str]:
    names = _pattern_names(node.child_by_field_name("left"), data)
    right = node.child_by_field_name("right")
    if right is not None and right.type == node.type:  # a = b = 1
        names += _assignment_names(right, data)
    return names


def _pattern_names(node: Any, data: bytes) -> list[str]:
    """Identifiers bound by a target or destructuring pattern (dotted targets kept whole)."""
    if node is None:
        return []
    if node.type in {"identifier", "shorthand_property_identifier_pattern"}:
        return [node_text(node, data)]
    if node.type in {"attribute", "member_expression"}:
        text = node_text(node, data)
        return [text] if re.fullmatch(r"[\w$.]+", text) else []
    if node.type == "pair_pattern":
        return _pattern_names(node.child_by_field_name("value"), data)
    if node.type in {"subscript", "subscript_expression", "call", "call_expression"}:
        return []
    return [n for c in node.named_children for n in _pattern_names(c, data)]


def _declarator_name(node: Any, data: bytes) -> str | None:
    """C/C++: follow a declarator chain (init, pointer, function, array...) to its name."""
    while node is not None:
        if node.type in {"identifier", "type_identifier", "field_identifier"}:
            return node_text(node, data)
        if node.type in {"qualified_identifier", "destructor_name", "operator_name"}:
            return node_text(node, data)
        inner = node.child_by_field_name("declarator")
        if inner is None:  # reference_declarator and friends: the last named child
            named = node.named_children
            inner = named[-1] if named else None
        node = inner
    return None
