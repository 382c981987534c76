"""An answer that says why before it gives the file (a fix request's, see
:func:`~adapld_cli.edit.prompt.fix_conversation`).

Contract: :func:`explained` generates such an answer and returns it as every other answer
is returned, the text from the file on (:func:`~adapld_cli.edit.prompt.after_explanation`).
The model runs until the fence that closes the file's block (``stop_block``: the words it
adds after the file are never read, so never generated) or the end of its turn. An answer
that ends its turn with the words alone, no code block, is continued: its words are kept as
the answer's opening, followed by a blank line and the opened code block, and the model
generates the file from there (a second generation; the prompt's prefix cache rows are
reused). Without it such an answer is no file at all, and the attempt is spent
(docs/design.md, "Fixing a failing result").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from adapld_cli.edit.prompt import Conversation, after_explanation
from adapld_cli.edit.request import Backend, Generation, PreparedEdit, refit
from adapld_cli.engine.types import StepEvent


def explained(
    backend: Backend, prepared: PreparedEdit, on_event: Callable[[StepEvent], None] | None = None
) -> Generation:
    """The answer to ``prepared`` (a conversation with ``explain``), from the file on."""
    conv = prepared.conversation
    assert conv is not None and conv.explain
    answer = backend.generate(prepared, on_event)
    if answer.stop_reason != "eos" or _has_fence(answer.text, conv.fence):
        return replace(answer, text=after_explanation(answer.text, conv.fence))
    retry = refit(backend, prepared, words_then_file(conv, answer.text, prepared.lang))
    if retry is None:  # the words and the file do not fit: the words alone, no file
        return replace(answer, text=after_explanation(answer.text, conv.fence))
    from adapld_cli.edit.repair import combined_stats

    file = backend.generate(retry, on_event)
    return Generation(
        file.text,
        combined_stats(answer.stats, file.stats),
        file.stop_reason,
        answer.tokens + file.tokens,
    )


def words_then_file(conv: Conversation, words: str, lang: str | None) -> Conversation:
    """``conv`` answered so far by ``words``: its opening is the words, a blank line and
    the code block opened as a first attempt's is (the fence, the language); the answer
    continues with the file and ends at the closing fence."""
    opening = f"{conv.opening}{words.strip()}\n\n{conv.fence}{lang or ''}\n"
    return Conversation(conv.messages, opening, conv.fence, conv.reference)


def _has_fence(text: str, fence: str) -> bool:
    """Whether a line of ``text`` starts with ``fence`` (a code block opened)."""
    return re.search(rf"^{re.escape(fence)}", text, re.MULTILINE) is not None
