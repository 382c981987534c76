"""The scope guard: refuse a result that loses what the instruction did not ask to lose.

For the integrator
------------------
Call it on every result that would be written or reported (in place, ``-o``, ``--check``,
``--diff``, ``--stdout``), after the truncation and syntax checks::

    from adapld_cli.edit.guard import check_scope

    verdict = check_scope(source.text, new_text, language=lang, instruction=instruction)
    if verdict.lost and not force:
        status = "refused"                 # exit 1, nothing written
        message = verdict.refusal          # goes after "inv.py: refused — "

``verdict.lost`` is the only thing to branch on. ``verdict.refusal`` reads
``would delete Item, Inventory, report (+6 more), which the instruction does not name; nothing
written (--force writes it anyway)`` (or ``would drop 50 of 55 non-blank lines, which the
instruction does not ask for; ...``); ``verdict.message`` is the same without the ``;
nothing written ...`` tail. ``verdict.names`` lists what would be lost (a lost class stands for
its methods; definitions and assignments in source order, then imports). ``language`` is the
id from :func:`adapld_cli.edit.syntax.language_for` (``result.lang``): a language with a
grammar gets rule 1 on its definitions and statements, ``"json"``/``"toml"``/``"yaml"`` get
rule 1 on their keys, anything else (``None``, ``"shell"``...) only rule 2. The function is
pure, never writes, and takes a few milliseconds (two tree-sitter parses per text).

Rules
-----
1. **Structure** (languages with a grammar, when ``before`` parses cleanly): the definitions of
   :func:`~adapld_cli.edit.syntax.outline` (``Item.total_value``...) and the top-level
   statements (assignments and constants by target name, imports by imported name, C macros and
   includes; statements inside ``if``/``try``/preprocessor blocks count, those inside function
   or class bodies do not) of ``before`` are compared with ``after`` as multisets of names (two
   definitions of one name must stay two). A name present before and missing after is *lost*
   unless

   - the instruction names it: the full name or its last part (``total_value`` names
     ``Item.total_value``), as a whole identifier, case-sensitive; a lowercase word that
     starts a clause (the imperative verb in ``add a docstring to size``) does not count;
   - it was renamed: a new name of the same kind under the same parent appeared, and either
     the text is the same except for the name, or the instruction speaks of renaming
     (``rename``, ``call it``...) and names the new name;
   - it moved: the same name of the same kind appeared under another parent and the
     instruction speaks of moving (``move``, ``extract``, ``wrap``, ``convert``, ``refactor``,
     ``split``, ``group``, ``nest``, ``reorganise``, ``restructure``);
   - an enclosing definition was renamed or is allowed to go (``Item`` renamed to ``Product``
     keeps ``Item.total_value`` as ``Product.total_value``);
   - the instruction asks to delete a whole kind: a deletion word (rule 2) with one of
     ``unused/dead/redundant/duplicate/obsolete/unnecessary/all/every`` and a kind noun
     (``imports``, ``functions``/``helpers``/``methods``, ``classes``, ``constants``/
     ``variables``/``macros``, ``keys``/``entries``/``settings``; ``code`` means every kind),
     e.g. "remove unused imports".

   So a method that moves to another class (or a function dedented out of its class) is lost
   unless the instruction names it or asks for a move. For JSON, TOML and YAML (when
   ``before`` parses) the names are every mapping key as a dotted path (``tool.ruff.select``;
   keys of list items repeat under the list's path), compared the same way.
2. **Line share** (every file): dropping more than half of ``before``'s non-blank lines (and
   at least 3 of them, or all of them) is lost unless the instruction asks to delete or shrink:
   one of the words in :data:`DELETION_WORDS` (delete, remove, drop, strip, shorten, simplify,
   trim, cut, prune, purge, erase, eliminate, clean up, condense, compact, minify, collapse,
   merge, combine, inline, dedupe, reduce, truncate, discard, get rid of, keep only, extract,
   and their inflections).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from adapld_cli.edit.formats import data_keys, first_format_error
from adapld_cli.edit.syntax import Definition, first_syntax_error, has_grammar, outline, parse

REFUSAL_TAIL = "; nothing written (--force writes it anyway)"
SHOWN_NAMES = 3  # names spelled out in the message before "(+N more)"

# Deletion/shrinking words (inflections spelled out so "cutoff" or "empty" never match).
DELETION_WORDS: tuple[str, ...] = (
    "delete", "deletes", "deleted", "deleting", "deletion",
    "remove", "removes", "removed", "removing", "removal",
    "drop", "drops", "dropped", "dropping",
    "strip", "strips", "stripped", "stripping",
    "shorten", "shortens", "shortened", "shortening", "shorter",
    "simplify", "simplifies", "simplified", "simplifying", "simpler",
    "trim", "trims", "trimmed", "trimming",
    "cut", "cuts", "cutting",
    "prune", "prunes", "pruned", "pruning",
    "purge", "purges", "purged", "purging",
    "erase", "erases", "erased", "erasing",
    "eliminate", "eliminates", "eliminated", "eliminating",
    "clean up", "cleanup", "clean-up",
    "condense", "condensed", "compact", "compacted", "minify", "minified",
    "collapse", "collapsed", "merge", "merged", "combine", "combined",
    "inline", "inlined", "dedupe", "deduplicate", "deduplicated",
    "reduce", "reduced", "truncate", "truncated", "discard", "discarded",
    "get rid", "rid of", "keep only", "only keep", "extract", "extracted",
)  # fmt: skip
_DELETION_RE = re.compile(
    r"(?<![\w-])(?:" + "|".join(re.escape(w) for w in DELETION_WORDS) + r")(?![\w-])",
    re.IGNORECASE,
)
_WHOLESALE_RE = re.compile(
    r"\b(?:unused|dead|redundant|duplicated?|obsolete|deprecated|unnecessary|all|every)\b",
    re.IGNORECASE,
)
# kind noun -> item kinds it covers ("code" covers all)
_KIND_NOUNS: dict[str, tuple[str, ...]] = {
    r"imports?|includes?|use (?:statements?|declarations?)": ("import",),
    r"functions?|methods?|helpers?|procedures?|constructors?|funcs?": ("function",),
    r"class(?:es)?|structs?|types?|interfaces?|enums?|traits?|records?": ("class",),
    r"constants?|variables?|globals?|assignments?|macros?|defines?|statics?": ("assignment",),
    r"keys?|entry|entries|fields?|settings?|options?|sections?|tables?": ("key",),
    r"code": ("import", "function", "class", "assignment", "key"),
}
_WORD_RE = re.compile(r"[\w$]+")
_HEADER_RE = re.compile(r"(.+?)(\.(?:h|hh|hpp|hxx|h\+\+|inc|inl|tcc))")
_CLAUSE_START_RE = re.compile(
    r"(?:^|[.;:!?,\n(])\s*(?:(?:please|also|then|and|now|just|first|finally)\s+)*$", re.I
)
_RENAME_RE = re.compile(r"\b(?:renam\w*|call(?:ed)? it|name it)\b", re.IGNORECASE)
_SET_KINDS = {"assignment", "import"}  # compared by presence, not count
_MOVE_RE = re.compile(
    r"\b(?:mov(?:e|es|ed|ing)|extract\w*|wrap\w*|convert\w*|refactor\w*|split\w*|group\w*"
    r"|nest\w*|reorgani[sz]\w*|restructur\w*)\b",
    re.IGNORECASE,
)
DATA_FORMATS = frozenset({"json", "toml", "yaml"})  # language ids whose "definitions" are keys
_CONTAINERS = {"namespace_definition", "mod_item", "internal_module"}  # qualify statements
_STOP = {  # bodies whose statements are not top-level
    "lambda", "arrow_function", "function_expression", "function", "generator_function",
    "func_literal", "closure_expression", "lambda_expression", "class_body", "class",
    "field_declaration_list", "enumerator_list",
}  # fmt: skip
_FN_VALUES = {"arrow_function", "function_expression", "function", "generator_function"}


@dataclass(frozen=True)
class Item:
    """One named thing of a file: a definition or a top-level statement."""

    name: str  # qualified: "Item.total_value", "DATA", "dataclass"
    kind: str  # "function" | "class" | "assignment" | "import" | "key"
    line: int  # 1-based
    text: str = ""


@dataclass(frozen=True)
class ScopeVerdict:
    """What :func:`check_scope` found. Branch on :attr:`lost` only.

    - ``lost``: the result loses something the instruction did not ask for: refuse it (exit 1,
      nothing written) unless ``--force``.
    - ``names``: what would be lost, for the message (a lost class stands for its members;
      definitions and assignments in source order, then imports); may be empty when only the
      line rule fired.
    - ``allowed``: names that went missing with the instruction's blessing (named, or a kind
      it asks to delete); ``renamed``: ``(old, new)`` pairs counted as kept (renames and
      moves: ``("load", "Store.load")``).
    - ``lines_before`` / ``lines_after``: non-blank line counts; ``asks_to_delete``: the
      instruction has a deletion word; ``structural``: names were compared (a grammar or a
      data format, ``before`` parses and has names); ``line_rule``: rule 2 fired.
    """

    lost: bool
    names: tuple[str, ...] = ()
    allowed: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()
    lines_before: int = 0
    lines_after: int = 0
    asks_to_delete: bool = False
    structural: bool = False
    line_rule: bool = False

    @property
    def dropped_lines(self) -> int:
        return max(0, self.lines_before - self.lines_after)

    @property
    def message(self) -> str | None:
        """``would delete A, B, C (+N more), which the instruction does not name`` (or the
        line-share wording when no name is lost); ``None`` when not lost."""
        if not self.lost:
            return None
        if self.names:
            return describe_lost(self.names)
        return describe_dropped(self.dropped_lines, self.lines_before)

    @property
    def refusal(self) -> str | None:
        """:attr:`message` plus ``; nothing written (--force writes it anyway)``: the text after
        ``inv.py: refused — ``. ``None`` when not lost."""
        message = self.message
        return None if message is None else message + REFUSAL_TAIL


def describe_lost(names: tuple[str, ...] | list[str], shown: int = SHOWN_NAMES) -> str:
    """``would delete Item, Inventory, report (+6 more), which the instruction does not name``."""
    more = f" (+{len(names) - shown} more)" if len(names) > shown else ""
    return f"would delete {', '.join(names[:shown])}{more}, which the instruction does not name"


def describe_dropped(dropped: int, total: int) -> str:
    """``would drop 65 of 68 non-blank lines, which the instruction does not ask for``."""
    return (
        f"would drop {dropped} of {total} non-blank lines, which the instruction does not ask for"
    )


def check_scope(before: str, after: str, *, language: str | None, instruction: str) -> ScopeVerdict:
    """Judge whether ``after`` (the model's whole file) loses anything of ``before`` that
    ``instruction`` does not ask to lose. Pure; see the module docstring for the rules."""
    n_before, n_after = non_blank_lines(before), non_blank_lines(after)
    asks = asks_to_delete(instruction)
    base = {"lines_before": n_before, "lines_after": n_after, "asks_to_delete": asks}
    if before == after:
        return ScopeVerdict(lost=False, **base)
    line_rule = not asks and drops_too_much(n_before, n_after)
    old = file_items(before, language) if _structural(before, language) else None
    if not old:
        return ScopeVerdict(lost=line_rule, line_rule=line_rule, **base)
    lost, allowed, renamed = compare_items(old, file_items(after, language) or [], instruction)
    return ScopeVerdict(
        lost=bool(lost) or line_rule,
        names=tuple(lost),
        allowed=tuple(allowed),
        renamed=tuple(renamed),
        structural=True,
        line_rule=line_rule,
        **base,
    )


# -- line rule -------------------------------------------------------------------------------
def non_blank_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip())


def drops_too_much(n_before: int, n_after: int) -> bool:
    """More than half of the non-blank lines gone, and at least 3 of them (or all)."""
    dropped = n_before - n_after
    return 2 * dropped > n_before and (dropped >= 3 or n_after == 0)


def asks_to_delete(instruction: str) -> bool:
    """Whether the instruction has one of :data:`DELETION_WORDS` (case-insensitive)."""
    return _DELETION_RE.search(instruction) is not None


# -- instruction names -----------------------------------------------------------------------
def names_in(name: str, instruction: str) -> bool:
    """Whether ``instruction`` names ``name`` (see rule 1 of the module docstring)."""
    return any(_mentions(c, instruction) for c in _candidates(name))


def _candidates(name: str) -> set[str]:
    """Ways an instruction may name ``name``: itself and its last part (``Item.total_value``
    -> ``total_value``, ``os/exec`` -> ``exec``, ``impl Shape`` -> ``Shape``, ``sys/types.h``
    -> ``types.h`` and ``types``)."""
    out = {name}
    header = _HEADER_RE.fullmatch(name)
    if header:  # a C/C++ include: the file name and its stem, not the extension
        out.update(
            {
                header.group(1).rsplit("/", 1)[-1],
                header.group(1).rsplit("/", 1)[-1] + header.group(2),
            }
        )
        return out
    for sep in (".", "::", "/"):
        if sep in name:
            out.add(name.rsplit(sep, 1)[-1])
    if name.startswith("impl "):
        out.add(name[5:].split(".", 1)[0])
    return {c for c in out if c and c != "*"}


@lru_cache(maxsize=4096)
def _mentions(word: str, instruction: str) -> bool:
    if word not in instruction:
        return False
    pattern = re.compile(r"(?<![\w$])" + re.escape(word) + r"(?![\w$])")
    verb_like = re.fullmatch(r"[a-z]+", word) is not None
    for m in pattern.finditer(instruction):
        if verb_like and _CLAUSE_START_RE.search(instruction[: m.start()]):
            continue
        return True
    return False


def wholesale_kinds(instruction: str) -> set[str]:
    """Kinds the instruction asks to delete wholesale ("remove unused imports" -> import)."""
    if not asks_to_delete(instruction) or not _WHOLESALE_RE.search(instruction):
        return set()
    kinds: set[str] = set()
    for nouns, covered in _KIND_NOUNS.items():
        if re.search(r"\b(?:" + nouns + r")\b", instruction, re.IGNORECASE):
            kinds.update(covered)
    return kinds


# -- comparison ------------------------------------------------------------------------------
def compare_items(
    old: list[Item], new: list[Item], instruction: str
) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """``(lost names for display, allowed names, renamed pairs)`` for ``old`` -> ``new``."""
    missing = _missing(old, new)
    partners = _Partners(_missing(new, old), instruction)
    present = {i.name for i in new}
    kinds = wholesale_kinds(instruction)
    status: dict[str, str] = {}  # name -> "allowed" | "renamed" | "lost"
    new_names: dict[str, str] = {}  # renamed old name -> new name
    renamed: list[tuple[str, str]] = []
    for item in sorted(missing, key=lambda i: (i.name.count("."), i.line)):  # parents first
        parent = _missing_ancestor(item.name, status)
        if parent is not None and status[parent] == "lost":
            status[item.name] = "lost"  # stands under its lost parent
            continue
        if parent is not None and status[parent] == "allowed":
            status[item.name] = "allowed"
            continue
        if parent is not None and new_names[parent] + item.name[len(parent) :] in present:
            status[item.name] = "renamed"  # moved along with its renamed parent
            continue
        partner = partners.take(item)
        if partner is not None:
            renamed.append((item.name, partner.name))
            new_names[item.name] = partner.name
            status[item.name] = "renamed"
        elif names_in(item.name, instruction) or item.kind in kinds:
            status[item.name] = "allowed"
        else:
            status[item.name] = "lost"
    ordered = _display_order(missing)
    lost = [i.name for i in ordered if status[i.name] == "lost"]
    shown = [n for n in lost if _missing_ancestor(n, status) is None]
    allowed = [i.name for i in ordered if status[i.name] == "allowed"]
    return _unique(shown), _unique(allowed), renamed


def _missing(old: list[Item], new: list[Item]) -> list[Item]:
    """Items of ``old`` beyond their count in ``new`` (the later duplicates). Definitions and
    keys count as a multiset (an overload or a property setter is one of two); assignments
    and imports only as present or not (``df = ...`` twice may become once)."""
    left = Counter(i.name for i in new)
    seen: Counter[str] = Counter()
    out = []
    for item in old:
        seen[item.name] += 1
        limit = left[item.name] if item.kind not in _SET_KINDS else min(left[item.name], 1)
        if seen[item.name] > limit and (item.kind not in _SET_KINDS or seen[item.name] == 1):
            out.append(item)
    return out


def _missing_ancestor(name: str, status: dict[str, str]) -> str | None:
    parts = name.split(".")
    for k in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:k])
        if prefix in status and prefix != name:
            return prefix
    return None


class _Partners:
    """The added items, indexed to find what a missing item became (each used once):

    - a rename: same kind and parent, and the same text once each item's own name is blanked
      out, or (when the instruction speaks of renaming) a new name the instruction names;
    - a move: same kind and name under another parent, when the instruction speaks of moving
      (move, extract, wrap, convert, refactor, split, group, nest, reorganise, restructure).
    """

    def __init__(self, added: list[Item], instruction: str) -> None:
        self.used: set[int] = set()
        self.by_text: dict[tuple[str, str, str], list[Item]] = {}
        self.by_leaf: dict[tuple[str, str], list[Item]] = {}
        self.named: dict[tuple[str, str], list[Item]] = {}
        asks_rename = _RENAME_RE.search(instruction) is not None
        self.asks_move = _MOVE_RE.search(instruction) is not None
        for cand in added:
            parent, _, leaf = cand.name.rpartition(".")
            if cand.text:
                key = (cand.kind, parent, _blank(cand.text, leaf))
                self.by_text.setdefault(key, []).append(cand)
            self.by_leaf.setdefault((cand.kind, leaf), []).append(cand)
            if asks_rename and names_in(cand.name, instruction):
                self.named.setdefault((cand.kind, parent), []).append(cand)

    def take(self, item: Item) -> Item | None:
        parent, _, leaf = item.name.rpartition(".")
        if item.text:
            found = self._first(self.by_text.get((item.kind, parent, _blank(item.text, leaf))))
            if found is not None:
                return found
        found = self._first(self.named.get((item.kind, parent)))
        if found is None and self.asks_move:
            moved = self.by_leaf.get((item.kind, leaf), [])
            found = self._first([c for c in moved if c.name.rpartition(".")[0] != parent])
        return found

    def _first(self, cands: list[Item] | None) -> Item | None:
        for cand in cands or []:
            if id(cand) not in self.used:
                self.used.add(id(cand))
                return cand
        return None


def _blank(text: str, name: str) -> str:
    """``text`` with the whole-word occurrences of ``name`` blanked out (for rename pairing)."""
    if name not in text:
        return text
    return _WORD_RE.sub(lambda m: "\0" if m.group() == name else m.group(), text)


def _display_order(items: list[Item]) -> list[Item]:
    return sorted(items, key=lambda i: (i.kind == "import", i.line))


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


# -- items of a file -------------------------------------------------------------------------
def _structural(before: str, language: str | None) -> bool:
    if language in DATA_FORMATS:
        return first_format_error(before, language) is None
    return has_grammar(language) and first_syntax_error(before, language) is None


def file_items(text: str, language: str | None) -> list[Item] | None:
    """Definitions and top-level statements of ``text`` in source order (for JSON, TOML and
    YAML: every mapping key as a dotted path); ``None`` without a grammar."""
    if language in DATA_FORMATS:
        keys = data_keys(text, language)
        return [Item(k, "key", n) for n, k in enumerate(keys or [], start=1)]
    tree = parse(text, language)
    if tree is None:
        return None
    defs = outline(text, language)
    items = [Item(d.name, _def_kind(d), d.start_line, d.text) for d in defs]
    index = {(d.kind, d.start_line, d.end_line): d.name for d in defs}
    items += _statements(tree.root_node, text.encode("utf-8"), index)
    return sorted(items, key=lambda i: i.line)


def _def_kind(d: Definition) -> str:
    kind = d.kind
    if any(w in kind for w in ("function", "method", "constructor", "macro")):
        return "function"
    return "function" if kind == "variable_declarator" else "class"


def _statements(root: Any, data: bytes, defs: dict[tuple[str, int, int], str]) -> list[Item]:
    """Top-level statements: walk the tree, entering blocks but not function/class bodies."""
    found: list[Item] = []
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        node, prefix = stack.pop()
        key = (node.type, node.start_point[0] + 1, node.end_point[0] + 1)
        if key in defs:
            if node.type not in _CONTAINERS:
                continue
            prefix = defs[key] + "."
        elif node.type in _STOP:
            continue
        names, kind = _statement_names(node, data)
        if kind is not None:
            line = node.start_point[0] + 1
            body = _text(node, data)
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
        if value is not None and value.type in _FN_VALUES:
            return [], "assignment"  # an outline definition already
        return _pattern_names(node.child_by_field_name("name"), data), "assignment"
    if t in {"const_spec", "var_spec"}:
        return [_text(n, data) for n in node.children_by_field_name("name")], "assignment"
    if t in {"const_item", "static_item", "preproc_def", "preproc_function_def"}:
        return [_field_text(node, "name", data)], "assignment"
    if t in {"alias_declaration"}:
        return [_field_text(node, "name", data)], "class"
    if t in {"declaration", "type_definition"}:
        names = [_declarator_name(d, data) for d in node.children_by_field_name("declarator")]
        return [n for n in names if n], "assignment"
    if t == "using_declaration":
        named = [c for c in node.named_children]
        return [_text(named[-1], data)] if named else [], "import"
    return [], None


def _import_names(node: Any, data: bytes) -> list[str]:
    """Python imports: the imported names (``numpy`` for ``import numpy as np``)."""
    names = []
    for child in node.children_by_field_name("name"):
        target = child.child_by_field_name("name") if child.type == "aliased_import" else child
        names.append(_text(target, data))
    if node.type == "import_from_statement" and any(
        c.type == "wildcard_import" for c in node.children
    ):
        names.append(_field_text(node, "module_name", data) + ".*")
    if node.type == "import_statement" and node.child_by_field_name("source") is not None:
        names = _js_import_names(node, data)
    return names


def _js_import_names(node: Any, data: bytes) -> list[str]:
    names: list[str] = []
    for clause in (c for c in node.named_children if c.type == "import_clause"):
        for part in clause.named_children:
            if part.type == "identifier":
                names.append(_text(part, data))
            elif part.type == "namespace_import":
                names += [_text(c, data) for c in part.named_children]
            elif part.type == "named_imports":
                for spec in part.named_children:
                    target = spec.child_by_field_name("name")
                    if target is not None:
                        names.append(_text(target, data))
    if not names:  # side-effect import: import "./style.css"
        names.append(_text(node.child_by_field_name("source"), data).strip("'\"`"))
    return names


def _other_import_names(node: Any, data: bytes) -> list[str]:
    t = node.type
    if t == "import_spec":  # Go: the path
        return [_field_text(node, "path", data).strip('"`')]
    if t == "preproc_include":  # C/C++: the header
        return [_field_text(node, "path", data).strip('<>"')]
    if t == "import_declaration":  # Java: the class (or package.*)
        text = _text(node, data)
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
        return [_field_text(node, "name", data)]
    return [_text(node, data)]  # identifier, self, use_wildcard ("c::*")


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
        return [_text(node, data)]
    if node.type in {"attribute", "member_expression"}:
        text = _text(node, data)
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
            return _text(node, data)
        if node.type in {"qualified_identifier", "destructor_name", "operator_name"}:
            return _text(node, data)
        inner = node.child_by_field_name("declarator")
        if inner is None:  # reference_declarator and friends: the last named child
            named = node.named_children
            inner = named[-1] if named else None
        node = inner
    return None


def _field_text(node: Any, name: str, data: bytes) -> str:
    child = node.child_by_field_name(name)
    return _text(child, data) if child is not None else ""


def _text(node: Any, data: bytes) -> str:
    return data[node.start_byte : node.end_byte].decode("utf-8", "replace")


__all__ = [
    "DELETION_WORDS",
    "REFUSAL_TAIL",
    "Item",
    "ScopeVerdict",
    "asks_to_delete",
    "check_scope",
    "describe_dropped",
    "describe_lost",
    "file_items",
    "names_in",
    "non_blank_lines",
    "wholesale_kinds",
]
