"""Generation for the server: one loaded model, one generation at a time, on one thread.

Contract: :class:`Generator` turns a checked :class:`~adapld_cli.serve.protocol.ChatRequest`
into a :class:`Job` (the prompt rendered exactly as ``adapld edit`` renders its own, through
:func:`adapld_cli.edit.prompt.chat_text`, so greedy output equals local ``ar``'s on the same
messages) and runs jobs on its worker thread in arrival order. A job reports through its
``post`` callback (called from the worker thread): ``("delta", text, progress)`` pieces of
the answer, then ``("done", finish_reason, usage)`` or ``("error", message)``. With a ``log``
callback, each finished answer also gives it one line of timings (:func:`timing_line`). Setting
``job.cancel`` stops the job after the current decode step, with nothing more posted.
The stop strings are never part of the answer, and a piece never ends inside a multi-byte
character or in what may still become a stop string.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from adapld_cli.serve.protocol import ApiError, ChatRequest, prediction_counts

Post = Callable[[tuple], None]


@dataclass
class Job:
    request: ChatRequest
    prompt: list[int]
    config: Any  # GenerationConfig
    reference: list[int]
    post: Post
    cancel: threading.Event = field(default_factory=threading.Event)


class TextCutter:
    """The answer's text as tokens arrive: what is safe to send, and where a stop string cut
    it. The text is decoded whole each time, so tokenizers' spacing rules hold exactly."""

    def __init__(self, tokenizer: Any, stops: tuple[str, ...]) -> None:
        self.tokenizer = tokenizer
        self.stops = stops
        self.sent = 0  # characters already sent

    def text(self, tokens: list[int]) -> tuple[str, bool]:
        """The whole answer so far, cut before the first stop string; and whether cut."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        cuts = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        return (text[: min(cuts)], True) if cuts else (text, False)

    def piece(self, tokens: list[int], final: bool) -> str:
        """The next piece to send (possibly empty)."""
        text, cut = self.text(tokens)
        end = len(text)
        if not (final or cut):
            while end and text[end - 1] == "\ufffd":  # a character still incomplete
                end -= 1
            end -= self._held(text[:end])
        piece = text[self.sent : max(end, self.sent)]
        self.sent = max(end, self.sent)
        return piece

    def _held(self, text: str) -> int:
        """Length of the longest end of ``text`` that begins a stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best


