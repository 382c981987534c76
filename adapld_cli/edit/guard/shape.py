"""The shape of a function body (rule 3): what a truncated or stubbed body loses.

:func:`shape_of` finds a definition's body in the parse tree and measures it: its real
statements, its value returns, whether control can run off its end, its placeholders. See
``docs/scope-guard.md#rule-3-bodies``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from adapld_cli.edit.guard.nodes import STOP, node_text
from adapld_cli.edit.guard.words import PLACEHOLDER_RE

if TYPE_CHECKING:
    from adapld_cli.edit.guard.scan import Scan
    from adapld_cli.edit.syntax import Definition

BLOCKS = {  # nodes whose named children are statements
    "block", "statement_block", "compound_statement", "constructor_body", "statement_list",
}  # fmt: skip
NESTED = STOP | {  # their returns are not the enclosing function's
    "function_definition", "class_definition", "function_declaration", "method_definition",
    "generator_function_declaration", "class_declaration", "function_item", "impl_item",
    "struct_item", "method_declaration", "constructor_declaration", "struct_specifier",
    "class_specifier",
}  # fmt: skip
COMMENTS = {"comment", "line_comment", "block_comment"}
CLAUSES = {"else_clause", "finally_clause"}
STATEMENT_SUFFIXES = ("statement", "declaration", "definition", "_item")
SWITCHES = {
    "match_statement", "switch_statement", "expression_switch_statement", "type_switch_statement",
    "switch_expression", "match_expression",
}  # fmt: skip
RETURNS = {"return_statement", "return_expression"}
YIELDS = {"yield", "yield_expression"}


@dataclass(frozen=True)
class Body:
    """The shape of a function body (rule 3): what a truncated or stubbed body loses."""

    statements: int  # real statements, nested blocks included (not docstrings, pass, ...)
    returns: int  # return statements with a value (not those of nested functions)
    yields: bool  # a generator (its values need no return)
    exits: bool = False  # control cannot fall off its end (it ends with return/raise...)
    placeholders: int = 0  # `...` statements and comments like "# ... rest unchanged"
    own: int = 0  # real statements outside nested functions and classes, not definitions


def shape_of(scan: Scan, d: Definition) -> Body | None:
    """The shape of ``d``'s body in ``scan``'s tree; ``None`` when it has no body there."""
    node = _find_node(scan.root, d)
    if node is None:
        return None
    body = node.child_by_field_name("body")
    if body is None and node.type == "variable_declarator":  # const f = () => ...
        value = node.child_by_field_name("value")
        body = value.child_by_field_name("body") if value is not None else None
    if body is None:
        return None
    shape = body_shape(body, scan.data)
    # Python puts a comment right under the ``def`` line before the block
    ahead = sum(
        1
        for c in node.named_children
        if c.type in COMMENTS and PLACEHOLDER_RE.search(node_text(c, scan.data))
    )
    return replace(shape, placeholders=shape.placeholders + ahead) if ahead else shape


def _find_node(root: Any, d: Definition) -> Any | None:
    """The node of ``d``: search the nodes that span its lines."""
    first, last = d.start_line - 1, d.end_line - 1
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == d.kind and node.start_point[0] == first and node.end_point[0] == last:
            return node
        stack.extend(
            c
            for c in reversed(node.named_children)
            if c.start_point[0] <= first and c.end_point[0] >= last
        )
    return None


def body_shape(body: Any, data: bytes) -> Body:
    """Count a body's real statements (those of nested functions and classes included: a body
    that moved into a nested helper is kept) and its value returns (not those of nested
    functions and lambdas)."""
    if body.type not in BLOCKS:  # an expression body: (x) => x * 2
        return Body(1, 1, False, True, own=1)
    statements = returns = placeholders = own = 0
    yields = False
    stack = [(body, False)]
    while stack:
        node, nested = stack.pop()
        in_block = node.type in BLOCKS
        for child in node.named_children:
            t = child.type
            if t in COMMENTS:
                placeholders += PLACEHOLDER_RE.search(node_text(child, data)) is not None
                continue
            if t in BLOCKS:
                stack.append((child, nested))
                continue
            if (in_block or t.endswith("_statement")) and not _is_stub(child, data):
                statements += 1
                own += not nested and t not in NESTED and t != "decorated_definition"
            elif t == "expression_statement" and node_text(child, data).strip() == "...":
                placeholders += 1
            if not nested and t in RETURNS and _has_value(child):
                returns += 1
            elif not nested and t in YIELDS:
                yields = True
            stack.append((child, nested or t in NESTED))
    return Body(statements, returns, yields, _exits(body, data), placeholders, own)


def _exits(node: Any, data: bytes) -> bool:
    """Whether control cannot run off the end of ``node``, leniently: it ends with a return or
    a raise, an ``if`` whose every branch (``else`` included) exits, a ``try``/``with`` with a
    part that exits, ``while True``, or a ``match``/``switch``. Loops and plain statements
    fall through."""
    t = node.type
    if t in BLOCKS:
        last = None
        for child in node.named_children:
            if child.type not in COMMENTS and not _is_stub(child, data):
                last = child
        return last is not None and _exits(last, data)
    if t in RETURNS or t in {"raise_statement", "throw_statement"}:
        return True
    if t == "expression_statement":  # Rust: return x;
        return any(c.type in RETURNS for c in node.named_children)
    if not t.endswith(STATEMENT_SUFFIXES):  # Rust: a block's tail expression is its value
        return True
    if t == "if_statement":
        alternatives = node.children_by_field_name("alternative")
        if not alternatives or alternatives[-1].type == "elif_clause":
            return False  # no else: the condition may be false
        branches = [node.child_by_field_name("consequence")]
        branches += [_clause_body(a) for a in alternatives]
        return all(b is not None and _exits(b, data) for b in branches)
    if t in {"try_statement", "with_statement"}:
        parts = [c for c in node.named_children if c.type in BLOCKS]
        parts += [_clause_body(c) for c in node.named_children if c.type in CLAUSES]
        return any(p is not None and _exits(p, data) for p in parts)
    if t == "while_statement":
        condition = node.child_by_field_name("condition")
        forever = {"True", "true"}
        return condition is not None and node_text(condition, data).strip("() ") in forever
    return t in SWITCHES


def _clause_body(clause: Any) -> Any | None:
    for field in ("consequence", "body"):
        child = clause.child_by_field_name(field)
        if child is not None:
            return child
    named = [c for c in clause.named_children if c.type not in COMMENTS]
    return named[-1] if named else None


def _has_value(node: Any) -> bool:
    return any(c.type not in COMMENTS for c in node.named_children)


def _is_stub(node: Any, data: bytes) -> bool:
    """``pass``, ``...``, a bare string (a docstring), ``raise NotImplementedError``,
    ``todo!()``, an empty statement."""
    t = node.type
    if t in {"pass_statement", "empty_statement"}:
        return True
    if t == "raise_statement":
        return node_text(node, data).split("(", 1)[0].split() == ["raise", "NotImplementedError"]
    if t == "macro_invocation":  # Rust: todo!() as a block's tail
        return node_text(node, data).split("!", 1)[0] in {"todo", "unimplemented"}
    if t == "expression_statement":
        inner = [c for c in node.named_children if c.type not in COMMENTS]
        if len(inner) != 1:
            return False
        if inner[0].type in {"string", "concatenated_string", "ellipsis"}:
            return True
        return inner[0].type == "macro_invocation" and _is_stub(inner[0], data)
    return False
