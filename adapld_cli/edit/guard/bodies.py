"""Rule 3: functions kept by name (or renamed or moved) whose body was gutted.

:func:`emptied_bodies` pairs each changed function of ``before`` with its namesake in
``after`` and asks :func:`gutted` of their shapes. See ``docs/scope-guard.md#rule-3-bodies``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from adapld_cli.edit.guard.evidence import content_words
from adapld_cli.edit.guard.intent import asks_to_shrink, names_in
from adapld_cli.edit.guard.items import def_kind
from adapld_cli.edit.guard.scan import Scan
from adapld_cli.edit.guard.shape import Body, shape_of
from adapld_cli.edit.syntax import Definition

# a function that kept fewer than KEPT_SHARE of at least MIN_STATEMENTS statements shrank
MIN_STATEMENTS = 6
KEPT_SHARE = 1 / 3


def emptied_bodies(
    old: Scan, new: Scan, instruction: str, renamed: list[tuple[str, str]]
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
    functions = {d.name for d in old.defs if def_kind(d) == "function"}
    out = []
    for d in old.defs:
        if def_kind(d) != "function":
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
        shape_before, shape_after = shape_of(old, d), shape_of(new, after_def)
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
    return [n for n in dict.fromkeys(out) if not any(n.startswith(o + ".") for o in out)]


def gutted(before: Body, after: Body, *, asks_to_shrink: bool = False, moved: int = 0) -> bool:
    """Whether ``after`` is a gutted version of ``before``:

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


def _renamed(name: str, new_name: dict[str, str]) -> str:
    """``name`` in the result: renamed itself, or under a renamed parent (``NFA.transition``
    -> ``DFA.transition`` when ``NFA`` became ``DFA``)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        head = ".".join(parts[:k])
        if head in new_name:
            return ".".join([new_name[head], *parts[k:]])
    return name


def _related_functions(name: str, functions: set[str]) -> list[str]:
    """``name`` and the functions around it and inside it: a nested helper is part of its
    enclosing function's body (an enclosing class does not count)."""
    parts = name.split(".")
    around = [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in functions]
    inside = [f for f in functions if f.startswith(name + ".")]
    return [name, *around, *inside]


@dataclass(frozen=True)
class _Added:
    """The functions a result adds (not nested in another added one): their statements and
    words, where code that left a shrunken function may have gone."""

    statements: int
    words: Counter[str]

    def holds(self, before: str, after: str) -> bool:
        """Whether at least half of the words a function lost (its text ``before`` minus
        ``after``, counted with repeats; :func:`~.evidence.content_words`) recur here: its
        code moved into the added functions, the file was not cut short in it."""
        lost = content_words(before) - content_words(after)
        found = sum(min(n, self.words[w]) for w, n in lost.items())
        return 2 * found >= sum(lost.values())


def _added_functions(old: Scan, new: Scan) -> _Added:
    known = {d.name for d in old.defs}
    added = [d for d in new.defs if d.name not in known and def_kind(d) == "function"]
    names = {d.name for d in added}
    statements, words = 0, Counter[str]()
    for d in added:
        if any(d.name.startswith(n + ".") for n in names):
            continue  # counted with the added function around it
        shape = shape_of(new, d)
        statements += shape.statements if shape else 0
        words.update(content_words(d.text))
    return _Added(statements, words)
