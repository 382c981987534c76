"""What the guard found, and the refusal message it reads as.

See ``docs/scope-guard.md#using-it`` for the messages.
"""

from __future__ import annotations

from dataclasses import dataclass

REFUSAL_TAIL = "; nothing written (--force writes it anyway)"
SHOWN_NAMES = 3  # names spelled out in the message before "(+N more)"


@dataclass(frozen=True)
class ScopeVerdict:
    """What :func:`~adapld_cli.edit.guard.check_scope` found. Branch on :attr:`lost` only.

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


def describe_dropped(dropped: int, total: int) -> str:
    """``would drop 65 of 68 non-blank lines, which the instruction does not ask for``."""
    return (
        f"would drop {dropped} of {total} non-blank lines, which the instruction does not ask for"
    )


def _listed(names: tuple[str, ...] | list[str], shown: int) -> str:
    more = f" (+{len(names) - shown} more)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
