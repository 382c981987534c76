"""Rule 1: compare the items of ``before`` and ``after`` and decide, for each missing one,
whether it was renamed or moved, allowed to go, or lost.

See ``docs/scope-guard.md#rule-1-structure``.
"""

from __future__ import annotations

from collections import Counter

from adapld_cli.edit.guard.dead import DeadCode
from adapld_cli.edit.guard.evidence import Result
from adapld_cli.edit.guard.intent import names_in, wholesale_kinds
from adapld_cli.edit.guard.items import DEF_KINDS, SET_KINDS, Item
from adapld_cli.edit.guard.partners import Partners

# A missing item's status: "renamed" (or moved), "allowed", "lost", or "absorbed?" (absorbed
# into added definitions, decided once every rename has its partner).
PENDING = "absorbed?"


def compare_items(
    old: list[Item],
    new: list[Item],
    instruction: str,
    *,
    texts: tuple[str, str] | None = None,
) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """``(lost names for display, allowed names, renamed pairs)`` for ``old`` -> ``new``.
    With ``texts`` (the whole ``before`` and ``after``), what only named definitions used goes
    with them, and definitions absorbed into added ones are allowed."""
    missing = _missing(old, new)
    added = _missing(new, old)
    dead = DeadCode(old, new, texts, instruction) if texts is not None else None
    result = Result(texts[1], new, added) if texts is not None else None
    partners = Partners(added, instruction, missing)
    present = {i.name for i in new}
    kinds = wholesale_kinds(instruction)
    status: dict[str, str] = {}  # name -> "allowed" | "renamed" | "lost" | PENDING
    new_names: dict[str, str] = {}  # renamed old name -> new name
    renamed: list[tuple[str, str]] = []
    order = sorted(missing, key=lambda i: (i.name.count("."), i.line))  # parents first
    for item in order:
        parent = _missing_ancestor(item.name, status)
        if parent is not None and status[parent] in ("lost", "allowed", PENDING):
            status[item.name] = status[parent]  # goes with its parent
            continue
        if parent is not None and new_names[parent] + item.name[len(parent) :] in present:
            status[item.name] = "renamed"  # moved along with its renamed parent
            continue
        # unasked renames need the result to have stopped using the old name
        unasked = result is None or item.kind not in DEF_KINDS or not result.uses(item)
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
            status[item.name] = PENDING
        else:
            status[item.name] = "lost"
    _settle_absorbed(order, status, result, partners)
    ordered = _display_order(missing)
    lost = [i.name for i in ordered if status[i.name] == "lost"]
    shown = [n for n in lost if _missing_ancestor(n, status) is None]
    allowed = [i.name for i in ordered if status[i.name] == "allowed"]
    return unique(shown), unique(allowed), renamed


def _settle_absorbed(
    order: list[Item], status: dict[str, str], result: Result | None, partners: Partners
) -> None:
    """Decide the :data:`PENDING` items: absorbed only by definitions that are not another
    missing one renamed (nor an unasked rename), else lost; a pending item under a decided
    parent goes with it."""
    for item in order:
        if status[item.name] == PENDING:
            parent = _missing_ancestor(item.name, status)
            if parent is not None and status[parent] != PENDING:
                status[item.name] = status[parent]
            elif result is not None and result.absorbed(
                item, exclude=partners.used | partners.unasked
            ):
                status[item.name] = "allowed"
            else:
                status[item.name] = "lost"


def _missing(old: list[Item], new: list[Item]) -> list[Item]:
    """Items of ``old`` beyond their count in ``new`` (the later duplicates). Definitions and
    keys count as a multiset (an overload or a property setter is one of two); assignments
    and imports only as present or not (``df = ...`` twice may become once)."""
    left = Counter(i.name for i in new)
    seen: Counter[str] = Counter()
    out = []
    for item in old:
        seen[item.name] += 1
        limit = left[item.name] if item.kind not in SET_KINDS else min(left[item.name], 1)
        if seen[item.name] > limit and (item.kind not in SET_KINDS or seen[item.name] == 1):
            out.append(item)
    return out


def _missing_ancestor(name: str, status: dict[str, str]) -> str | None:
    parts = name.split(".")
    for k in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:k])
        if prefix in status and prefix != name:
            return prefix
    return None


def _display_order(items: list[Item]) -> list[Item]:
    """Definitions and assignments in source order, then imports."""
    return sorted(items, key=lambda i: (i.kind == "import", i.line))


def unique(names: list[str]) -> list[str]:
    """``names`` without repeats, in first-seen order."""
    return list(dict.fromkeys(names))
