"""What the instruction asks: which names it names, whether it requests a deletion, a move or
a rename, and which kinds of thing it asks to delete wholesale.

Pure functions of the instruction's text (and a name). The rules they serve are in
``docs/scope-guard.md#what-the-instruction-names`` and ``#word-lists``.
"""

from __future__ import annotations

import re
from functools import lru_cache

from adapld_cli.edit.guard.words import (
    CLAUSE_START_RE,
    CODE_SPAN_RE,
    DELETION_RE,
    HEADER_RE,
    KIND_NOUNS,
    MOVE_RE,
    RENAME_RE,
    REQUEST_LEAD_RE,
    SHRINK_ANYWHERE,
    SHRINK_RE,
    WHOLESALE_RE,
)


# -- requests ----------------------------------------------------------------------------------
def asks_to_delete(instruction: str) -> bool:
    """Whether the instruction has a deletion word (:data:`~.words.DELETION_WORDS`), wherever
    it stands, case-insensitive (rule 2)."""
    return DELETION_RE.search(instruction) is not None


def asks_to_shrink(instruction: str) -> bool:
    """Whether the instruction *requests* a deletion (rule 3): a verb of
    :data:`~.words.SHRINK_VERBS` that starts a clause or follows ``and``/``then``/``also``/
    ``or``/``you``/``please`` ("remove the prints", "1. Remove the ``dup()`` method", "add X
    and drop Y"), or ``shorter``/``simpler`` anywhere; not a deletion word that describes ("a
    ``remove`` method", "merge sort", "alpha-beta pruning", "on insertion, deletion", "it
    should reduce traffic", "scores to prune branches")."""
    return _requested(SHRINK_RE, instruction, always=SHRINK_ANYWHERE)


def asks_to_move(instruction: str) -> bool:
    """Whether the instruction *requests* a move (rule 1): a word of :data:`~.words.MOVE_RE`
    used as :func:`asks_to_shrink` uses its verbs ("wrap these functions in a class", "then
    move f to B"), not one that describes ("the sequence should be split by
    ``self.split``")."""
    return _requested(MOVE_RE, instruction)


def asks_to_rename(instruction: str) -> bool:
    """Whether the instruction speaks of renaming: ``rename``, ``call it``, ``name it``,
    ``name to`` anywhere."""
    return RENAME_RE.search(instruction) is not None


def _requested(verbs: re.Pattern[str], instruction: str, always: set[str] | None = None) -> bool:
    """Whether a match of ``verbs`` in ``instruction`` is a request: it starts a clause or
    follows ``and``/``then``/``also``/``or``/``you``/``please``; a match whose lowercase text
    is in ``always`` counts wherever it stands."""
    for m in verbs.finditer(instruction):
        if always and m.group().lower() in always:
            return True
        head = instruction[: m.start()]
        if CLAUSE_START_RE.search(head) or REQUEST_LEAD_RE.search(head):
            return True
    return False


def wholesale_kinds(instruction: str) -> set[str]:
    """Kinds the instruction asks to delete wholesale ("remove unused imports" -> import); a
    deletion word that only describes ("change all the classes to support a ``remove``
    method") asks for nothing (:func:`asks_to_shrink`), nor does a wholesale word in a code
    span ("remove the `duplicate` methods" names methods called ``duplicate``)."""
    if not asks_to_shrink(instruction):
        return set()
    if not WHOLESALE_RE.search(CODE_SPAN_RE.sub(" ", instruction)):  # "the `duplicate` methods"
        return set()
    kinds: set[str] = set()
    for nouns, covered in KIND_NOUNS.items():
        if re.search(r"\b(?:" + nouns + r")\b", instruction, re.IGNORECASE):
            kinds.update(covered)
    return kinds


# -- names -------------------------------------------------------------------------------------
def names_in(name: str, instruction: str) -> bool:
    """Whether ``instruction`` names ``name``: its full name or its last part, as a whole
    identifier, case-sensitive; a lowercase word that starts a clause (the imperative verb of
    ``add a docstring``) does not count."""
    return any(_mentions(c, instruction) for c in _candidates(name))


def _candidates(name: str) -> set[str]:
    """Ways an instruction may name ``name``: itself and its last part (``Item.total_value``
    -> ``total_value``, ``os/exec`` -> ``exec``, ``impl Shape`` -> ``Shape``, ``sys/types.h``
    -> ``types.h`` and ``types``)."""
    out = {name}
    header = HEADER_RE.fullmatch(name)
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
        if verb_like and CLAUSE_START_RE.search(instruction[: m.start()]):
            continue
        return True
    return False
