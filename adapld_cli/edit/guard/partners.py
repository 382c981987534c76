"""What a missing item became: its rename or move partner among the items the result adds.

See ``docs/scope-guard.md#renames`` and ``#moves``.
"""

from __future__ import annotations

from adapld_cli.edit.guard.evidence import RENAME_KINSHIP, absorbs, blank, kinship, shared_words
from adapld_cli.edit.guard.intent import asks_to_move, asks_to_rename, names_in
from adapld_cli.edit.guard.items import DEF_KINDS, Item


class Partners:
    """The added items, indexed to find what a missing item became (each used once):

    - a rename: same kind and parent, and the same text once each item's own name is blanked
      out, or (when the instruction speaks of renaming) a new name the instruction names whose
      text is akin to the missing item's (:func:`~.evidence.kinship` at least
      :data:`~.evidence.RENAME_KINSHIP`) and more akin to it than to any other missing item of
      its kind and parent;
    - a move: same kind and name under another parent, when the instruction requests a move
      (:func:`~.intent.asks_to_move`);
    - a derived rename (:meth:`derived`);
    - a rename with an edited body (:meth:`rewritten`).
    """

    def __init__(self, added: list[Item], instruction: str, missing: list[Item]) -> None:
        self.used: set[int] = set()
        self.by_name = {c.name: c for c in added}
        self.replaced = _replaced(added, instruction, missing)
        self.by_text: dict[tuple[str, str, str], list[Item]] = {}
        self.by_leaf: dict[tuple[str, str], list[Item]] = {}
        self.by_parent: dict[tuple[str, str], list[Item]] = {}
        self.named: dict[tuple[str, str], list[Item]] = {}
        asks_rename = asks_to_rename(instruction)
        self.instruction = instruction
        self.asks_move = asks_to_move(instruction)
        for cand in added:
            parent, _, leaf = cand.name.rpartition(".")
            if cand.text:
                key = (cand.kind, parent, blank(cand.text, leaf))
                self.by_text.setdefault(key, []).append(cand)
            self.by_leaf.setdefault((cand.kind, leaf), []).append(cand)
            if cand.kind in DEF_KINDS:
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
            same = self.by_text.get((item.kind, parent, blank(item.text, leaf)), [])
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
        most of ``item``'s words (:func:`~.evidence.absorbs`), whatever the instruction says
        (``NFA`` rewritten as ``DFA``); the caller checks that the result no longer uses the
        old name."""
        parent = item.name.rpartition(".")[0]
        cands = [
            c
            for c in self.by_parent.get((item.kind, parent), [])
            if self._may_rename(item, c) and absorbs([c], item)
        ]
        return self._first(cands)

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

    def _first(self, cands: list[Item] | None) -> Item | None:
        for cand in cands or []:
            if id(cand) not in self.used:
                self.used.add(id(cand))
                return cand
        return None


def _replaced(
    added: list[Item], instruction: str, missing: list[Item]
) -> list[tuple[str, str, str, str]]:
    """``(kind, parent, old leaf, new leaf)`` for each named missing definition and named
    added one of the same kind and parent: a named definition replaced by a named new one."""
    named_added = [c for c in added if c.kind in DEF_KINDS and names_in(c.name, instruction)]
    return [
        (
            o.kind,
            o.name.rpartition(".")[0],
            o.name.rpartition(".")[2],
            a.name.rpartition(".")[2],
        )
        for o in missing
        if o.kind in DEF_KINDS and names_in(o.name, instruction)
        for a in named_added
        if a.kind == o.kind and a.name.rpartition(".")[0] == o.name.rpartition(".")[0]
    ]


def _siblings(a: Item, b: Item) -> bool:
    """Same kind and same parent."""
    return a.kind == b.kind and a.name.rpartition(".")[0] == b.name.rpartition(".")[0]


def _closest(new: Item, missing: list[Item]) -> Item | None:
    """The item of ``missing`` most akin to ``new`` (:func:`~.evidence.kinship`, then the
    number of words they share; the first on a tie), if at least
    :data:`~.evidence.RENAME_KINSHIP` akin."""
    best, score = None, (RENAME_KINSHIP, -1)
    for old in missing:
        here = (kinship(old, new), len(shared_words(old, new)))
        if here[0] >= RENAME_KINSHIP and here > score:
            best, score = old, here
    return best
