"""The guard's entry point: :func:`check_scope` runs the three rules of
``docs/scope-guard.md`` on a result and returns a :class:`~.verdict.ScopeVerdict`.

Rule 1 (structure) is :mod:`.compare`, rule 3 (bodies) :mod:`.bodies`; rule 2 (line share),
which needs no grammar, is here.
"""

from __future__ import annotations

from adapld_cli.edit.guard.bodies import emptied_bodies
from adapld_cli.edit.guard.compare import compare_items
from adapld_cli.edit.guard.intent import asks_to_delete
from adapld_cli.edit.guard.scan import is_structural, scan
from adapld_cli.edit.guard.verdict import ScopeVerdict


def check_scope(before: str, after: str, *, language: str | None, instruction: str) -> ScopeVerdict:
    """Judge whether ``after`` (the model's whole file) loses anything of ``before`` that
    ``instruction`` does not ask to lose. ``language`` is the id from
    :func:`adapld_cli.edit.syntax.language_for`. Pure: never writes; two tree-sitter parses per
    text and a walk of the functions whose text changed."""
    n_before, n_after = non_blank_lines(before), non_blank_lines(after)
    asks = asks_to_delete(instruction)
    base = {"lines_before": n_before, "lines_after": n_after, "asks_to_delete": asks}
    if before == after:
        return ScopeVerdict(lost=False, **base)
    line_rule = not asks and drops_too_much(n_before, n_after)
    old = scan(before, language) if is_structural(before, language) else None
    if old is None or not old.items:
        return ScopeVerdict(lost=line_rule, line_rule=line_rule, **base)
    new = scan(after, language)
    lost, allowed, renamed = compare_items(
        old.items, new.items if new else [], instruction, texts=(before, after)
    )
    emptied = emptied_bodies(old, new, instruction, renamed) if new is not None else []
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


# -- rule 2: line share ------------------------------------------------------------------------
def non_blank_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip())


def drops_too_much(n_before: int, n_after: int) -> bool:
    """More than half of the non-blank lines gone, and at least 3 of them (or all)."""
    dropped = n_before - n_after
    return 2 * dropped > n_before and (dropped >= 3 or n_after == 0)
