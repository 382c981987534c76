"""Where generation stops: stop token ids, stop strings, a closed code block, the new-token
limit.

:meth:`StopChecker.cut` looks at the tokens one step appended and returns how many of them to
keep and why generation ends (or None). Stops are applied per token, earliest first, so every
method truncates identically. The stopping token (or the token completing a stop string) is
kept, like ``transformers.generate``.
"""

from __future__ import annotations

import re
from typing import Any

from adapld_cli.engine.types import GenerationConfig


class StopChecker:
    def __init__(self, config: GenerationConfig, tokenizer: Any, default_eos: Any) -> None:
        ids = config.stop_token_ids
        if not ids and default_eos is not None:
            ids = (default_eos,) if isinstance(default_eos, int) else tuple(default_eos)
        self.eos = set(ids)
        self.strings = tuple(s for s in config.stop_strings if s)
        if self.strings and tokenizer is None:
            raise ValueError("stop_strings need a tokenizer")
        self.block_fence = config.stop_block
        self.block = _closed_block(config.stop_block) if config.stop_block else None
        if self.block is not None and tokenizer is None:
            raise ValueError("stop_block needs a tokenizer")
        self.tokenizer = tokenizer
        self.max_new = config.max_new_tokens
        # tokens of lookback that surely cover a stop string (a token is at least one char)
        self.lookback = max((len(s) for s in self.strings), default=0) + 1

    def cut(self, generated: list[int], n_new: int) -> tuple[int, str | None]:
        """``generated`` ends with the ``n_new`` tokens of this step. Returns
        ``(keep, reason)``: keep the first ``keep`` new tokens; ``reason`` is
        "eos", "stop_string", "max_new_tokens" or None (go on)."""
        first = len(generated) - n_new
        keep, reason = n_new, None
        for j in range(first, len(generated)):
            if generated[j] in self.eos:
                keep, reason = j - first + 1, "eos"
                break
        if self.strings:
            j = self._string_end(generated, first, first + keep)
            if j is not None:
                keep, reason = j - first + 1, "stop_string"
        if self.block is not None:
            j = self._block_end(generated, first, first + keep)
            if j is not None:
                keep, reason = j - first + 1, "stop_string"
        over = first + keep - self.max_new
        if over > 0 or (over == 0 and reason is None):
            keep, reason = self.max_new - first, "max_new_tokens"
        return keep, reason

    def _string_end(self, generated: list[int], first: int, end: int) -> int | None:
        """Index of the first token in ``[first, end)`` that completes a stop string."""
        start = max(0, first - self.lookback)
        dec = self.tokenizer.decode
        if not any(s in dec(generated[start:end]) for s in self.strings):
            return None
        for j in range(first, end):
            text = dec(generated[start : j + 1])
            if any(s in text for s in self.strings):
                return j
        return None

    def _block_end(self, generated: list[int], first: int, end: int) -> int | None:
        """Index of the first token in ``[first, end)`` that completes the fence closing the
        first code block (the whole answer is read: the block opened anywhere before)."""
        assert self.block is not None
        dec = self.tokenizer.decode
        # a closing fence is a newline and the fence, ending in this step: only the step's
        # tokens (and enough before them to hold it) are decoded on every other step
        start = max(0, first - len(self.block_fence) - 1)
        if "\n" + self.block_fence not in dec(generated[start:end]):
            return None
        if not self.block.search(dec(generated[:end])):
            return None
        for j in range(first, end):
            if self.block.search(dec(generated[: j + 1])):
                return j
        return None


def _closed_block(fence: str) -> re.Pattern[str]:
    """A fence line, then any lines, then a line starting with the fence: the first block
    closed (the fence that opened it may name a language; the one closing it ends it)."""
    f = re.escape(fence)
    return re.compile(rf"^{f}[^\n]*\n(?:[^\n]*\n)*?{f}", re.MULTILINE)
