"""Code the edit made dead: a missing import or top-level assignment that only definitions the
instruction names used, and that the result no longer mentions.

See ``docs/scope-guard.md#code-the-edit-made-dead``.
"""

from __future__ import annotations

import re

from adapld_cli.edit.guard.intent import names_in
from adapld_cli.edit.guard.items import DEF_KINDS, Item, end_line
from adapld_cli.edit.guard.words import HEADER_RE, WORD_RE


class DeadCode:
    """A missing import or assignment that only definitions named by the instruction and still
    present used (``heapq`` used only in ``distances_to``, when the instruction names
    ``distances_to`` and the result rewrote it) and whose name the result no longer mentions
    at all went with the code that used it."""

    def __init__(
        self, old: list[Item], new: list[Item], texts: tuple[str, str], instruction: str
    ) -> None:
        self.before, self.after = texts
        kept = {i.name for i in new}
        self.named_spans = [
            (i.line, end_line(i))
            for i in old
            if i.kind in DEF_KINDS and i.name in kept and names_in(i.name, instruction)
        ]
        self._before_words: dict[str, list[int]] | None = None
        self._after_words: set[str] | None = None

    def only_named_code_used(self, item: Item) -> bool:
        """Whether ``item`` was used only inside the named definitions and the result no
        longer mentions it."""
        if not self.named_spans:
            return False
        words = bound_names(item)
        if not words or any(w in self.after_words() for w in words):
            return False
        own = (item.line, end_line(item))
        uses = [n for w in words for n in self.before_words().get(w, ()) if not _within(n, own)]
        return bool(uses) and all(any(_within(n, s) for s in self.named_spans) for n in uses)

    def before_words(self) -> dict[str, list[int]]:
        """Each word of ``before`` and the lines it is on (computed once)."""
        if self._before_words is None:
            self._before_words = {}
            for lineno, line in enumerate(self.before.splitlines(), start=1):
                for word in WORD_RE.findall(line):
                    self._before_words.setdefault(word, []).append(lineno)
        return self._before_words

    def after_words(self) -> set[str]:
        """The words of the result (computed once)."""
        if self._after_words is None:
            self._after_words = set(WORD_RE.findall(self.after))
        return self._after_words


def bound_names(item: Item) -> set[str]:
    """The identifiers code uses to refer to an import or a top-level assignment: the import's
    alias (``np``), else its first and last dotted parts (``os.path``: ``os``, ``path``); an
    assignment's plain name; nothing for a definition (a helper the named code stopped
    calling may still be API), a wildcard or a C include."""
    if item.kind == "assignment":
        return {item.name} if WORD_RE.fullmatch(item.name) else set()
    if item.kind != "import" or item.name.endswith("*") or HEADER_RE.fullmatch(item.name):
        return set()
    alias = re.search(r"(?<![\w$.])" + re.escape(item.name) + r"\s+as\s+([\w$]+)", item.text)
    if alias:
        return {alias.group(1)}
    parts = re.split(r"[./:]+", item.name)
    return {p for p in (parts[0], parts[-1]) if WORD_RE.fullmatch(p)}


def _within(line: int, span: tuple[int, int]) -> bool:
    return span[0] <= line <= span[1]