class Generator:
    """The loaded model behind the API (see the module contract)."""

    def __init__(
        self,
        loaded: Any,
        *,
        method: str = "adapld",
        max_tokens: int = 8192,
        model_id: str | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        from adapld_cli.edit.local import context_limit, stop_token_ids

        self.loaded = loaded
        self.method = method
        self.max_tokens = max_tokens
        self.model_id = model_id or loaded.name
        self.log = log
        self.limit = context_limit(loaded)
        self.stop_ids = stop_token_ids(loaded)
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="adapld-generate", daemon=True)
        self.current: Job | None = None
        # the generation thread's engine.PrefixCache and engine.Workspaces (made there)
        self.prefix: Any = None
        self.workspaces: Any = None

    # -- requests -----------------------------------------------------------------------
    def job(self, request: ChatRequest, post: Post) -> Job:
        """Render and check a request; raises :class:`ApiError` (400) when it cannot fit."""
        from adapld_cli.edit.prompt import chat_text
        from adapld_cli.engine.types import GenerationConfig

        tok = self.loaded.tokenizer
        prompt = list(tok(chat_text(tok, request.messages), add_special_tokens=False)["input_ids"])
        room = (
            self.max_tokens
            if self.limit is None
            else min(self.max_tokens, self.limit - len(prompt))
        )
        if room < 1:
            raise ApiError(
                400,
                f"the prompt has {len(prompt)} tokens: no room left in the model's context "
                f"({self.limit})",
                param="messages",
                code="context_length_exceeded",
            )
        wanted = request.max_tokens
        if wanted is not None and wanted > room:
            raise ApiError(
                400,
                f"max_tokens {wanted} is more than this request can have ({room}: the "
                f"server's limit {self.max_tokens}, the context {self.limit} less the prompt's "
                f"{len(prompt)} tokens)",
                param="max_tokens",
                code="context_length_exceeded",
            )
        reference = []
        if request.prediction:
            reference = list(tok(request.prediction, add_special_tokens=False)["input_ids"])
        config = GenerationConfig(
            max_new_tokens=wanted or room,
            stop_token_ids=self.stop_ids,
            stop_strings=request.stop,
            temperature=request.temperature,
            top_p=request.top_p,
            seed=request.seed,
        )
        return Job(request, prompt, config, reference, post)

    # -- the worker ---------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        self._jobs.put(job)

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel the running job, drop queued ones, end the worker thread."""
        while True:
            try:
                queued = self._jobs.get_nowait()
            except queue.Empty:
                break
            if queued is not None:
                queued.cancel.set()
        if self.current is not None:
            self.current.cancel.set()
        self._jobs.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if job.cancel.is_set():
                continue
            self.current = job
            try:
                self.generate(job)
            except Exception as exc:  # a failed generation answers 500; the server goes on
                job.post(("error", f"generation failed: {type(exc).__name__}: {exc}"))
            finally:
                self.current = None

    def generate(self, job: Job) -> None:
        """Generate one job, posting pieces and the end (see the module contract)."""
        from adapld_cli.engine import PrefixCache, Workspaces, stream

        if self.prefix is None:  # one generation at a time uses them (this thread)
            self.prefix, self.workspaces = PrefixCache(), Workspaces()
        tok = self.loaded.tokenizer
        cutter = TextCutter(tok, job.request.stop)
        tokens: list[int] = []
        stats = None
        reason = None
        events = stream(
            self.loaded.model,
            job.prompt,
            job.config,
            method=self.method,
            tokenizer=tok,
            reference=job.reference,
            prefix=self.prefix,
            workspaces=self.workspaces,
        )
        try:
            for event in events:
                if job.cancel.is_set():
                    return
                tokens.extend(event.tokens)
                stats = event.stats
                piece = cutter.piece(tokens, event.finished)
                if piece:
                    job.post(("delta", piece, _progress(stats)))
                if event.finished:
                    reason = event.stop_reason
                    break
        finally:
            events.close()
        if job.cancel.is_set():
            return
        finish = "length" if reason == "max_new_tokens" else "stop"
        usage = self.usage(job, tokens, stats)
        job.post(("done", finish, usage))
        if self.log is not None:
            self.log(timing_line(usage))

    def usage(self, job: Job, tokens: list[int], stats: Any) -> dict[str, Any]:
        accepted, rejected = prediction_counts(job.reference, tokens)
        return {
            "prompt_tokens": len(job.prompt),
            "completion_tokens": len(tokens),
            "total_tokens": len(job.prompt) + len(tokens),
            # prompt positions whose prefill the previous request's prefix cache covered
            "prompt_tokens_details": {"cached_tokens": stats.cached_tokens},
            "completion_tokens_details": {
                "accepted_prediction_tokens": accepted,
                "rejected_prediction_tokens": rejected,
            },
            "adapld": {
                **_progress(stats),
                "drafted_tokens": stats.drafted_tokens,
                "prefill_s": round(stats.prefill_s, 4),
                "decode_s": round(stats.decode_s, 4),
            },
        }


def timing_line(usage: dict[str, Any]) -> str:
    """One line on where an answer's time went (as llama-server logs its timings)."""
    a = usage["adapld"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    return (
        f"adapld serve: prompt {usage['prompt_tokens']} tokens ({cached} cached) in "
        f"{a['prefill_s']:.2f} s; answer {usage['completion_tokens']} tokens in "
        f"{a['decode_s']:.2f} s, {a['passes']} passes, {a['mean_accepted']:.1f} tokens a pass"
    )


def _progress(stats: Any) -> dict[str, Any]:
    """adapld's running counters for a streamed chunk."""
    return {
        "method": stats.method,
        "tokens": stats.new_tokens,
        "passes": stats.forward_passes,
        "accepted_draft_tokens": stats.accepted_draft_tokens,
        "mean_accepted": round(stats.mean_accepted, 3),
    }
