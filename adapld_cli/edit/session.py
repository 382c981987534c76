"""One edit of one file: prompt, generation through the engine, safety checks, result.

Contract: :class:`EditSession` loads nothing itself. It gets a loaded model (anything with
``.model`` and ``.tokenizer``, normally :class:`adapld_cli.model.LoadedModel`), builds the
prompt, drives :func:`adapld_cli.engine.stream` and hands every :class:`StepEvent` to an
optional callback (the live panel). It never writes files: :meth:`EditSession.edit` returns an
:class:`EditResult` saying whether the output may be written (``status``) and why not.

- Input problems found before generation (empty instruction, prompt + expected output over
  the model's context) raise :class:`~adapld_cli.edit.errors.InputError` (exit 2).
- After generation, ``status`` is ``"changed"``, ``"unchanged"`` or ``"refused"`` (exit 1),
  checked in this order: the token limit was hit before the closing fence; the input parsed
  (tree-sitter, or JSON/TOML/YAML by file name) and the output does not; the output loses
  definitions, statements or most lines that the instruction does not ask to lose
  (:func:`adapld_cli.edit.guard.check_scope`). With ``force`` the last two are kept and noted
  (``syntax_error``, ``lost``) instead of refused.
- ``KeyboardInterrupt`` propagates (the caller writes nothing and exits 130); the engine's
  generator is closed on the way out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from adapld_cli.edit.errors import EXIT_OK, EXIT_REFUSED, InputError
from adapld_cli.edit.formats import check_format, format_for
from adapld_cli.edit.guard import check_scope
from adapld_cli.edit.prompt import (
    Conversation,
    Prompt,
    PromptTemplate,
    conversation,
    conversation_prompt,
    extract_file,
    load_template,
    repair_conversation,
)
from adapld_cli.edit.source import SourceFile, encode_like
from adapld_cli.edit.syntax import (
    DefinitionChanges,
    SyntaxIssue,
    changed_definitions,
    first_syntax_error,
    language_for,
)
from adapld_cli.engine.methods import METHODS
from adapld_cli.engine.types import GenerationConfig, Stats, StepEvent

_STOP_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "</s>")
_OUTPUT_SLACK = 16  # tokens beyond the file's own length that the model needs (fence, eos)
DEFAULT_ATTEMPTS = 2
UNCHANGED_FEEDBACK = (
    "You returned the file unchanged. If the instruction asks for a change to this file, make "
    "it now; if the file already does what it asks, return it unchanged again."
)


@dataclass(frozen=True)
class EditOptions:
    """How to generate. ``max_new_tokens=None`` picks a budget from the file's length
    (twice its tokens + 256, capped by the context left after the prompt)."""

    method: str = "adapld"
    max_new_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    force: bool = False
    settings: Any = None  # AdaPLDSettings for method "adapld"; None = engine defaults
    attempts: int = DEFAULT_ATTEMPTS  # generations per file: the first + repairs on refusal


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

    @property
    def first(self) -> Conversation | None:
        """The first attempt's conversation (repairs are built from it)."""
        return self.base or self.conversation


@dataclass
class EditResult:
    """The outcome of one edit. ``new_text`` is the extracted file (``\\n`` line endings), also
    when refused (for inspection); write :attr:`new_bytes` only when ``status == "changed"``."""

    source: SourceFile
    lang: str | None
    status: str  # "changed" | "unchanged" | "refused"
    new_text: str
    stats: Stats
    stop_reason: str | None
    message: str | None = None  # why it was refused
    syntax_error: SyntaxIssue | None = None  # kept despite it (force)
    lost: str | None = None  # what the result loses, kept despite it (force)
    changes: DefinitionChanges | None = None
    tokens: list[int] = field(default_factory=list)
    feedback: str | None = None  # what to tell the model when asking again (None: do not)
    attempts: int = 1  # generations this result took (the first + repairs)
    undefined: str | None = None  # names it uses and never defines (edit.lint), if any

    @property
    def exit_code(self) -> int:
        return EXIT_REFUSED if self.status == "refused" else EXIT_OK

    @property
    def new_bytes(self) -> bytes:
        """The edited file encoded like the original (encoding, BOM, line endings)."""
        return encode_like(self.new_text, self.source)


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


