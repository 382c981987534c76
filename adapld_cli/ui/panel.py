"""The live panel: the file appearing as it is generated, coloured by where tokens came from.

Contract: :class:`LivePanel` is a context manager around Rich ``Live`` on the given (stderr)
console, with ``redirect_stdout=False`` so data written to stdout is never captured. Feed it
engine events with :meth:`LivePanel.on_event` (the callback local generation takes). It
decodes tokens incrementally (multi-byte characters split over tokens are held back until
complete) and shows the tail of the text, plus a footer: tokens, forward passes, mean
accepted length T, tokens/s and the speedup over plain decoding — measured when
``baseline_tok_s`` (a plain-decoding run on the same input) is known, else the engine's
estimate labelled "est.". A last line made only of backticks is the closing code fence being
generated, not part of the file, and is not shown. :func:`live_view` is the panel or nothing,
as a context manager yielding the event callback (or ``None``).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

from adapld_cli.engine.types import Source, Stats, StepEvent

SOURCE_STYLES = {
    Source.LEXICAL: "green",
    Source.SEMANTIC: "magenta",
    Source.BRANCH: "yellow",
    Source.MODEL: "",
}
LEGEND = (("copied", "green"), ("semantic", "magenta"), ("branch", "yellow"), ("model", ""))
_FENCE_TAIL = re.compile(r"(^|\n)`+[ \t]*$")  # the closing fence, possibly still partial


class IncrementalDecoder:
    """Turns a stream of token ids into text pieces, one per token (possibly empty)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._anchor: list[int] = []  # one token before the cache, for leading-space rules
        self._cache: list[int] = []
        self._printed = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def push(self, token: int) -> str:
        self._cache.append(token)
        base = self._decode(self._anchor) if self._anchor else ""
        text = self._decode(self._anchor + self._cache)
        text = text[len(base) :] if text.startswith(base) else text
        if text.endswith("\ufffd"):
            return ""
        piece = text[self._printed :]
        self._printed = len(text)
        if "\n" in piece or len(self._cache) > 64:
            self._anchor = self._cache[-1:]
            self._cache = []
            self._printed = 0
        return piece


def speedup_of(stats: Stats, baseline_tok_s: float | None) -> tuple[float, str]:
    """(speedup, label): measured against a plain-decoding rate, else estimated, else 0."""
    if stats.method == "ar":
        return 1.0, ""
    if baseline_tok_s and stats.decode_s > 0:
        return stats.decode_tok_s / baseline_tok_s, "measured"
    est = stats.est_speedup
    return (est, "est.") if est > 0 else (0.0, "")


def footer_text(stats: Stats, baseline_tok_s: float | None = None, prefill: bool = False) -> str:
    if prefill:
        return "reading the prompt (prefill)..."
    parts = [
        f"{stats.new_tokens} tokens",
        f"{stats.forward_passes} passes",
        f"T={stats.mean_accepted:.2f}",
        f"{stats.decode_tok_s:.1f} tok/s",
    ]
    speed, label = speedup_of(stats, baseline_tok_s)
    if speed > 0 and label:
        parts.append(f"{speed:.1f}x vs plain decoding ({label})")
    return " · ".join(parts)


class LivePanel:
    """Rich live view of one generation (see the module contract)."""

    def __init__(
        self,
        console: Any,
        tokenizer: Any,
        *,
        title: str,
        baseline_tok_s: float | None = None,
        transient: bool = True,
        max_lines: int | None = None,
    ) -> None:
        self.console = console
        self.decoder = IncrementalDecoder(tokenizer)
        self.title = title
        self.baseline_tok_s = baseline_tok_s
        self.transient = transient
        self.max_lines = max_lines
        self.pieces: list[tuple[str, str]] = []
        self.stats = Stats()
        self.started = time.perf_counter()
        self.events = 0
        self._live: Any = None

    def __enter__(self) -> LivePanel:
        from rich.live import Live

        self._live = Live(
            get_renderable=self.render,
            console=self.console,
            refresh_per_second=8,
            transient=self.transient,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(*exc)
            self._live = None

    def on_event(self, event: StepEvent) -> None:
        self.events += 1
        self.stats = event.stats
        for token, source in zip(event.tokens, event.sources, strict=False):
            piece = self.decoder.push(token)
            if piece:
                self.pieces.append((piece, SOURCE_STYLES.get(source, "")))

    def _tail_lines(self) -> int:
        if self.max_lines:
            return self.max_lines
        return max(5, min(40, self.console.size.height - 6))

    def render(self) -> Any:
        from rich.console import Group
        from rich.panel import Panel
        from rich.text import Text

        want = self._tail_lines()
        chosen: list[tuple[str, str]] = []
        newlines = 0
        for piece, style in reversed(self.pieces):
            newlines += piece.count("\n")
            chosen.append((piece, style))
            if newlines >= want:
                break
        body = Text(no_wrap=True, overflow="ellipsis")
        for piece, style in reversed(chosen):
            body.append(piece, style=style or None)
        fence = _FENCE_TAIL.search(body.plain)
        if fence is not None:
            body = body[: fence.start() + len(fence.group(1))]
        lines = body.split("\n")
        if len(lines) > want:
            lines = lines[-want:]
        body = Text("\n", no_wrap=True, overflow="ellipsis").join(lines)
        legend = Text("  ")
        for label, style in LEGEND:
            legend.append("■ ", style=style or "bold")
            legend.append(f"{label}  ")
        footer = Text(footer_text(self.stats, self.baseline_tok_s, prefill=self.events == 0))
        elapsed = time.perf_counter() - self.started
        return Panel(
            Group(body, Text(""), footer, legend),
            title=f"[bold]{self.title}[/] · {elapsed:.1f}s",
            title_align="left",
            border_style="blue",
        )


@contextlib.contextmanager
def live_view(
    console: Any,
    tokenizer: Any,
    *,
    title: str,
    enabled: bool,
    baseline_tok_s: float | None = None,
    transient: bool = True,
) -> Iterator[Callable[[StepEvent], None] | None]:
    """A :class:`LivePanel` when ``enabled``, yielding its event callback; else ``None``."""
    if not enabled:
        yield None
        return
    with LivePanel(
        console, tokenizer, title=title, baseline_tok_s=baseline_tok_s, transient=transient
    ) as panel:
        yield panel.on_event
