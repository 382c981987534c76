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
written (--force writes it anyway)`` (or ``would empty the body of total, report, which the
instruction does not name; ...``, ``would delete report and empty the body of total, ...``, or
``would drop 50 of 55 non-blank lines, which the instruction does not ask for; ...``);
``verdict.message`` is the same without the ``; nothing written ...`` tail. ``verdict.names``
lists what would be lost (a lost class stands for its methods; definitions and assignments in
source order, then imports), ``verdict.emptied`` the functions whose body would be gutted.
``language`` is the id from :func:`adapld_cli.edit.syntax.language_for` (``result.lang``): a
language with a grammar gets rules 1 and 3 on its definitions and statements,
``"json"``/``"toml"``/``"yaml"`` get rule 1 on their keys, anything else (``None``,
``"shell"``...) only rule 2. The function is pure, never writes, and takes a few milliseconds
(two tree-sitter parses per text, and a walk of the functions whose text changed).

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
     the text is the same except for the name (for a definition: and the result no longer
     uses the old name, so ``Leaf.depth`` is no rename of an added ``Leaf.count_leaves`` with
     the same body while ``child.depth()`` is still called), or the instruction speaks of
     renaming (``rename``, ``call it``, ``name it``, ``name to``: "change the function name
     to ``total_in_range``") and names the new name, whose text is akin to the old
     (:func:`kinship`: at least :data:`RENAME_KINSHIP` of the old's words) and more akin to it
     than to any other missing item of its kind and parent; or its name contains one the
     instruction replaces (it names both ``find_managers_manager``, gone, and
     ``find_manager_n``, new, of the same kind and parent) and the same substitution gives a
     new name of the same kind and parent (``find_managers_manager_help`` ->
     ``find_manager_n_help``); or, for a definition not otherwise allowed, the result no
     longer uses the old name and the new definition holds most of its words
     (:func:`absorbs`: ``class NFA`` rewritten as ``class DFA``). The two unasked kinds (same
     text, rewritten) do not count when the instruction asks for renames and names a new
     name, unless it names the old or the new name of this one: asked to rename
     ``rgb_to_hsv``, a result that also renamed ``hsv_to_rgb`` loses ``hsv_to_rgb``;
   - it moved: the same name of the same kind appeared under another parent and the
     instruction asks to move (:func:`asks_to_move`: ``move``, ``extract``, ``wrap``,
     ``convert``, ``refactor``, ``split``, ``group``, ``nest``, ``reorganise``,
     ``restructure`` as a request, not "should be split by ``self.split``");
   - an enclosing definition was renamed or is allowed to go (``Item`` renamed to ``Product``
     keeps ``Item.total_value`` as ``Product.total_value``);
   - the instruction asks to delete a whole kind: a deletion request (rule 3's test, so not
     "change all the classes to support a ``remove`` method") with one of
     ``unused/dead/redundant/duplicate/obsolete/unnecessary/all/every`` outside code spans
     (not "remove the `duplicate` methods") and a kind noun
     (``imports``, ``functions``/``helpers``/``methods``, ``classes``, ``constants``/
     ``variables``/``macros``, ``keys``/``entries``/``settings``; ``code`` means every kind),
     e.g. "remove unused imports";
   - it is an import or a top-level assignment that the edit made dead: in ``before`` its name
     (the import's alias, else its first or last dotted part; the assignment's target) was used
     only inside definitions the instruction names and ``after`` still has, and ``after`` no
     longer mentions it anywhere (``import heapq`` when the instruction names
     ``distances_to``, its only user, and the new ``distances_to`` no longer uses it);
   - it is a definition whose body moved into the definitions the result adds: the result no
     longer mentions its name and they hold most of its words (:func:`absorbs`:
     ``process_message`` turned into ``TextMessage.process``, ``ImageMessage.process`` and a
     factory). A helper the named code stopped calling is not dead: it may still be API.

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
3. **Bodies** (languages with a grammar, when ``before`` parses cleanly): a function or method
   kept by name (or renamed/moved under rule 1) whose text changed has its body measured
   before and after (:func:`body_shape`): its real statements, counted through nested blocks
   and nested functions (not docstrings, ``pass``, ``...``, comments, ``raise
   NotImplementedError``, ``todo!()``), its ``return <value>`` statements (not those of nested
   functions), whether control can run off its end, and its placeholders (``...`` statements,
   comments with ``...``, ``unchanged``, ``rest of``, ``existing code``...). Its body is
   *emptied* (lost, listed in ``verdict.emptied``) when (:func:`gutted`)

   - it lost statements and gained a placeholder (``# ... rest unchanged``); or, unless the
     instruction *requests* a deletion (:func:`asks_to_shrink`: a verb of
     :data:`SHRINK_VERBS` that starts a clause or follows and/then/also/or/you/please,
     "remove the prints", not "a ``remove`` method" or "merge sort"; or
     ``shorter``/``simpler``):
   - it had real statements and has none left (``...``, ``pass``, a docstring), or none
     outside nested definitions (:func:`stranded`: the file cut inside a nested helper; this
     one even when the instruction names the function);
   - it returned values and returns none (and is no generator), or it returned on every path
     (ends with a return or raise, an ``if``/``else`` whose branches all do...) and now runs
     off its end: the file cut short after its loop, its last ``return`` gone;
   - it kept fewer than a third (:data:`KEPT_SHARE`) of at least 6 (:data:`MIN_STATEMENTS`)
     statements, and the functions the result adds hold fewer statements than it lost, or
     fewer than half of the words it lost (so code moved into new helpers is kept, a file cut
     short in it is not);

   unless the instruction names it or a function around or inside it (a nested helper is
   part of its enclosing function; an enclosing class does not count), by rule 1's naming. An
   emptied function stands for the functions nested in it. A method of a renamed class is
   measured against its namesake in the new class (``NFA.transition`` -> ``DFA.transition``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
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
# The imperative forms among them (rule 3 asks for a request, not a mention).
SHRINK_VERBS: tuple[str, ...] = (
    "delete", "remove", "drop", "strip", "shorten", "simplify", "trim", "cut", "prune", "purge",
    "erase", "eliminate", "clean up", "condense", "compact", "minify", "collapse", "merge",
    "combine", "inline", "dedupe", "deduplicate", "reduce", "truncate", "discard", "get rid",
    "keep only", "only keep", "extract", "shorter", "simpler",
)  # fmt: skip
_SHRINK_RE = re.compile(
    r"(?<![\w-])(?:" + "|".join(re.escape(w) for w in SHRINK_VERBS) + r")(?![\w-])",
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
_CLAUSE_START_RE = re.compile(  # a full stop ends a clause, the dot of ``self.split`` does not
    r"(?:^|[;:!?,\n(]|\.\s)\s*(?:(?:please|also|then|and|now|just|first|finally)\s+)*$", re.I
)
_REQUEST_LEAD_RE = re.compile(r"\b(?:and|then|also|or|you|please)\s+$", re.IGNORECASE)
_RENAME_RE = re.compile(r"\b(?:renam\w*|call(?:ed)? it|name it|names? to)\b", re.IGNORECASE)
_CODE_SPAN_RE = re.compile(r"`[^`\n]*`")  # `duplicate` is a name, not a wholesale word
_SET_KINDS = {"assignment", "import"}  # compared by presence, not count
_DEF_KINDS = {"function", "class"}
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
# rule 1: a rename the instruction names needs this kinship (share of the old words it kept)
RENAME_KINSHIP = 0.5
# rule 1: a definition absorbed into added ones (or rewritten under a new name): this share of
# its words, at least that many, recur there
ABSORBED_SHARE = 0.8
ABSORBED_MIN_WORDS = 12
_COMMON_WORDS = frozenset({  # keywords and the like: they make any two bodies look akin
    "def", "class", "return", "if", "elif", "else", "for", "while", "in", "not", "and", "or",
    "is", "self", "this", "None", "True", "False", "pass", "lambda", "with", "as", "try",
    "except", "finally", "raise", "yield", "break", "continue", "import", "from", "const",
    "let", "var", "function", "fn", "pub", "mut", "impl", "struct", "new", "null", "nil",
    "func", "int", "void", "static", "public", "private", "final", "async", "await",
})  # fmt: skip
# rule 3: a function that kept fewer than KEPT_SHARE of at least MIN_STATEMENTS statements
MIN_STATEMENTS = 6
KEPT_SHARE = 1 / 3
_BLOCKS = {  # nodes whose named children are statements
    "block", "statement_block", "compound_statement", "constructor_body", "statement_list",
}  # fmt: skip
_NESTED = _STOP | {  # their returns are not the enclosing function's
    "function_definition", "class_definition", "function_declaration", "method_definition",
    "generator_function_declaration", "class_declaration", "function_item", "impl_item",
    "struct_item", "method_declaration", "constructor_declaration", "struct_specifier",
    "class_specifier",
}  # fmt: skip
_COMMENTS = {"comment", "line_comment", "block_comment"}
_CLAUSES = {"else_clause", "finally_clause"}
_STATEMENT_SUFFIXES = ("statement", "declaration", "definition", "_item")
_PLACEHOLDER_RE = re.compile(  # "# ... rest unchanged", "// existing code", "# (omitted)"
    r"\.\.\.|…|\b(?:unchanged|as before|rest of|existing (?:code|logic|implementation)|omitted)\b",
    re.IGNORECASE,
)
_SWITCHES = {
    "match_statement", "switch_statement", "expression_switch_statement", "type_switch_statement",
    "switch_expression", "match_expression",
}  # fmt: skip
_RETURNS = {"return_statement", "return_expression"}
_YIELDS = {"yield", "yield_expression"}


@dataclass(frozen=True)
class Item:
    """One named thing of a file: a definition or a top-level statement."""

    name: str  # qualified: "Item.total_value", "DATA", "dataclass"
    kind: str  # "function" | "class" | "assignment" | "import" | "key"
    line: int  # 1-based
    text: str = ""


@dataclass(frozen=True)
class Body:
    """The shape of a function body (rule 3): what a truncated or stubbed body loses."""

    statements: int  # real statements, nested blocks included (not docstrings, pass, ...)
    returns: int  # return statements with a value (not those of nested functions)
    yields: bool  # a generator (its values need no return)
    exits: bool = False  # control cannot fall off its end (it ends with return/raise...)
    placeholders: int = 0  # `...` statements and comments like "# ... rest unchanged"
    own: int = 0  # real statements outside nested functions and classes, not definitions


@dataclass(frozen=True)
class ScopeVerdict:
    """What :func:`check_scope` found. Branch on :attr:`lost` only.

    - ``lost``: the result loses something the instruction did not ask for: refuse it (exit 1,
      nothing written) unless ``--force``.
    - ``names``: what would be lost, for the message (a lost class stands for its members;
      definitions and assignments in source order, then imports); may be empty when only the
      line rule fired.
    - ``allowed``: names that went missing with the instruction's blessing (named, a kind it
      asks to delete, an import/assignment the edit made dead, or a definition absorbed into
      the added ones); ``renamed``: ``(old, new)`` pairs counted as kept (renames and moves:
      ``("load", "Store.load")``).
    - ``emptied``: functions kept by name whose body was gutted (rule 3), for the message.
    - ``lines_before`` / ``lines_after``: non-blank line counts; ``asks_to_delete``: the
      instruction has a deletion word; ``structural``: names were compared (a grammar or a
      data format, ``before`` parses and has names); ``line_rule``: rule 2 fired.
    """

    lost: bool
    names: tuple[str, ...] = ()
    emptied: tuple[str, ...] = ()
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
        if self.names or self.emptied:
            return describe_lost(self.names, emptied=self.emptied)
        return describe_dropped(self.dropped_lines, self.lines_before)

    @property
    def refusal(self) -> str | None:
        """:attr:`message` plus ``; nothing written (--force writes it anyway)``: the text after
        ``inv.py: refused — ``. ``None`` when not lost."""
        message = self.message
        return None if message is None else message + REFUSAL_TAIL


def describe_lost(
    names: tuple[str, ...] | list[str],
    shown: int = SHOWN_NAMES,
    *,
    emptied: tuple[str, ...] | list[str] = (),
) -> str:
    """``would delete Item, Inventory, report (+6 more), which the instruction does not name``;
    with ``emptied``: ``would empty the body of f, g, ...`` (or ``would delete A and empty the
    body of f, ...``)."""
    parts = []
    if names:
        parts.append(f"delete {_listed(names, shown)}")
    if emptied:
        parts.append(f"empty the body of {_listed(emptied, shown)}")
    return f"would {' and '.join(parts)}, which the instruction does not name"


def _listed(names: tuple[str, ...] | list[str], shown: int) -> str:
    more = f" (+{len(names) - shown} more)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


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
    old = _scan(before, language) if _structural(before, language) else None
    if old is None or not old.items:
        return ScopeVerdict(lost=line_rule, line_rule=line_rule, **base)
    new = _scan(after, language)
    lost, allowed, renamed = compare_items(
        old.items, new.items if new else [], instruction, texts=(before, after)
    )
    emptied = _emptied_bodies(old, new, instruction, renamed) if new is not None else []
    return ScopeVerdict(
        lost=bool(lost or emptied) or line_rule,
        names=tuple(lost),
        emptied=tuple(emptied),
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


def asks_to_shrink(instruction: str) -> bool:
    """Whether the instruction *requests* a deletion (rule 3): a verb of :data:`SHRINK_VERBS`
    that starts a clause or follows ``and``/``then``/``also``/``or``/``you``/``please``
    ("remove the prints", "1. Remove the ``dup()`` method", "add X and drop Y"), or
    ``shorter``/``simpler`` anywhere; not a deletion word that describes ("a ``remove``
    method", "merge sort", "alpha-beta pruning", "on insertion, deletion", "it should reduce
    traffic", "scores to prune branches")."""
    return _requested(_SHRINK_RE, instruction, always={"shorter", "simpler"})


def asks_to_move(instruction: str) -> bool:
    """Whether the instruction *requests* a move (rule 1): a word of :data:`_MOVE_RE` used as
    :func:`asks_to_shrink` uses its verbs ("wrap these functions in a class", "then move f
    to B"), not one that describes ("the sequence should be split by ``self.split``")."""
    return _requested(_MOVE_RE, instruction)


def _requested(verbs: re.Pattern[str], instruction: str, always: set[str] | None = None) -> bool:
    """Whether a match of ``verbs`` in ``instruction`` is a request: it starts a clause or
    follows ``and``/``then``/``also``/``or``/``you``/``please``; a match whose lowercase text
    is in ``always`` counts wherever it stands."""
    for m in verbs.finditer(instruction):
        if always and m.group().lower() in always:
            return True
        head = instruction[: m.start()]
        if _CLAUSE_START_RE.search(head) or _REQUEST_LEAD_RE.search(head):
            return True
    return False


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
    """Kinds the instruction asks to delete wholesale ("remove unused imports" -> import); a
    deletion word that only describes ("change all the classes to support a ``remove``
    method") asks for nothing (:func:`asks_to_shrink`), nor does a wholesale word in a code
    span ("remove the `duplicate` methods" names methods called ``duplicate``)."""
    if not asks_to_shrink(instruction):
        return set()
    if not _WHOLESALE_RE.search(_CODE_SPAN_RE.sub(" ", instruction)):  # "the `duplicate` methods"
        return set()
    kinds: set[str] = set()
    for nouns, covered in _KIND_NOUNS.items():
        if re.search(r"\b(?:" + nouns + r")\b", instruction, re.IGNORECASE):
            kinds.update(covered)
    return kinds


# -- comparison ------------------------------------------------------------------------------
def compare_items(
    old: list[Item],
    new: list[Item],
    instruction: str,
    *,
    texts: tuple[str, str] | None = None,
) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """``(lost names for display, allowed names, renamed pairs)`` for ``old`` -> ``new``.
    With ``texts`` (the whole ``before`` and ``after``), what only named definitions used goes
    with them (rule 1, last case)."""
    missing = _missing(old, new)
    added = _missing(new, old)
    dead = _DeadCode(old, new, texts, instruction) if texts is not None else None
    result = _Result(texts[1], new, added) if texts is not None else None
    partners = _Partners(added, instruction, missing)
    present = {i.name for i in new}
    kinds = wholesale_kinds(instruction)
    status: dict[str, str] = {}  # name -> "allowed" | "renamed" | "lost"
    new_names: dict[str, str] = {}  # renamed old name -> new name
    renamed: list[tuple[str, str]] = []
    order = sorted(missing, key=lambda i: (i.name.count("."), i.line))  # parents first
    for item in order:
        parent = _missing_ancestor(item.name, status)
        if parent is not None and status[parent] in ("lost", "allowed", "absorbed?"):
            status[item.name] = status[parent]  # goes with its parent
            continue
        if parent is not None and new_names[parent] + item.name[len(parent) :] in present:
            status[item.name] = "renamed"  # moved along with its renamed parent
            continue
        # unasked renames need the result to have stopped using the old name
        unasked = result is None or item.kind not in _DEF_KINDS or not result.uses(item)
        partner = partners.take(item, unasked=unasked) or partners.derived(item)
        allowed = partner is None and (
            names_in(item.name, instruction)
            or item.kind in kinds
            or (dead is not None and dead.only_named_code_used(item))
        )
        if partner is None and unasked and not allowed:
            partner = partners.rewritten(item)
        if partner is not None:
            renamed.append((item.name, partner.name))
            new_names[item.name] = partner.name
            status[item.name] = "renamed"
        elif allowed:
            status[item.name] = "allowed"
        elif result is not None and result.absorbed(item, exclude=set()):
            status[item.name] = "absorbed?"  # decided once every rename has its partner
        else:
            status[item.name] = "lost"
    for item in order:  # absorbed only by definitions that are not another one renamed
        if status[item.name] == "absorbed?":
            parent = _missing_ancestor(item.name, status)
            if parent is not None and status[parent] != "absorbed?":
                status[item.name] = status[parent]
            elif result is not None and result.absorbed(
                item, exclude=partners.used | partners.unasked
            ):
                status[item.name] = "allowed"
            else:
                status[item.name] = "lost"
    ordered = _display_order(missing)
    lost = [i.name for i in ordered if status[i.name] == "lost"]
    shown = [n for n in lost if _missing_ancestor(n, status) is None]
    allowed = [i.name for i in ordered if status[i.name] == "allowed"]
    return _unique(shown), _unique(allowed), renamed


class _DeadCode:
    """Rule 1's last case: a missing import or assignment that only definitions named by the
    instruction and still present used (``heapq`` used only in ``distances_to``, when the
    instruction names ``distances_to`` and the result rewrote it) and whose name the result no
    longer mentions at all went with the code that used it."""

    def __init__(
        self, old: list[Item], new: list[Item], texts: tuple[str, str], instruction: str
    ) -> None:
        self.before, self.after = texts
        kept = {i.name for i in new}
        self.named_spans = [
            (i.line, _end_line(i))
            for i in old
            if i.kind in _DEF_KINDS and i.name in kept and names_in(i.name, instruction)
        ]
        self._before_words: dict[str, list[int]] | None = None
        self._after_words: set[str] | None = None

    def only_named_code_used(self, item: Item) -> bool:
        if not self.named_spans:
            return False
        words = _bound_names(item)
        if not words or any(w in self.after_words() for w in words):
            return False
        own = (item.line, _end_line(item))
        uses = [n for w in words for n in self.before_words().get(w, ()) if not _within(n, own)]
        return bool(uses) and all(any(_within(n, s) for s in self.named_spans) for n in uses)

    def before_words(self) -> dict[str, list[int]]:
        if self._before_words is None:
            self._before_words = {}
            for lineno, line in enumerate(self.before.splitlines(), start=1):
                for word in _WORD_RE.findall(line):
                    self._before_words.setdefault(word, []).append(lineno)
        return self._before_words

    def after_words(self) -> set[str]:
        if self._after_words is None:
            self._after_words = set(_WORD_RE.findall(self.after))
        return self._after_words


def _bound_names(item: Item) -> set[str]:
    """The identifiers code uses to refer to an import or a top-level assignment: the import's
    alias (``np``), else its first and last dotted parts (``os.path``: ``os``, ``path``); an
    assignment's plain name; nothing for a definition (a helper the named code stopped
    calling may still be API: CanItEdit's 100_pandas_apply), a wildcard or a C include."""
    if item.kind == "assignment":
        return {item.name} if _WORD_RE.fullmatch(item.name) else set()
    if item.kind != "import" or item.name.endswith("*") or _HEADER_RE.fullmatch(item.name):
        return set()
    alias = re.search(r"(?<![\w$.])" + re.escape(item.name) + r"\s+as\s+([\w$]+)", item.text)
    if alias:
        return {alias.group(1)}
    parts = re.split(r"[./:]+", item.name)
    return {p for p in (parts[0], parts[-1]) if _WORD_RE.fullmatch(p)}


def _end_line(item: Item) -> int:
    return item.line + item.text.count("\n")


def _within(line: int, span: tuple[int, int]) -> bool:
    return span[0] <= line <= span[1]


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
      out, or (when the instruction speaks of renaming) a new name the instruction names whose
      text is akin to the missing item's (:func:`kinship` at least :data:`RENAME_KINSHIP`) and
      more akin to it than to any other missing item of its kind and parent;
    - a move: same kind and name under another parent, when the instruction speaks of moving
      (move, extract, wrap, convert, refactor, split, group, nest, reorganise, restructure);
    - a derived rename (:meth:`derived`).
    """

    def __init__(self, added: list[Item], instruction: str, missing: list[Item]) -> None:
        self.used: set[int] = set()
        self.by_name = {c.name: c for c in added}
        # (kind, parent, old leaf, new leaf): a named definition replaced by a named new one
        named_added = [c for c in added if c.kind in _DEF_KINDS and names_in(c.name, instruction)]
        self.replaced = [
            (
                o.kind,
                o.name.rpartition(".")[0],
                o.name.rpartition(".")[2],
                a.name.rpartition(".")[2],
            )
            for o in missing
            if o.kind in _DEF_KINDS and names_in(o.name, instruction)
            for a in named_added
            if a.kind == o.kind and a.name.rpartition(".")[0] == o.name.rpartition(".")[0]
        ]
        self.by_text: dict[tuple[str, str, str], list[Item]] = {}
        self.by_leaf: dict[tuple[str, str], list[Item]] = {}
        self.by_parent: dict[tuple[str, str], list[Item]] = {}
        self.named: dict[tuple[str, str], list[Item]] = {}
        asks_rename = _RENAME_RE.search(instruction) is not None
        self.instruction = instruction
        self.asks_move = asks_to_move(instruction)
        for cand in added:
            parent, _, leaf = cand.name.rpartition(".")
            if cand.text:
                key = (cand.kind, parent, _blank(cand.text, leaf))
                self.by_text.setdefault(key, []).append(cand)
            self.by_leaf.setdefault((cand.kind, leaf), []).append(cand)
            if cand.kind in _DEF_KINDS:
                self.by_parent.setdefault((cand.kind, parent), []).append(cand)
            if asks_rename and names_in(cand.name, instruction):
                self.named.setdefault((cand.kind, parent), []).append(cand)
        self.closest = {  # id(named new item) -> the missing item most akin to it
            id(c): _closest(c, [m for m in missing if _siblings(m, c)])
            for cands in self.named.values()
            for c in cands
        }
        # the instruction asks for renames and names their new names: others were not asked
        self.scoped = any(self.named.values())
        self.unasked: set[int] = set()  # ids of added items refused as unasked renames

    def take(self, item: Item, *, unasked: bool = True) -> Item | None:
        """What ``item`` became: a rename partner (by text only when ``unasked``), else a
        move."""
        parent, _, leaf = item.name.rpartition(".")
        found = None
        if unasked and item.text:
            same = self.by_text.get((item.kind, parent, _blank(item.text, leaf)), [])
            found = self._first([c for c in same if self._may_rename(item, c)])
        if found is None:
            named = self.named.get((item.kind, parent), [])
            found = self._first([c for c in named if self.closest.get(id(c)) is item])
        if found is None and self.asks_move:
            moved = self.by_leaf.get((item.kind, leaf), [])
            found = self._first([c for c in moved if c.name.rpartition(".")[0] != parent])
        return found

    def rewritten(self, item: Item) -> Item | None:
        """A rename with an edited body: the added item of the same kind and parent that holds
        most of ``item``'s words (:func:`absorbs`), whatever the instruction says (``NFA``
        rewritten as ``DFA``); the caller checks that the result no longer uses the old
        name."""
        parent = item.name.rpartition(".")[0]
        cands = [
            c
            for c in self.by_parent.get((item.kind, parent), [])
            if self._may_rename(item, c) and absorbs([c], item)
        ]
        return self._first(cands)

    def _may_rename(self, item: Item, cand: Item) -> bool:
        """Whether an unasked rename ``item`` -> ``cand`` counts: always, unless the
        instruction asks for renames by name (:attr:`scoped`) and names neither: then it is
        scope creep (asked to rename ``rgb_to_hsv``, the model renamed ``hsv_to_rgb`` too,
        breaking its callers)."""
        if (
            not self.scoped
            or names_in(item.name, self.instruction)
            or names_in(cand.name, self.instruction)
        ):
            return True
        self.unasked.add(id(cand))  # nor does it count as new code absorbing ``item``
        return False

    def derived(self, item: Item) -> Item | None:
        """A name derived from a replaced one, replaced the same way: the instruction names
        ``find_managers_manager`` (gone) and ``find_manager_n`` (new), so
        ``find_managers_manager_help`` became ``find_manager_n_help`` if that is new too."""
        parent, _, leaf = item.name.rpartition(".")
        for kind, where, old, new in self.replaced:
            if kind != item.kind or where != parent or old == leaf or old not in leaf:
                continue
            target = self.by_name.get(f"{parent}.{leaf.replace(old, new)}".lstrip("."))
            if target is not None and target.kind == item.kind:
                found = self._first([target])
                if found is not None:
                    return found
        return None

    def _first(self, cands: list[Item] | None) -> Item | None:
        for cand in cands or []:
            if id(cand) not in self.used:
                self.used.add(id(cand))
                return cand
        return None


def _siblings(a: Item, b: Item) -> bool:
    """Same kind and same parent."""
    return a.kind == b.kind and a.name.rpartition(".")[0] == b.name.rpartition(".")[0]


def _closest(new: Item, missing: list[Item]) -> Item | None:
    """The item of ``missing`` most akin to ``new`` (:func:`kinship`, then the number of
    words they share; the first on a tie), if at least :data:`RENAME_KINSHIP` akin."""
    best, score = None, (RENAME_KINSHIP, -1)
    for old in missing:
        here = (kinship(old, new), len(_shared_words(old, new)))
        if here[0] >= RENAME_KINSHIP and here > score:
            best, score = old, here
    return best


def kinship(old: Item, new: Item) -> float:
    """The share of ``old``'s distinct words (identifiers and literal words; its own name,
    common keywords and numbers left out) that ``new``'s text has: 1.0 for a body kept
    under a new name, about 0.3 for an unrelated function of the same class. Items without
    text (data keys) are all akin (1.0)."""
    if not old.text or not new.text:
        return 1.0
    mine = _content_words(old.text, old.name.rpartition(".")[2])
    return len(_shared_words(old, new)) / len(mine) if mine else 0.0


def _shared_words(old: Item, new: Item) -> set[str]:
    """The distinct :func:`_content_words` of ``old`` that ``new`` has too."""
    mine = _content_words(old.text, old.name.rpartition(".")[2])
    return set(mine) & set(_content_words(new.text, new.name.rpartition(".")[2]))


@lru_cache(maxsize=1024)
def _content_words(text: str, own: str = "") -> Counter[str]:
    """The words of ``text`` that carry meaning: not ``own`` (a definition's name), not
    :data:`_COMMON_WORDS`, not numbers. Cached: do not modify the result."""
    return Counter(
        w for w in _WORD_RE.findall(text) if w != own and w not in _COMMON_WORDS and not w.isdigit()
    )


class _Result:
    """The result's side of rule 1's evidence: which names its text still uses, and which
    definitions it adds."""

    def __init__(self, after: str, new: list[Item], added: list[Item]) -> None:
        self.words = Counter(_WORD_RE.findall(after))
        self.leaves = Counter(i.name.rpartition(".")[2] for i in new)
        names = {a.name for a in added}
        # added definitions not nested in another added one (their text holds the nested)
        self.added = [
            a for a in added if a.kind in _DEF_KINDS and a.name.rpartition(".")[0] not in names
        ]

    def uses(self, item: Item) -> bool:
        """Whether the result still mentions ``item``'s name (its last part) beyond the
        names of its own items (a definition spells its name once): a call, a reference."""
        leaf = item.name.rpartition(".")[2]
        return self.words[leaf] > self.leaves[leaf]

    def absorbed(self, item: Item, exclude: set[int]) -> bool:
        """A definition whose body moved into the definitions the result adds (a function
        turned into classes): the result no longer mentions it and they hold most of its
        words (:func:`absorbs`). Added definitions whose ``id`` is in ``exclude`` (another
        missing definition renamed: ``bisect_right`` as ``bisect_upper``) do not count: a
        sibling dropped beside a rename is lost, however alike their bodies."""
        if item.kind not in _DEF_KINDS or self.uses(item):
            return False
        return absorbs([a for a in self.added if id(a) not in exclude], item)


def absorbs(new: list[Item], old: Item) -> bool:
    """Whether the texts of ``new`` hold at least :data:`ABSORBED_SHARE` of ``old``'s words
    (:func:`_content_words`, counted with repeats, its own name left out), ``old`` having at
    least :data:`ABSORBED_MIN_WORDS` of them."""
    mine = _content_words(old.text, old.name.rpartition(".")[2])
    total = sum(mine.values())
    if total < ABSORBED_MIN_WORDS:
        return False
    theirs: Counter[str] = Counter()
    for item in new:
        theirs.update(_content_words(item.text))
    return sum(min(n, theirs[w]) for w, n in mine.items()) >= ABSORBED_SHARE * total


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
    scan = _scan(text, language)
    return None if scan is None else scan.items


@dataclass(frozen=True)
class _Scan:
    items: list[Item]
    root: Any = None  # the tree's root node (None for data formats)
    data: bytes = b""
    defs: tuple[Definition, ...] = ()


@lru_cache(maxsize=8)  # the same ``before`` is often judged against several results
def _scan(text: str, language: str | None) -> _Scan | None:
    if language in DATA_FORMATS:
        keys = data_keys(text, language)
        return _Scan([Item(k, "key", n) for n, k in enumerate(keys or [], start=1)])
    tree = parse(text, language)
    if tree is None:
        return None
    data = text.encode("utf-8")
    defs = outline(text, language)
    items = [Item(d.name, _def_kind(d), d.start_line, d.text) for d in defs]
    index = {(d.kind, d.start_line, d.end_line): d.name for d in defs}
    items += _statements(tree.root_node, data, index)
    return _Scan(sorted(items, key=lambda i: i.line), tree.root_node, data, tuple(defs))


# -- bodies (rule 3) ---------------------------------------------------------------------------
def _emptied_bodies(
    old: _Scan, new: _Scan, instruction: str, renamed: list[tuple[str, str]]
) -> list[str]:
    """Functions present before and after (same name, or a rename/move pair) whose body was
    gutted (:func:`gutted`) and which the instruction does not name, nor any function around
    or inside them; source order, an emptied function standing for those nested in it."""
    if old.root is None or new.root is None:
        return []
    new_defs: dict[str, list[Definition]] = {}
    for d in new.defs:
        new_defs.setdefault(d.name, []).append(d)
    seen: Counter[str] = Counter()
    new_name = dict(renamed)
    shrink = asks_to_shrink(instruction)
    added: _Added | None = None  # the functions the result adds (computed once)
    functions = {d.name for d in old.defs if _def_kind(d) == "function"}
    out = []
    for d in old.defs:
        if _def_kind(d) != "function":
            continue
        seen[d.name] += 1
        target = _renamed(d.name, new_name)
        k = seen[d.name] if target == d.name else 1
        cands = new_defs.get(target, [])
        if len(cands) < k or cands[k - 1].text == d.text:
            continue  # gone (rule 1's business) or unchanged
        after_def = cands[k - 1]
        names = [after_def.name, *_related_functions(d.name, functions)]
        named = any(names_in(n, instruction) for n in names)
        shape_before, shape_after = _shape_of(old, d), _shape_of(new, after_def)
        if shape_before is None or shape_after is None:
            continue
        if named:  # the instruction's to rewrite, unless nothing is left to run
            if not shrink and stranded(shape_before, shape_after):
                out.append(d.name)
            continue
        moved = 0
        if _shrank(shape_before, shape_after):
            added = added or _added_functions(old, new)
            moved = added.statements if added.holds(d.text, after_def.text) else 0
        if gutted(shape_before, shape_after, asks_to_shrink=shrink, moved=moved):
            out.append(d.name)
    # an emptied function stands for the functions nested in it
    return [n for n in _unique(out) if not any(n.startswith(o + ".") for o in out)]


def _renamed(name: str, new_name: dict[str, str]) -> str:
    """``name`` in the result: renamed itself, or under a renamed parent (``NFA.transition``
    -> ``DFA.transition`` when ``NFA`` became ``DFA``)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        head = ".".join(parts[:k])
        if head in new_name:
            return ".".join([new_name[head], *parts[k:]])
    return name


@dataclass(frozen=True)
class _Added:
    """The functions a result adds (not nested in another added one): their statements and
    words, where code that left a shrunken function may have gone."""

    statements: int
    words: Counter[str]

    def holds(self, before: str, after: str) -> bool:
        """Whether at least half of the words a function lost (its text ``before`` minus
        ``after``, counted with repeats; :func:`_content_words`) recur here: its code moved
        into the added functions, the file was not cut short in it."""
        lost = _content_words(before) - _content_words(after)
        found = sum(min(n, self.words[w]) for w, n in lost.items())
        return 2 * found >= sum(lost.values())


def _added_functions(old: _Scan, new: _Scan) -> _Added:
    known = {d.name for d in old.defs}
    added = [d for d in new.defs if d.name not in known and _def_kind(d) == "function"]
    names = {d.name for d in added}
    statements, words = 0, Counter[str]()
    for d in added:
        if any(d.name.startswith(n + ".") for n in names):
            continue  # counted with the added function around it
        shape = _shape_of(new, d)
        statements += shape.statements if shape else 0
        words.update(_content_words(d.text))
    return _Added(statements, words)


def _related_functions(name: str, functions: set[str]) -> list[str]:
    """``name`` and the functions around it and inside it: a nested helper is part of its
    enclosing function's body (an enclosing class does not count)."""
    parts = name.split(".")
    around = [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in functions]
    inside = [f for f in functions if f.startswith(name + ".")]
    return [name, *around, *inside]


def gutted(before: Body, after: Body, *, asks_to_shrink: bool = False, moved: int = 0) -> bool:
    """Whether ``after`` is a gutted version of ``before`` (rule 3):

    - it lost statements and gained a placeholder (``...``, ``# ... rest unchanged``), even
      when the instruction asks to shrink; otherwise, unless it asks to shrink:
    - it had real statements and has none left, or none outside nested definitions;
    - it returned values and returns none, or it returned on every path and now runs off
      its end (a generator needs no return);
    - it kept less than :data:`KEPT_SHARE` of at least :data:`MIN_STATEMENTS` statements, and
      the functions the result adds (``moved`` statements; 0 when they do not hold the words
      it lost) cannot hold what it lost.
    """
    if after.placeholders > before.placeholders and after.statements < before.statements:
        return True
    if asks_to_shrink:
        return False
    if before.statements and not after.statements:
        return True
    if stranded(before, after):
        return True
    lost_return = not after.returns or (before.exits and not after.exits)
    if before.returns and not after.yields and lost_return:
        return True
    return _shrank(before, after) and before.statements - after.statements > moved


def stranded(before: Body, after: Body) -> bool:
    """Whether a body that ran statements of its own now holds nothing but nested
    definitions: nothing would run them (a file cut inside a nested helper). A stub (``pass``,
    an abstract method) is not stranded."""
    return before.own > 0 and after.own == 0 and after.statements > 0


def _shrank(before: Body, after: Body) -> bool:
    return before.statements >= MIN_STATEMENTS and after.statements < KEPT_SHARE * before.statements


def _shape_of(scan: _Scan, d: Definition) -> Body | None:
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
        if c.type in _COMMENTS and _PLACEHOLDER_RE.search(_text(c, scan.data))
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
    if body.type not in _BLOCKS:  # an expression body: (x) => x * 2
        return Body(1, 1, False, True, own=1)
    statements = returns = placeholders = own = 0
    yields = False
    stack = [(body, False)]
    while stack:
        node, nested = stack.pop()
        in_block = node.type in _BLOCKS
        for child in node.named_children:
            t = child.type
            if t in _COMMENTS:
                placeholders += _PLACEHOLDER_RE.search(_text(child, data)) is not None
                continue
            if t in _BLOCKS:
                stack.append((child, nested))
                continue
            if (in_block or t.endswith("_statement")) and not _is_stub(child, data):
                statements += 1
                own += not nested and t not in _NESTED and t != "decorated_definition"
            elif t == "expression_statement" and _text(child, data).strip() == "...":
                placeholders += 1
            if not nested and t in _RETURNS and _has_value(child):
                returns += 1
            elif not nested and t in _YIELDS:
                yields = True
            stack.append((child, nested or t in _NESTED))
    return Body(statements, returns, yields, _exits(body, data), placeholders, own)


def _exits(node: Any, data: bytes) -> bool:
    """Whether control cannot run off the end of ``node``, leniently: it ends with a return or
    a raise, an ``if`` whose every branch (``else`` included) exits, a ``try``/``with`` with a
    part that exits, ``while True``, or a ``match``/``switch``. Loops and plain statements
    fall through."""
    t = node.type
    if t in _BLOCKS:
        last = None
        for child in node.named_children:
            if child.type not in _COMMENTS and not _is_stub(child, data):
                last = child
        return last is not None and _exits(last, data)
    if t in _RETURNS or t in {"raise_statement", "throw_statement"}:
        return True
    if t == "expression_statement":  # Rust: return x;
        return any(c.type in _RETURNS for c in node.named_children)
    if not t.endswith(_STATEMENT_SUFFIXES):  # Rust: a block's tail expression is its value
        return True
    if t == "if_statement":
        alternatives = node.children_by_field_name("alternative")
        if not alternatives or alternatives[-1].type == "elif_clause":
            return False  # no else: the condition may be false
        branches = [node.child_by_field_name("consequence")]
        branches += [_clause_body(a) for a in alternatives]
        return all(b is not None and _exits(b, data) for b in branches)
    if t in {"try_statement", "with_statement"}:
        parts = [c for c in node.named_children if c.type in _BLOCKS]
        parts += [_clause_body(c) for c in node.named_children if c.type in _CLAUSES]
        return any(p is not None and _exits(p, data) for p in parts)
    if t == "while_statement":
        condition = node.child_by_field_name("condition")
        return condition is not None and _text(condition, data).strip("() ") in {"True", "true"}
    return t in _SWITCHES


def _clause_body(clause: Any) -> Any | None:
    for field in ("consequence", "body"):
        child = clause.child_by_field_name(field)
        if child is not None:
            return child
    named = [c for c in clause.named_children if c.type not in _COMMENTS]
    return named[-1] if named else None


def _has_value(node: Any) -> bool:
    return any(c.type not in _COMMENTS for c in node.named_children)


def _is_stub(node: Any, data: bytes) -> bool:
    """``pass``, ``...``, a bare string (a docstring), ``raise NotImplementedError``,
    ``todo!()``, an empty statement."""
    t = node.type
    if t in {"pass_statement", "empty_statement"}:
        return True
    if t == "raise_statement":
        return _text(node, data).split("(", 1)[0].split() == ["raise", "NotImplementedError"]
    if t == "macro_invocation":  # Rust: todo!() as a block's tail
        return _text(node, data).split("!", 1)[0] in {"todo", "unimplemented"}
    if t == "expression_statement":
        inner = [c for c in node.named_children if c.type not in _COMMENTS]
        if len(inner) != 1:
            return False
        if inner[0].type in {"string", "concatenated_string", "ellipsis"}:
            return True
        return inner[0].type == "macro_invocation" and _is_stub(inner[0], data)
    return False


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
    "SHRINK_VERBS",
    "Body",
    "Item",
    "ScopeVerdict",
    "absorbs",
    "asks_to_delete",
    "asks_to_move",
    "asks_to_shrink",
    "body_shape",
    "check_scope",
    "describe_dropped",
    "describe_lost",
    "file_items",
    "gutted",
    "kinship",
    "names_in",
    "non_blank_lines",
    "stranded",
    "wholesale_kinds",
]
