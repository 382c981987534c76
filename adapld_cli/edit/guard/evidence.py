"""Word evidence for rule 1: how akin two definitions are, whether new code holds an old
definition's words, and which names the result still uses.

A definition's *content words* are its identifiers and literal words, its own name, common
keywords and numbers left out. See ``docs/scope-guard.md#renames`` and ``#absorbed-definitions``.
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

from adapld_cli.edit.guard.items import DEF_KINDS, Item
from adapld_cli.edit.guard.words import COMMON_WORDS, WORD_RE

# a rename the instruction names needs this kinship (share of the old words it kept)
RENAME_KINSHIP = 0.5
# a definition absorbed into added ones (or rewritten under a new name): this share of its
# words, at least that many, recur there
ABSORBED_SHARE = 0.8
ABSORBED_MIN_WORDS = 12


def kinship(old: Item, new: Item) -> float:
    """The share of ``old``'s distinct content words that ``new``'s text has: 1.0 for a body
    kept under a new name, low for an unrelated function of the same class. Items without
    text (data keys) are all akin (1.0)."""
    if not old.text or not new.text:
        return 1.0
    mine = content_words(old.text, old.name.rpartition(".")[2])
    return len(shared_words(old, new)) / len(mine) if mine else 0.0


def shared_words(old: Item, new: Item) -> set[str]:
    """The distinct :func:`content_words` of ``old`` that ``new`` has too."""
    mine = content_words(old.text, old.name.rpartition(".")[2])
    return set(mine) & set(content_words(new.text, new.name.rpartition(".")[2]))


@lru_cache(maxsize=1024)
def content_words(text: str, own: str = "") -> Counter[str]:
    """The words of ``text`` that carry meaning: not ``own`` (a definition's name), not
    :data:`~.words.COMMON_WORDS`, not numbers. Cached: do not modify the result."""
    return Counter(
        w for w in WORD_RE.findall(text) if w != own and w not in COMMON_WORDS and not w.isdigit()
    )


def absorbs(new: list[Item], old: Item) -> bool:
    """Whether the texts of ``new`` hold at least :data:`ABSORBED_SHARE` of ``old``'s words
    (:func:`content_words`, counted with repeats, its own name left out), ``old`` having at
    least :data:`ABSORBED_MIN_WORDS` of them."""
    mine = content_words(old.text, old.name.rpartition(".")[2])
    total = sum(mine.values())
    if total < ABSORBED_MIN_WORDS:
        return False
    theirs: Counter[str] = Counter()
    for item in new:
        theirs.update(content_words(item.text))
    return sum(min(n, theirs[w]) for w, n in mine.items()) >= ABSORBED_SHARE * total


def blank(text: str, name: str) -> str:
    """``text`` with the whole-word occurrences of ``name`` blanked out (for rename pairing)."""
    if name not in text:
        return text
    return WORD_RE.sub(lambda m: "\0" if m.group() == name else m.group(), text)


class Result:
    """The result's side of rule 1's evidence: which names its text still uses, and which
    definitions it adds."""

    def __init__(self, after: str, new: list[Item], added: list[Item]) -> None:
        self.words = Counter(WORD_RE.findall(after))
        self.leaves = Counter(i.name.rpartition(".")[2] for i in new)
        names = {a.name for a in added}
        # added definitions not nested in another added one (their text holds the nested)
        self.added = [
            a for a in added if a.kind in DEF_KINDS and a.name.rpartition(".")[0] not in names
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
        if item.kind not in DEF_KINDS or self.uses(item):
            return False
        return absorbs([a for a in self.added if id(a) not in exclude], item)
