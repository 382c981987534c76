"""Checking a chat answer that replaces a file the conversation carried (``adapld serve
--check-edits``): the same parse check and scope guard ``adapld edit`` runs on its own result.

Contract: :func:`check_answer` takes a request's messages and the answer the model gave, and
returns an :class:`AnswerCheck` whose ``status`` is ``"ok"``, ``"flagged"`` (with a one-line
``reason``) or ``"not checked"`` (with the reason it was not). Pure: it never raises on odd
input and never writes. It flags only a pair it could match:

1. **The file before.** Fenced blocks (```` ``` ```` or ``~~~``, three or more) in the user
   messages. A block whose opener follows a line naming a path (aider's "whole" format:
   ``calc.py`` on its own line, then the fence) is that file; aider also sends the files in an
   earlier user message than the instruction, so every user message counts, the newest
   version of a path winning.
2. **The file after.** The answer (a last ``assistant`` message of the request is a prefill:
   the answer continues it, so it counts as the answer's start). A block of the answer
   labelled with a path the conversation carried is that file's new version, whatever it
   holds: a client following the whole format writes it over the file. Otherwise the
   before is the largest block of the newest user message that carries one, and the after
   is the answer's largest block (or the whole answer when it has none).
3. **Is it a whole file?** A labelled block, or a block the request's prefill opened (the
   client asked for the file and writes what follows), is. Any other answer counts as a
   whole file only when it keeps at least half of the before's distinct non-blank lines:
   an explanation in prose, or a snippet in a fence, is what a chat client shows rather
   than writes, so it is "not checked", never flagged. Unfenced prose is therefore not
   flagged (aider's whole format writes fenced blocks only); an unlabelled answer cut to
   under half the file is not flagged either, a miss chosen over false flags in chat.
4. **The checks**, in ``adapld edit``'s order (:mod:`adapld_cli.edit.judge`): an open block
   when generation stopped at the token limit (``finish_reason="length"``); the before
   parsed and the after does not (:func:`~adapld_cli.edit.judge.parse_issue`); the after
   loses or changes what the instruction did not ask for
   (:func:`~adapld_cli.edit.judge.scope_issue`). The instruction is the last user message
   without its fenced blocks (the whole message when nothing else is left).

The language comes from the path (:func:`~adapld_cli.edit.syntax.language_for`), else from
the fence's tag (``python``, ``py``, ``json``...); without one only the line rule applies.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["ok", "flagged", "not checked"]

WHOLE_SHARE = 0.5  # an unlabelled answer keeping this share of the file's lines is the file
_OPENER = re.compile(r"^(?P<fence>`{3,}|~{3,})[ \t]*(?P<tag>[^\s`]*)[^`]*$")
_PATH_STRIP = "*`#:"  # what aider strips around the path line before a fence


@dataclass(frozen=True)
class AnswerCheck:
    """The verdict on one answer. Branch on :attr:`status` (or :attr:`flagged`) only.

    - ``reason``: why it is flagged or not checked (one line); ``None`` when ok.
    - ``file``: the path the pair was matched by, when one was named; ``language``: the
      language the checks used (``None``: the line rule only).
    """

    status: Status
    reason: str | None = None
    file: str | None = None
    language: str | None = None

    @property
    def flagged(self) -> bool:
        return self.status == "flagged"

    @property
    def checked(self) -> bool:
        return self.status != "not checked"

    def as_json(self) -> dict[str, Any]:
        """``{"status", "checked", "ok", "reason", "file", "language"}``: ``ok`` is false only
        when flagged (an answer not checked is not flagged)."""
        return {
            "status": self.status,
            "checked": self.checked,
            "ok": not self.flagged,
            "reason": self.reason,
            "file": self.file,
            "language": self.language,
        }


@dataclass(frozen=True)
class Block:
    """A fenced block: ``code`` (ends with a newline unless empty), the fence's ``tag``, the
    ``path`` on the line before the opener (aider's whole format), where the opener starts
    in its text, and whether a closing fence was seen."""

    code: str
    tag: str
    path: str | None
    start: int
    closed: bool


def not_checked(reason: str) -> AnswerCheck:
    return AnswerCheck("not checked", reason)


def check_answer(
    messages: Sequence[dict[str, str]], answer: str, *, finish_reason: str | None = None
) -> AnswerCheck:
    """Judge ``answer`` to the conversation ``messages`` (see the module contract)."""
    users = [m["content"] for m in messages if m.get("role") == "user"]
    if not users:
        return not_checked("the conversation has no user message")
    last = messages[-1] if messages else {}
    prefill = last["content"] if last.get("role") == "assistant" else ""
    carried = [fenced_blocks(text) for text in users]
    if not any(carried):
        return not_checked("the conversation carries no fenced code")
    text = prefill + answer
    pair = _labelled_pair(carried, fenced_blocks(text))
    if pair is None:
        pair = _unlabelled_pair(carried, text, len(prefill))
        if isinstance(pair, AnswerCheck):
            return pair
    return _judge(*pair, _instruction(users[-1]), finish_reason)


def fenced_blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text`` in order; one left open runs to the end of the text."""
    blocks: list[Block] = []
    lines = text.splitlines(keepends=True)
    offset, i = 0, 0
    while i < len(lines):
        match = _OPENER.match(lines[i].rstrip("\r\n"))
        if match is None:
            offset += len(lines[i])
            i += 1
            continue
        fence, start = match["fence"], offset
        path = _path_line(lines[i - 1]) if i else None
        body: list[str] = []
        offset += len(lines[i])
        i += 1
        closed = False
        while i < len(lines):
            line = lines[i]
            offset += len(line)
            i += 1
            if _closes(line, fence):
                closed = True
                break
            body.append(line)
        code = "".join(body)
        if code and not code.endswith("\n"):
            code += "\n"
        blocks.append(Block(code, match["tag"], path, start, closed))
    return blocks


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def _path_line(line: str) -> str | None:
    """The path aider writes on the line before a fence (``calc.py``, ``**src/a.py**``), or
    ``None`` when that line is not one token."""
    name = line.strip().strip(_PATH_STRIP).strip()
    return name if name and not any(c.isspace() for c in name) else None


def _labelled_pair(carried: list[list[Block]], answered: list[Block]) -> tuple[Block, Block] | None:
    """The answer's largest block labelled with a path the conversation carried, and the
    newest carried version of that path; ``None`` when no block is labelled so."""
    versions = {b.path: b for blocks in carried for b in blocks if b.path}
    labelled = [b for b in answered if b.path in versions]
    if not labelled:
        return None
    after = max(labelled, key=lambda b: len(b.code))
    return versions[after.path], after


def _unlabelled_pair(
    carried: list[list[Block]], text: str, prefill_end: int
) -> tuple[Block, Block] | AnswerCheck:
    """The newest code-carrying user message's largest block and the answer's largest block
    (or the answer itself, as a block never closed), or why the answer is not checked: it
    is not a whole file (the module contract, step 3)."""
    before = max(next(b for b in reversed(carried) if b), key=lambda b: len(b.code))
    answered = fenced_blocks(text)
    if answered:
        after = max(answered, key=lambda b: len(b.code))
    else:
        code = text.strip("\n") + "\n" if text.strip() else ""
        after = Block(code, "", None, 0, False)
    if answered and after.start < prefill_end:
        return before, after  # the request's prefill opened it: the client writes it
    kept, total = _kept_lines(before.code, after.code)
    if total and kept >= WHOLE_SHARE * total:
        return before, after
    what = "a fenced block" if answered else "text with no code fence"
    return not_checked(
        f"the answer is {what} keeping {kept} of the file's {total} distinct non-blank lines: "
        "not a whole file (aider's whole format names the file on the line before the fence)"
    )


def _kept_lines(before: str, after: str) -> tuple[int, int]:
    """How many of ``before``'s distinct non-blank lines (stripped) ``after`` has, of how
    many."""
    old = {line.strip() for line in before.splitlines() if line.strip()}
    new = {line.strip() for line in after.splitlines() if line.strip()}
    return len(old & new), len(old)


def _instruction(message: str) -> str:
    """The user message without its fenced blocks (and their path lines); the whole message
    when nothing else is left."""
    lines = message.splitlines(keepends=True)
    keep = [True] * len(lines)
    for block in fenced_blocks(message):
        first = message[: block.start].count("\n")
        n = 1 + block.code.count("\n") + (1 if block.closed else 0)
        start = first - 1 if block.path and first else first
        for k in range(start, min(first + n, len(lines))):
            keep[k] = False
    rest = "".join(line for line, kept in zip(lines, keep, strict=True) if kept).strip()
    return rest or message.strip()


def _language(block: Block, other: Block) -> tuple[str | None, str]:
    """The language id and a file name for the format checks: from the path, else a tag."""
    from adapld_cli.edit.formats import format_for
    from adapld_cli.edit.syntax import has_grammar, language_for

    if block.path:
        return language_for(block.path) or format_for(block.path), block.path
    for tag in (block.tag.lower(), other.tag.lower()):
        if language_for(f"file.{tag}"):  # an extension: py, ts, json...
            return language_for(f"file.{tag}"), f"file.{tag}"
        if tag and has_grammar(tag):  # a language id: python, typescript...
            return tag, ""
    return None, ""


def _judge(before: Block, after: Block, instruction: str, finish_reason: str | None) -> AnswerCheck:
    """Run ``adapld edit``'s checks on the pair (the module contract, step 4)."""
    from adapld_cli.edit.judge import parse_issue, scope_issue

    language, name = _language(before, after)
    verdict = AnswerCheck("ok", None, before.path, language)
    if not after.closed and finish_reason == "length":
        reason = "the answer hit the token limit before the end of the file"
        return AnswerCheck("flagged", reason, verdict.file, language)
    if after.code == before.code:
        return verdict
    issue = parse_issue(before.code, after.code, language, name)
    if issue is not None:
        reason = f"the answer does not parse ({issue})"
        return AnswerCheck("flagged", reason, verdict.file, language)
    lost = scope_issue(before.code, after.code, language=language, instruction=instruction)
    if lost is not None:
        return AnswerCheck("flagged", f"the answer {lost[0]}", verdict.file, language)
    return verdict
