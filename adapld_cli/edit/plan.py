"""Which parts of a big file an instruction touches: the plan that :mod:`.parts` executes.

Contract: :func:`plan_parts` reads the file with tree-sitter and returns a :class:`Plan` (the
parts to rewrite, in file order) or ``None`` for a whole-file rewrite: a file under
:data:`MIN_LINES` lines, no grammar or a file that does not parse, an instruction that names
none of the file's definitions, a name used where no part covers it, or parts that would
cover more than :data:`MAX_SHARE` of the file.

The parts are the file's *units*: functions and methods (with their decorators), classes
without methods, top-level statements, the import block as one. A rename (``rename X to Y``,
:func:`~adapld_cli.edit.guard.unasked.rename_pairs`) touches every unit where ``X`` occurs
(and is *mechanical*, made without the model, when the instruction asks for nothing else:
:func:`rename_only`); "add a method ... to class C": C's last method, the new one to follow
it; otherwise the units the instruction names as code (a qualified name, or a name in
backticks, called, or spelled like an identifier; a method rather than its class when it
names both), and the import block with them. Pure: no model, no file access.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from adapld_cli.edit.guard.intent import names_in
from adapld_cli.edit.guard.scan import is_structural, scan
from adapld_cli.edit.guard.unasked import RENAME_PAIR_RE, rename_pairs
from adapld_cli.edit.syntax import Definition, outline, parse

MIN_LINES = 200  # shorter files are rewritten whole: a part saves little, context helps more
MAX_SHARE = 0.5  # parts covering more of the file than this: rewrite it whole
REPAIR_SHARE = 0.8  # a repair's definitions covering more than this: the whole file again
# "add a [new] [`name`] method [`name`] to [the] [class] `C`"
ADD_METHOD_RE = re.compile(
    r"\badd(?:s|ing)?\s+(?:an?\s+)?(?:new\s+)?(?:\S+\s+){0,2}?method\b[^.]*?\b(?:to|in)\s+"
    r"(?:the\s+)?(?:class\s+)?`?([A-Z]\w*)`?",
    re.IGNORECASE,
)
# a traceback frame's function: Python's `File "x.py", line 3, in name`, pytest's `x.py:3: in name`
FRAME_RE = re.compile(r"(?:, line \d+,|:\d+:) in ([A-Za-z_][\w.]*)")
# a failure fixed outside any definition: a name or a module the file does not provide
MISSING_NAME_RE = re.compile(r"\b(?:NameError|ImportError|ModuleNotFoundError)\b")
# what may follow a rename for the instruction to ask for the rename only
UPDATE_CALLS_RE = re.compile(
    r"\b(?:update|change|fix|adjust|rename)\s+(?:every|all|each|the|its|any)?\s*(?:of\s+)?"
    r"(?:the\s+)?(?:\w+\s+){0,2}?(?:calls?|uses?|usages?|references?|callers?|places?|sites?|"
    r"occurrences?|mentions?)\b(?:\s+sites?)?(?:\s+(?:that|which|where|to|of)\b[^.;]*)?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Part:
    """Whole lines ``start``..``end`` (1-based, inclusive) of the file, and why they are a
    part to rewrite."""

    name: str
    start: int
    end: int
    why: str = ""


@dataclass(frozen=True)
class Plan:
    """The parts to rewrite, in file order, and what decided them."""

    parts: tuple[Part, ...]
    reason: str
    renames: tuple[tuple[str, str], ...] = ()  # (old, new) of a rename plan
    # the instruction asks for the rename(s) and nothing else: made in the parts as a
    # refactoring tool makes it, whole-word, without the model (docs/usage.md#big-files)
    mechanical: bool = False
    # a repair's plan (plan_repair): the parts are lines of ``base``, the result the tests
    # failed, and are asked for with ``feedback``, the tests' output; None: the file's lines
    base: str | None = None
    feedback: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "parts": [{"name": p.name, "lines": [p.start, p.end]} for p in self.parts],
            "mechanical": self.mechanical,
            "repair": self.base is not None,
        }


def plan_parts(text: str, lang: str | None, instruction: str) -> Plan | None:
    """The parts of ``text`` that ``instruction`` touches (module contract), or ``None``."""
    lines = text.splitlines()
    if len(lines) < MIN_LINES or not is_structural(text, lang) or lang in (None, "json"):
        return None
    defs = outline(text, lang)
    units = _units(text, lang, defs)
    pairs = [(old, new) for old, new in rename_pairs(instruction) if word(old).search(text)]
    if pairs:
        found = _using(lines, units, [old for old, _ in pairs])
        reason = "rename " + ", ".join(f"{old} -> {new}" for old, new in pairs)
    elif (place := _new_method_place(units, defs, instruction)) is not None:
        found = [place, *(u for u in units if u.why == "imports")]
        reason = f"a new method after {place.name}"
    else:
        found = _named(units, defs, instruction)
        reason = "names " + ", ".join(p.name for p in found) if found else ""
        if found:
            found += [u for u in units if u.why == "imports"]
    if not found:
        return None
    parts = tuple(sorted(set(found), key=lambda p: p.start))
    if sum(p.end - p.start + 1 for p in parts) > MAX_SHARE * len(lines):
        return None
    return Plan(parts, reason, tuple(pairs), bool(pairs) and rename_only(instruction))


def plan_repair(original: str, rejected: str, lang: str | None, feedback: str) -> Plan | None:
    """The definitions of ``rejected`` (a Python result that passed every check and then
    failed the tests) a repair rewrites: its units whose text is no unit of ``original``
    (changed or added by the edit) and its definitions the tests' output names as where it
    failed (a traceback frame's ``in NAME``). Every other unit is the original's and stays.
    ``None`` (rewrite the whole file): not Python, a text that does not parse, a failure
    that is a missing name or module (fixed by an import or a module-level assignment, which
    are no definitions), no such unit, a changed unit that is no definition (a statement,
    the imports), or units covering more than :data:`REPAIR_SHARE` of ``rejected``. Any size
    of file: the repair keeps the whole file in its prompt and generates only these
    definitions."""
    if lang != "python" or MISSING_NAME_RE.search(feedback):
        return None
    if not (is_structural(rejected, lang) and is_structural(original, lang)):
        return None
    lines, old_lines = rejected.splitlines(), original.splitlines()
    kept = {_text(old_lines, u) for u in _units(original, lang, outline(original, lang))}
    failing = {m.rsplit(".", 1)[-1] for m in FRAME_RE.findall(feedback)}
    found = [
        u
        for u in _units(rejected, lang, outline(rejected, lang))
        if _text(lines, u) not in kept
        or (u.why == "definition" and u.name.rsplit(".", 1)[-1] in failing)
    ]
    if not found or any(u.why != "definition" for u in found):
        return None  # a changed statement or import block: the whole file
    if sum(p.end - p.start + 1 for p in found) > REPAIR_SHARE * len(lines):
        return None
    found = [replace(u, why="repair") for u in found]
    names = ", ".join(p.name for p in found)
    return Plan(tuple(found), f"repair {names}", base=rejected, feedback=feedback)


def _text(lines: list[str], unit: Part) -> str:
    return "\n".join(lines[unit.start - 1 : unit.end])


def rename_only(instruction: str) -> bool:
    """Whether ``instruction`` asks for its renames and nothing else: once the ``rename X to
    Y`` clauses and parentheses are gone, at most "and update every call" (use, reference,
    caller, place ... that ...) is left."""
    rest = RENAME_PAIR_RE.sub(" ", re.sub(r"\([^)]*\)", " ", instruction))
    rest = re.sub(r"\b(?:and|then|also)\b", " ", rest, flags=re.IGNORECASE)
    rest = UPDATE_CALLS_RE.sub(" ", rest)
    return not re.sub(r"[\s.,;:!]+", "", rest)


# -- units -------------------------------------------------------------------------------
def _units(text: str, lang: str | None, defs: list[Definition]) -> list[Part]:
    """The file's units (module contract), in file order: leaf definitions, then each
    top-level statement the definitions do not cover (imports grouped into runs)."""
    lines = text.splitlines()
    nested = {
        d.name for d in defs if any(o is not d and o.name.startswith(d.name + ".") for o in defs)
    }
    units = [
        Part(d.name, _decorated_start(lines, d.start_line), d.end_line, "definition")
        for d in defs
        if d.name not in nested and not _inside_leaf(d, defs)
    ]
    spans = [(d.start_line, d.end_line) for d in defs]
    found = scan(text, lang)
    import_lines = {i.line for i in found.items if i.kind == "import"} if found else set()
    imports: list[Part] = []
    statements: list[Part] = []
    tree = parse(text, lang)
    for node in tree.root_node.named_children if tree is not None else []:
        start, end = node.start_point[0] + 1, node.end_point[0] + 1
        if "comment" in node.type or any(a <= end and start <= b for a, b in spans):
            continue  # a definition (or a block holding one) is covered by its own units
        name = f"line {start}"
        (imports if start in import_lines else statements).append(
            Part(name, start, end, "statement")
        )
    return _disjoint(units + statements + _import_blocks(imports, units + statements))


def _import_blocks(imports: list[Part], units: list[Part]) -> list[Part]:
    """Import statements with no other unit between them, one unit each run; the first run
    is the file's import block (``why == "imports"``)."""
    runs: list[list[Part]] = []
    for imp in sorted(imports, key=lambda p: p.start):
        if runs and not any(runs[-1][-1].end < u.start < imp.start for u in units):
            runs[-1].append(imp)
        else:
            runs.append([imp])
    return [
        Part("imports" if i == 0 else run[0].name, run[0].start, run[-1].end,
             "imports" if i == 0 else "statement")
        for i, run in enumerate(runs)
    ]  # fmt: skip


def _inside_leaf(d: Definition, defs: list[Definition]) -> bool:
    """A function nested in another function: part of its enclosing unit."""
    return any(
        o is not d and o.start_line <= d.start_line and d.end_line <= o.end_line
        and "function" in o.kind
        for o in defs
    )  # fmt: skip


def _disjoint(units: list[Part]) -> list[Part]:
    """Units sorted, a unit inside or overlapping an earlier one dropped (statements of one
    line sharing a definition's span, imports interleaved with code)."""
    out: list[Part] = []
    for u in sorted(units, key=lambda p: (p.start, -p.end)):
        if out and u.start <= out[-1].end:
            continue
        out.append(u)
    return out


def _decorated_start(lines: list[str], start: int) -> int:
    """The first line of a definition's decorators (``@...`` lines right above it)."""
    while start > 1 and lines[start - 2].lstrip().startswith("@"):
        start -= 1
    return start


def _using(lines: list[str], units: list[Part], names: list[str]) -> list[Part]:
    """The units where any of ``names`` occurs; ``[]`` when an occurrence is in none."""
    pattern = re.compile("|".join(word(n).pattern for n in names))
    found: set[Part] = set()
    for number, line in enumerate(lines, start=1):
        if not pattern.search(line):
            continue
        unit = next((u for u in units if u.start <= number <= u.end), None)
        if unit is None:
            return []
        found.add(replace(unit, why="uses"))
    return list(found)


def _named(units: list[Part], defs: list[Definition], instruction: str) -> list[Part]:
    """The units the instruction names (:func:`_mentions`); a named class with methods stands
    for nothing (the whole file is safer) unless one of its methods is named too."""
    lasts = Counter(u.name.rsplit(".", 1)[-1] for u in units)
    named = [u for u in units if u.why == "definition" and _mentions(u.name, instruction, lasts)]
    classes = [d for d in defs if "class" in d.kind and _mentions(d.name, instruction, lasts)]
    for d in classes:
        if not any(u.name.startswith(d.name + ".") for u in named) and not any(
            u.name == d.name for u in units
        ):
            return []
    return [replace(u, why="named") for u in named]


def _mentions(name: str, instruction: str, lasts: Counter[str]) -> bool:
    """Whether the instruction names the definition ``name``: its qualified name, or its
    last part written as code (:func:`_as_code`) and either unique among the units or with
    its class named too. A plain word ("the plain text", "a node type") is not a name."""
    if "." in name and word(name).search(instruction):
        return True
    owner, _, last = name.rpartition(".")
    if not _as_code(last, instruction):
        return False
    return not owner or lasts[last] == 1 or _as_code(owner.rsplit(".", 1)[-1], instruction)


def _as_code(word: str, instruction: str) -> bool:
    """``word`` in the instruction as code: in backticks, called (``word(``), or spelled
    like an identifier (an underscore, a capital or a digit: ``blend_rgb``, ``Color``)."""
    if not names_in(word, instruction):
        return False
    if re.search(r"[_A-Z0-9]", word):
        return True
    return re.search(rf"`{re.escape(word)}`|(?<![\w$]){re.escape(word)}\(", instruction) is not None


def _new_method_place(units: list[Part], defs: list[Definition], instruction: str) -> Part | None:
    """For "add a method ... to class C": C's last method, after which the new one goes."""
    m = ADD_METHOD_RE.search(instruction)
    if m is None:
        return None
    cls = m.group(1)
    methods = [u for u in units if u.why == "definition" and u.name.rpartition(".")[0] == cls]
    if not methods or not any(d.name == cls and "class" in d.kind for d in defs):
        return None
    return replace(max(methods, key=lambda u: u.end), why="append")


def word(name: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w$])" + re.escape(name) + r"(?![\w$])")
