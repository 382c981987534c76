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
     the text is the same except for the name, or the instruction speaks of renaming
     (``rename``, ``call it``, ``name it``, ``name to``: "change the function name to
     ``total_in_range``") and names the new name; or its name contains one the instruction
     replaces (it names both ``find_managers_manager``, gone, and ``find_manager_n``, new, of
     the same kind and parent) and the same substitution gives a new name of the same kind
     and parent (``find_managers_manager_help`` -> ``find_manager_n_help``);
   - it moved: the same name of the same kind appeared under another parent and the
     instruction speaks of moving (``move``, ``extract``, ``wrap``, ``convert``, ``refactor``,
     ``split``, ``group``, ``nest``, ``reorganise``, ``restructure``);
   - an enclosing definition was renamed or is allowed to go (``Item`` renamed to ``Product``
     keeps ``Item.total_value`` as ``Product.total_value``);
   - the instruction asks to delete a whole kind: a deletion request (rule 3's test, so not
     "change all the classes to support a ``remove`` method") with one of
     ``unused/dead/redundant/duplicate/obsolete/unnecessary/all/every`` and a kind noun
     (``imports``, ``functions``/``helpers``/``methods``, ``classes``, ``constants``/
     ``variables``/``macros``, ``keys``/``entries``/``settings``; ``code`` means every kind),
     e.g. "remove unused imports";
   - it is an import or a top-level assignment that the edit made dead: in ``before`` its name
     (the import's alias, else its first or last dotted part; the assignment's target) was used
     only inside definitions the instruction names and ``after`` still has, and ``after`` no
     longer mentions it anywhere (``import heapq`` when the instruction names
     ``distances_to``, its only user, and the new ``distances_to`` no longer uses it).

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
   - it had real statements and has none left (``...``, ``pass``, a docstring);
   - it returned values and returns none (and is no generator), or it returned on every path
     (ends with a return or raise, an ``if``/``else`` whose branches all do...) and now runs
     off its end: the file cut short after its loop, its last ``return`` gone;
   - it kept fewer than a third (:data:`KEPT_SHARE`) of at least 6 (:data:`MIN_STATEMENTS`)
     statements, and the functions the result adds hold fewer statements than it lost (so
     code moved into new helpers is kept);

   unless the instruction names it or a function around or inside it (a nested helper is
   part of its enclosing function; an enclosing class does not count), by rule 1's naming. An
   emptied function stands for the functions nested in it.
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
_CLAUSE_START_RE = re.compile(
    r"(?:^|[.;:!?,\n(])\s*(?:(?:please|also|then|and|now|just|first|finally)\s+)*$", re.I
)
_REQUEST_LEAD_RE = re.compile(r"\b(?:and|then|also|or|you|please)\s+$", re.IGNORECASE)
_RENAME_RE = re.compile(r"\b(?:renam\w*|call(?:ed)? it|name it|names? to)\b", re.IGNORECASE)
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


@dataclass(frozen=True)
class ScopeVerdict:
    """What :func:`check_scope` found. Branch on :attr:`lost` only.

    - ``lost``: the result loses something the instruction did not ask for: refuse it (exit 1,
      nothing written) unless ``--force``.
    - ``names``: what would be lost, for the message (a lost class stands for its members;
      definitions and assignments in source order, then imports); may be empty when only the
      line rule fired.
    - ``allowed``: names that went missing with the instruction's blessing (named, a kind it
      asks to delete, or an import/assignment the edit made dead); ``renamed``: ``(old, new)``
      pairs counted as kept (renames and moves: ``("load", "Store.load")``).
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
    for m in _SHRINK_RE.finditer(instruction):
        if m.group().lower() in {"shorter", "simpler"}:
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
    method") asks for nothing (:func:`asks_to_shrink`)."""
    if not asks_to_shrink(instruction) or not _WHOLESALE_RE.search(instruction):
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
    dead = _DeadCode(old, new, texts, instruction) if texts is not None else None
    partners = _Partners(_missing(new, old), instruction, missing)
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
        partner = partners.take(item) or partners.derived(item)
        if partner is not None:
            renamed.append((item.name, partner.name))
            new_names[item.name] = partner.name
            status[item.name] = "renamed"
        elif (
            names_in(item.name, instruction)
            or item.kind in kinds
            or (dead is not None and dead.only_named_code_used(item))
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
    assignment's plain name; nothing for a definition, a wildcard or a C include."""
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
      out, or (when the instruction speaks of renaming) a new name the instruction names;
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
    moved: int | None = None  # statements of the functions the result adds (computed once)
    functions = {d.name for d in old.defs if _def_kind(d) == "function"}
    out = []
    for d in old.defs:
        if _def_kind(d) != "function":
            continue
        seen[d.name] += 1
        target = new_name.get(d.name, d.name)
        k = seen[d.name] if target == d.name else 1
        cands = new_defs.get(target, [])
        if len(cands) < k or cands[k - 1].text == d.text:
            continue  # gone (rule 1's business) or unchanged
        after_def = cands[k - 1]
        names = [after_def.name, *_related_functions(d.name, functions)]
        if any(names_in(n, instruction) for n in names):
            continue
        shape_before, shape_after = _shape_of(old, d), _shape_of(new, after_def)
        if shape_before is None or shape_after is None:
            continue
        if moved is None and _shrank(shape_before, shape_after):
            moved = _added_statements(old, new)
        if gutted(shape_before, shape_after, asks_to_shrink=shrink, moved=moved or 0):
            out.append(d.name)
    # an emptied function stands for the functions nested in it
    return [n for n in _unique(out) if not any(n.startswith(o + ".") for o in out)]


def _added_statements(old: _Scan, new: _Scan) -> int:
    """Statements in the functions ``new`` adds (not nested in another added one)."""
    known = {d.name for d in old.defs}
    added = [d for d in new.defs if d.name not in known and _def_kind(d) == "function"]
    names = {d.name for d in added}
    total = 0
    for d in added:
        if any(d.name.startswith(n + ".") for n in names):
            continue  # counted with the added function around it
        shape = _shape_of(new, d)
        total += shape.statements if shape else 0
    return total


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
    - it had real statements and has none left;
    - it returned values and returns none, or it returned on every path and now runs off
      its end (a generator needs no return);
    - it kept less than :data:`KEPT_SHARE` of at least :data:`MIN_STATEMENTS` statements, and
      the functions the result adds (``moved`` statements) cannot hold what it lost.
    """
    if after.placeholders > before.placeholders and after.statements < before.statements:
        return True
    if asks_to_shrink:
        return False
    if before.statements and not after.statements:
        return True
    lost_return = not after.returns or (before.exits and not after.exits)
    if before.returns and not after.yields and lost_return:
        return True
    return _shrank(before, after) and before.statements - after.statements > moved


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
        return Body(1, 1, False, True)
    statements = returns = placeholders = 0
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
            elif t == "expression_statement" and _text(child, data).strip() == "...":
                placeholders += 1
            if not nested and t in _RETURNS and _has_value(child):
                returns += 1
            elif not nested and t in _YIELDS:
                yields = True
            stack.append((child, nested or t in _NESTED))
    return Body(statements, returns, yields, _exits(body, data), placeholders)


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
    "asks_to_delete",
    "asks_to_shrink",
    "body_shape",
    "check_scope",
    "describe_dropped",
    "describe_lost",
    "file_items",
    "gutted",
    "names_in",
    "non_blank_lines",
    "wholesale_kinds",
]
