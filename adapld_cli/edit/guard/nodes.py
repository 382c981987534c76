"""Reading tree-sitter nodes: their text, and the node types that open a scope of their own."""

from __future__ import annotations

from typing import Any

# Bodies whose statements are not top-level (nor the enclosing function's own).
STOP = {
    "lambda", "arrow_function", "function_expression", "function", "generator_function",
    "func_literal", "closure_expression", "lambda_expression", "class_body", "class",
    "field_declaration_list", "enumerator_list",
}  # fmt: skip


def node_text(node: Any, data: bytes) -> str:
    """The source text of ``node`` (``data``: the UTF-8 bytes the tree was parsed from)."""
    return data[node.start_byte : node.end_byte].decode("utf-8", "replace")


def field_text(node: Any, name: str, data: bytes) -> str:
    """The text of ``node``'s child in field ``name``; ``""`` without one."""
    child = node.child_by_field_name(name)
    return node_text(child, data) if child is not None else ""
