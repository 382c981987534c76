"""What one edit asks of a model: the options, the prompt fitted into the context, the answer.

Contract:
- :class:`EditOptions` are the generation options of a run; ``force`` is the run's one
  ``--force`` (the judge keeps what a check refused, the write-back writes read-only files).
- :func:`check_instruction` is the one definition of a usable instruction (the CLI calls it
  while parsing, :func:`prepare` for library callers).
- :func:`prepare` renders the template's conversation for a file and fits it into the
  backend's context (:func:`fit`; :func:`refit` for a repair's conversation): a
  :class:`PreparedEdit` ready to generate, or :class:`~adapld_cli.edit.errors.TooLongError`
  (an ``InputError``, exit 2) when the prompt plus the file's length cannot fit.
- :class:`Generation` is what a backend (local model or server) returns for a prepared edit:
  the answer's text after the opened fence, before any check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from adapld_cli.edit.errors import InputError, TooLongError
from adapld_cli.edit.files.source import SourceFile
from adapld_cli.edit.prompt import (
    Conversation,
    Prompt,
    PromptTemplate,
    conversation,
    conversation_prompt,
)
from adapld_cli.edit.syntax import language_for
from adapld_cli.engine.types import GenerationConfig, Stats

OUTPUT_SLACK = 16  # tokens beyond the file's own length that the model needs (fence, eos)
DEFAULT_ATTEMPTS = 2
EMPTY_INSTRUCTION = "empty instruction: say what to change with -i TEXT"


@dataclass(frozen=True)
class EditOptions:
    """How to generate and judge. ``max_new_tokens=None`` picks a budget from the file's
    length (twice its tokens + 256, capped by the context left after the prompt)."""

    method: str = "adapld"
    max_new_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    force: bool = False  # keep what a check refused; write read-only files
    settings: Any = None  # AdaPLDSettings for method "adapld"; None = engine defaults
    attempts: int = DEFAULT_ATTEMPTS  # generations per file: the first + repairs
    parts: bool = True  # a big file's first attempt rewrites only what it touches (edit.parts)


@dataclass
class PreparedEdit:
    """A prompt ready to generate, with the budget that passed the context check."""

    source: SourceFile
    instruction: str
    lang: str | None
    prompt: Prompt
    config: GenerationConfig
    source_tokens: int
    context_limit: int | None
    conversation: Conversation | None = None  # the messages the prompt renders
    base: Conversation | None = None  # a repair's first-attempt conversation (else None)
    plan: Any = None  # edit.parts.Plan: rewrite these parts only (None: the whole file)

    @property
    def first(self) -> Conversation | None:
        """The first attempt's conversation (repairs are built from it)."""
        return self.base or self.conversation


@dataclass
class Generation:
    """A backend's answer to a :class:`PreparedEdit`: the text after the opened fence, its
    tokens where the model ran here, the statistics and why generation stopped."""

    text: str
    stats: Stats
    stop_reason: str | None
    tokens: list[int] = field(default_factory=list)
    plan: Any = None  # the edit.parts.Plan the answer was spliced by (None: whole file)


@dataclass(frozen=True)
class ModelContext:
    """What fitting a prompt needs of a model that runs here. A server has none: it checks its
    own context, and the prompt is its to render."""

    tokenizer: Any
    limit: int | None  # longest sequence the model takes (None: no known limit)
    stop_ids: tuple[int, ...]


class Backend(Protocol):
    """What preparing an edit needs of the model that will generate it
    (:class:`~adapld_cli.edit.local.LocalModel`, :class:`~adapld_cli.edit.remote.RemoteModel`)."""

    options: EditOptions
    template: PromptTemplate

    @property
    def context(self) -> ModelContext | None: ...


def check_instruction(instruction: str) -> str:
    """``instruction`` stripped; :class:`InputError` when nothing is left."""
    if not instruction or not instruction.strip():
        raise InputError(EMPTY_INSTRUCTION)
    return instruction.strip()


def prepare(
    backend: Backend, source: SourceFile, instruction: str, lang: str | None = None
) -> PreparedEdit:
    """The first attempt's prompt for ``source``: the instruction checked, the language
    (``lang``, else from the file's name), the template's conversation fitted into the
    backend's context; :class:`InputError` when it cannot fit."""
    check_instruction(instruction)
    lang = lang if lang is not None else language_for(source.name)
    conv = conversation(
        backend.template, code=source.text, instruction=instruction, filename=source.name,
        lang=lang,
    )  # fmt: skip
    prepared = fit(backend, source, instruction, lang, conv)
    if isinstance(prepared, str):
        raise TooLongError(prepared)
    return prepared


def refit(backend: Backend, prepared: PreparedEdit, conv: Conversation) -> PreparedEdit | None:
    """``prepared`` with another conversation (a repair's), or ``None`` when it does not fit."""
    retry = fit(backend, prepared.source, prepared.instruction, prepared.lang, conv)
    return None if isinstance(retry, str) else retry


def fit(
    backend: Backend, source: SourceFile, instruction: str, lang: str | None, conv: Conversation
) -> PreparedEdit | str:
    """Tokenize ``conv`` and size the budget; the reason (a string) when it cannot fit.
    For a server (no :class:`ModelContext`) the budget is ``--max-new-tokens`` or the
    server's own, and the server renders the conversation."""
    options, context = backend.options, backend.context
    if context is None:
        return _for_server(source, instruction, lang, conv, options)
    prompt = conversation_prompt(conv, context.tokenizer)
    n_src = len(context.tokenizer(source.text, add_special_tokens=False)["input_ids"])
    needed = n_src + OUTPUT_SLACK
    budget = options.max_new_tokens
    if budget is None:
        budget = 2 * n_src + 256
    limit = context.limit
    if limit is not None:
        room = limit - len(prompt.ids)
        if room < needed:
            return (
                f"{source.name}: too long for the model's context ({len(prompt.ids)} prompt "
                f"tokens + ~{needed} output tokens > {limit})"
            )
        budget = min(budget, room)
    config = GenerationConfig(
        max_new_tokens=max(1, budget),
        stop_token_ids=context.stop_ids,
        stop_strings=_stops(conv, prompt),
        stop_block=conv.fence if conv.explain else "",
        temperature=options.temperature,
        top_p=options.top_p,
        seed=options.seed,
    )
    return PreparedEdit(
        source=source,
        instruction=instruction,
        lang=lang,
        prompt=prompt,
        config=config,
        source_tokens=n_src,
        context_limit=limit,
        conversation=conv,
    )


def _for_server(
    source: SourceFile,
    instruction: str,
    lang: str | None,
    conv: Conversation,
    options: EditOptions,
) -> PreparedEdit:
    prompt = Prompt(text="", ids=[], fence=conv.fence, stop_string="\n" + conv.fence)
    config = GenerationConfig(
        max_new_tokens=options.max_new_tokens or 0,
        stop_strings=_stops(conv, prompt),
        temperature=options.temperature,
        top_p=options.top_p,
        seed=options.seed,
    )
    return PreparedEdit(
        source=source, instruction=instruction, lang=lang, prompt=prompt, config=config,
        source_tokens=0, context_limit=None, conversation=conv,
    )  # fmt: skip


def _stops(conv: Conversation, prompt: Prompt) -> tuple[str, ...]:
    """Where an answer ends: the closing fence, or, for an answer that explains first (its
    first fence opens the file), the end of the turn or the fence that closes the file's
    block (``GenerationConfig.stop_block``, set for a local model: a server is sent only
    stop strings, and the words after the file are dropped when the answer is read)."""
    return () if conv.explain else (prompt.stop_string,)
