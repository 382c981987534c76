"""The scope guard: refuse a result that loses what the instruction did not ask to lose, or
changes what it did not ask to change.

Call :func:`check_scope` on every result that would be written or reported, after the
truncation and syntax checks, and branch on :attr:`ScopeVerdict.lost` only::

    verdict = check_scope(source.text, new_text, language=lang, instruction=instruction)
    if verdict.lost and not force:
        message = verdict.refusal  # goes after "inv.py: refused — "

then, on a result it keeps, :func:`check_unasked` (a reason string, or ``None``).

What it refuses and allows, and why: ``docs/scope-guard.md``.
"""

from __future__ import annotations

from adapld_cli.edit.guard.check import check_scope
from adapld_cli.edit.guard.unasked import check_unasked
from adapld_cli.edit.guard.verdict import REFUSAL_TAIL, ScopeVerdict

__all__ = ["REFUSAL_TAIL", "ScopeVerdict", "check_scope", "check_unasked"]
