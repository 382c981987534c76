"""Generation on this machine: one loaded model, prompts fitted to its context, the engine's
stream of steps.

Contract: :class:`LocalModel` loads nothing itself. It gets a loaded model (anything with
``.model`` and ``.tokenizer``, normally :class:`adapld_cli.model.LoadedModel`), says what
fitting a prompt into it needs (:attr:`~LocalModel.context`, read by
:func:`adapld_cli.edit.request.prepare`) and drives :func:`adapld_cli.engine.stream`
(:meth:`~LocalModel.generate`), handing every :class:`StepEvent` to an optional callback
(the live panel). It judges nothing and writes nothing: it returns a
:class:`~adapld_cli.edit.request.Generation`. ``KeyboardInterrupt`` propagates; the engine's
generator is closed on the way out. :class:`RemoteModel <adapld_cli.edit.remote.RemoteModel>`
has the same interface over a server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from adapld_cli.edit.errors import InputError
from adapld_cli.edit.prompt import PromptTemplate, load_template
from adapld_cli.edit.request import EditOptions, Generation, ModelContext, PreparedEdit
from adapld_cli.engine.methods import METHODS
from adapld_cli.engine.types import Stats, StepEvent

_STOP_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "</s>")


class LocalModel:
    """Generates edits with one loaded model. Reuse it across files and attempts: the model
    loads once, later prompts reuse the prefill chunks they share with the one before (bit
    for bit a fresh prefill), and static passes their workspace."""

    def __init__(
        self,
        loaded: Any,
        options: EditOptions | None = None,
        template: PromptTemplate | str | None = None,
    ) -> None:
        self.loaded = loaded
        self.options = options or EditOptions()
        if self.options.method not in METHODS:
            raise InputError(
                f"unknown method {self.options.method!r} (one of {', '.join(METHODS)})"
            )
        self.template = load_template(template)
        self.tokenizer = loaded.tokenizer
        self.method = self.options.method
        # what fitting a prompt into this model needs (adapld_cli.edit.request.fit)
        self.context = ModelContext(loaded.tokenizer, context_limit(loaded), stop_token_ids(loaded))
        # made on the first generation, kept for the next ones (files, attempts): the engine's
        # PrefixCache and Workspaces (static-pass caches; on a GPU, captured graphs)
        self.prefix: Any = None
        self.workspaces: Any = None

    def describe(self, prepared: PreparedEdit) -> str:
        """One line on the prompt and budget (verbose output)."""
        return (
            f"{prepared.source.name}: {len(prepared.prompt.ids)} prompt tokens, "
            f"{prepared.source_tokens} file tokens, budget "
            f"{prepared.config.max_new_tokens}, context {prepared.context_limit}"
        )

    def generate(
        self, prepared: PreparedEdit, on_event: Callable[[StepEvent], None] | None = None
    ) -> Generation:
        """Run the engine on the prepared prompt until it stops."""
        from adapld_cli.engine import PrefixCache, Workspaces, stream

        tokens: list[int] = []
        stats = Stats(method=self.options.method)
        stop_reason: str | None = None
        if self.prefix is None:
            self.prefix, self.workspaces = PrefixCache(), Workspaces()
        events = stream(
            self.loaded.model,
            prepared.prompt.ids,
            prepared.config,
            method=self.options.method,
            tokenizer=self.tokenizer,
            settings=self.options.settings,
            reference=self.reference_ids(prepared),
            prefix=self.prefix,
            workspaces=self.workspaces,
        )
        try:
            for event in events:
                tokens.extend(event.tokens)
                stats = event.stats
                if on_event is not None:
                    on_event(event)
                if event.finished:
                    stop_reason = event.stop_reason
                    break
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()
        return self.generation(tokens, stats, stop_reason)

    def reference_ids(self, prepared: PreparedEdit) -> list[int]:
        """The tokens of the text the drafts copy from besides the prompt (a repair's
        rejected answer; none for a first attempt)."""
        conv = prepared.conversation
        if conv is None or not conv.reference:
            return []
        return list(self.tokenizer(conv.reference, add_special_tokens=False)["input_ids"])

    def generation(self, tokens: list[int], stats: Stats, stop_reason: str | None) -> Generation:
        """Generated tokens as a :class:`Generation` (their text decoded)."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return Generation(text=text, stats=stats, stop_reason=stop_reason, tokens=tokens)


def context_limit(loaded: Any) -> int | None:
    """Longest sequence the model takes: ``max_position_embeddings`` and the tokenizer's
    ``model_max_length`` (when it is a real limit, not transformers' huge sentinel)."""
    limits = []
    config = getattr(loaded.model, "config", None)
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            limits.append(value)
            break
    tok_max = getattr(loaded.tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < 10_000_000:
        limits.append(tok_max)
    return min(limits) if limits else None


def stop_token_ids(loaded: Any) -> tuple[int, ...]:
    """End-of-turn ids: the tokenizer's eos, the model's generation config eos ids, and the
    usual chat end markers present in the vocabulary."""
    tok = loaded.tokenizer
    ids: set[int] = set()
    if getattr(tok, "eos_token_id", None) is not None:
        ids.add(int(tok.eos_token_id))
    gen = getattr(loaded.model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, (list, tuple)):
        ids.update(int(i) for i in eos)
    unk = getattr(tok, "unk_token_id", None)
    for text in _STOP_TOKENS:
        try:
            tid = tok.convert_tokens_to_ids(text)
        except (KeyError, ValueError, TypeError):
            continue
        if isinstance(tid, int) and tid >= 0 and tid != unk:
            ids.add(tid)
    return tuple(sorted(ids))