class EditSession:
    """Edits files with one loaded model. Reuse it across files (the model loads once)."""

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
        self._limit = context_limit(loaded)
        self._stop_ids = stop_token_ids(loaded)
        self._prefix: Any = None  # engine.PrefixCache: later prompts (files, attempts) reuse
        # the prefill chunks they share with the one before (bit for bit a fresh prefill)

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    @property
    def method(self) -> str:
        return self.options.method

    def describe(self, prepared: PreparedEdit) -> str:
        """One line on the prompt and budget (verbose output)."""
        return (
            f"{prepared.source.name}: {len(prepared.prompt.ids)} prompt tokens, "
            f"{prepared.source_tokens} file tokens, budget "
            f"{prepared.config.max_new_tokens}, context {prepared.context_limit}"
        )

    # -- before generation -------------------------------------------------------------
    def prepare(
        self, source: SourceFile, instruction: str, lang: str | None = None
    ) -> PreparedEdit:
        """Build the prompt and check it fits; raises :class:`InputError`."""
        lang = checked_language(source, instruction, lang)
        conv = conversation(
            self.template, code=source.text, instruction=instruction, filename=source.name,
            lang=lang,
        )  # fmt: skip
        prepared = self._fit(source, instruction, lang, conv)
        if isinstance(prepared, str):
            raise InputError(prepared)
        return prepared

    def repair(self, prepared: PreparedEdit, result: EditResult) -> PreparedEdit | None:
        """The next attempt after ``result`` (see :func:`repair_conversation`), or None when
        the result asks for none (no :attr:`EditResult.feedback`) or the longer prompt does
        not fit the context."""
        conv = retry_conversation(prepared, result)
        if conv is None:
            return None
        retry = self._fit(prepared.source, prepared.instruction, prepared.lang, conv)
        if isinstance(retry, str):
            return None
        retry.base = prepared.first
        return retry

    def _fit(
        self, source: SourceFile, instruction: str, lang: str | None, conv: Conversation
    ) -> PreparedEdit | str:
        """Tokenize ``conv`` and size the budget; the reason (a string) when it cannot fit."""
        tok = self.loaded.tokenizer
        prompt = conversation_prompt(conv, tok)
        n_src = len(tok(source.text, add_special_tokens=False)["input_ids"])
        needed = n_src + _OUTPUT_SLACK
        budget = self.options.max_new_tokens
        if budget is None:
            budget = 2 * n_src + 256
        if self._limit is not None:
            room = self._limit - len(prompt.ids)
            if room < needed:
                return (
                    f"{source.name}: too long for the model's context ({len(prompt.ids)} prompt "
                    f"tokens + ~{needed} output tokens > {self._limit})"
                )
            budget = min(budget, room)
        config = GenerationConfig(
            max_new_tokens=max(1, budget),
            stop_token_ids=self._stop_ids,
            stop_strings=(prompt.stop_string,),
            temperature=self.options.temperature,
            top_p=self.options.top_p,
            seed=self.options.seed,
        )
        return PreparedEdit(
            source=source,
            instruction=instruction,
            lang=lang,
            prompt=prompt,
            config=config,
            source_tokens=n_src,
            context_limit=self._limit,
            conversation=conv,
        )

    # -- generation --------------------------------------------------------------------
    def run(
        self, prepared: PreparedEdit, on_event: Callable[[StepEvent], None] | None = None
    ) -> EditResult:
        """Generate and judge the output (see the module contract)."""
        from adapld_cli.engine import PrefixCache, stream

        tokens: list[int] = []
        stats = Stats(method=self.options.method)
        stop_reason: str | None = None
        if self._prefix is None:
            self._prefix = PrefixCache()
        events = stream(
            self.loaded.model,
            prepared.prompt.ids,
            prepared.config,
            method=self.options.method,
            tokenizer=self.loaded.tokenizer,
            settings=self.options.settings,
            prefix=self._prefix,
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
        return self.judge(prepared, tokens, stats, stop_reason)

    def judge(
        self, prepared: PreparedEdit, tokens: list[int], stats: Stats, stop_reason: str | None
    ) -> EditResult:
        """Turn generated tokens into a result: extract the file and apply the checks."""
        text = self.loaded.tokenizer.decode(tokens, skip_special_tokens=True)
        return judge_text(
            prepared, text, stats, stop_reason, force=self.options.force, tokens=tokens
        )

    def edit(
        self,
        source: SourceFile,
        instruction: str,
        lang: str | None = None,
        on_event: Callable[[StepEvent], None] | None = None,
    ) -> EditResult:
        """:meth:`prepare`, then :meth:`run` with repairs (:func:`with_repairs`)."""
        prepared = self.prepare(source, instruction, lang)
        return with_repairs(self, prepared, lambda p, _n: self.run(p, on_event))


def checked_language(source: SourceFile, instruction: str, lang: str | None) -> str | None:
    """The file's language (``lang``, else from its name); :class:`InputError` for an empty
    instruction. The first step of every ``prepare``."""
    if not instruction or not instruction.strip():
        raise InputError("empty instruction: say what to change with -i TEXT")
    return lang if lang is not None else language_for(source.name)


def judge_text(
    prepared: PreparedEdit,
    text: str,
    stats: Stats,
    stop_reason: str | None,
    *,
    force: bool = False,
    tokens: list[int] | None = None,
) -> EditResult:
    """Turn the generated text (the answer after the opened fence) into a result: extract
    the file and apply the checks of the module contract. Shared by local generation and
    generation by a server (:mod:`adapld_cli.edit.remote`)."""
    source = prepared.source
    new_text, closed = extract_file(
        text, prepared.prompt.fence, trailing_newline=source.trailing_newline
    )
    result = EditResult(
        source=source,
        lang=prepared.lang,
        status="changed",
        new_text=new_text,
        stats=stats,
        stop_reason=stop_reason,
        tokens=tokens or [],
    )
    if not closed and stop_reason not in ("eos", "stop_string"):
        limit = prepared.config.max_new_tokens
        return _refuse(
            result,
            f"generation hit the token limit ({limit}) before the end of the file; nothing "
            "written (raise --max-new-tokens)",
        )
    if new_text == source.text:
        result.status = "unchanged"
        result.feedback = UNCHANGED_FEEDBACK
        return result
    result.changes = changed_definitions(source.text, new_text, prepared.lang)
    _check_parse(result, force)
    if result.status != "refused":
        _check_scope(result, prepared.instruction, force)
    if result.status == "changed":
        _check_names(result)
    return result


def _check_names(result: EditResult) -> None:
    """Note (never refuse) a result that uses names it never defines or imports: the
    feedback for another attempt, a warning if it is the one written (:mod:`.lint`)."""
    from adapld_cli.edit.lint import describe, new_undefined_names

    names = new_undefined_names(result.source.text, result.new_text, result.lang)
    if names:
        result.undefined = describe(names)
        result.feedback = (
            f"The file you returned uses names it never defines or imports: {result.undefined}. "
            "Define or import each one, or use the names the file already has."
        )


def _check_parse(result: EditResult, force: bool) -> None:
    """Refuse (or note, with ``force``) a result that broke a file that parsed."""
    issue = parse_issue(result.source.text, result.new_text, result.lang, result.source.name)
    if issue is None:
        return
    result.syntax_error = issue
    if not force:
        _refuse(
            result,
            f"the edited file does not parse ({issue}); nothing written (--force writes it anyway)",
        )
        result.feedback = f"The file you returned does not parse ({issue})."


def _check_scope(result: EditResult, instruction: str, force: bool) -> None:
    """Refuse (or note, with ``force``) a result that loses what was not asked."""
    verdict = check_scope(
        result.source.text,
        result.new_text,
        language=result.lang or format_for(result.source.name),
        instruction=instruction,
    )
    if not verdict.lost:
        return
    result.lost = verdict.message
    if not force:
        _refuse(result, verdict.refusal or "")
        result.feedback = f"The file you returned {verdict.message}."


def parse_issue(before: str, after: str, lang: str | None, name: str) -> SyntaxIssue | None:
    """How ``after`` fails to parse when ``before`` parsed: tree-sitter for ``lang``, then the
    data format of ``name`` (JSON, TOML, YAML); ``None`` when nothing broke."""
    if first_syntax_error(before, lang) is None:
        issue = first_syntax_error(after, lang)
        if issue is not None:
            return issue
    return check_format(before, after, name)


def retry_conversation(prepared: PreparedEdit, result: EditResult) -> Conversation | None:
    """The conversation of the attempt after ``result``: the first attempt's, the rejected
    file and the feedback; None when the result asks for no other attempt. Shared by local
    and server sessions."""
    base = prepared.first
    if result.feedback is None or base is None:
        return None
    return repair_conversation(base, result.new_text, result.feedback, prepared.instruction)


class Repairable(Protocol):
    """A session that can ask again (:class:`EditSession`, the server session)."""

    options: EditOptions

    def repair(self, prepared: PreparedEdit, result: EditResult) -> PreparedEdit | None: ...


def with_repairs(
    session: Repairable,
    prepared: PreparedEdit,
    generate: Callable[[PreparedEdit, int], EditResult],
    on_retry: Callable[[EditResult], None] | None = None,
) -> EditResult:
    """Generate (``generate(prepared, attempt_number)``) and judge; while the result has
    feedback for the model (refused by a check, unchanged, or changed but using undefined
    names) and fewer than ``session.options.attempts`` generations ran, ask again with
    :meth:`Repairable.repair` (``on_retry`` sees each result asked again first). Returns the
    last result, counting every attempt (:func:`after_attempts`); only it may be written. A
    changed result is never traded for a retry that is refused or unchanged: then the changed
    one is returned (with every attempt counted)."""
    result = generate(prepared, 1)
    while result.attempts < session.options.attempts:
        retry = session.repair(prepared, result)
        if retry is None:
            break
        if on_retry is not None:
            on_retry(result)
        prepared = retry
        latest = after_attempts(result, generate(prepared, result.attempts + 1))
        if result.status == "changed" and latest.status != "changed":
            result.attempts, result.stats = latest.attempts, latest.stats
            break
        result = latest
    return result


def after_attempts(earlier: EditResult, latest: EditResult) -> EditResult:
    """``latest``, counting ``earlier``'s attempts and generation work in its own."""
    latest.attempts = earlier.attempts + 1
    latest.stats = combined_stats(earlier.stats, latest.stats)
    return latest


def combined_stats(a: Stats, b: Stats) -> Stats:
    """Two generations' statistics as one: counts and times added, the latest step cost."""
    from dataclasses import fields

    out = Stats(method=b.method)
    for f in fields(Stats):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "accept_hist":
            merged = dict(x)
            for k, v in y.items():
                merged[k] = merged.get(k, 0) + v
            out.accept_hist = merged
        elif f.name in ("ar_step_s", "graph_fallback"):
            setattr(out, f.name, y or x)
        elif isinstance(x, (int, float)) and not isinstance(x, bool):
            setattr(out, f.name, x + y)
    return out


def _refuse(result: EditResult, message: str) -> EditResult:
    result.status = "refused"
    result.message = message
    return result
