"""Big files, part by part: execute a :class:`~adapld_cli.edit.plan.Plan`, rewriting only the
parts it names and splicing them back so that every other byte is the original's.

Contract:
- :func:`prepare_edit` is the first attempt's preparation: the whole-file prompt
  (:func:`~adapld_cli.edit.request.prepare`) with its plan (:func:`planned`; none with
  ``--whole-file``). A file too long for the model's context is still edited when a plan
  covers the edit: it gets no whole-file prompt, and so no repair attempt.
- :func:`generate` is what the edit loop calls for every attempt: a prepared edit without a
  plan goes to the backend as it is; a mechanical rename is made whole-word in the parts
  with no token generated; otherwise each part is asked for on its own (the instruction,
  where the part sits, the file's outline, the part's code dedented: the part is the draft
  source) and the answers are re-indented and spliced into the original; an import block's
  answer that adds anything but imports is dropped (:func:`imports_only`). The result is a
  :class:`~adapld_cli.edit.request.Generation` of the whole file, judged like any other.
  A part that hits its token limit ends the attempt there (judged as truncated).
- A repair attempt rewrites the whole file (its prompt is built without a plan), except
  after the tests failed a result: then its plan (:func:`~adapld_cli.edit.plan.plan_repair`)
  names definitions of that result (the plan's ``base``) to ask for again, one by one, each
  with the first attempt's whole-file prompt, the tests' output and the definition's first
  line as the answer's opening; each answer's first definition replaces the rejected one
  (:mod:`adapld_cli.edit.repair_parts`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import replace

from adapld_cli.edit.errors import TooLongError
from adapld_cli.edit.files.source import SourceFile, decode_source
from adapld_cli.edit.plan import Part, Plan, plan_parts, word
from adapld_cli.edit.prompt import Prompt, after_explanation, conversation, extract_file
from adapld_cli.edit.request import Backend, Generation, PreparedEdit, fit, prepare
from adapld_cli.edit.splice import indent_of, reindent, spliced_answer
from adapld_cli.edit.syntax import language_for, outline
from adapld_cli.engine.types import GenerationConfig, Stats, StepEvent

OUTLINE_ENTRIES = 80  # definitions listed in a part's prompt at most
APPEND_NOTE = (
    " The new code goes right after this {kind}: return this code unchanged, followed by the "
    "new code, indented as this code is."
)
PART_NOTE = (
    "{instruction}\n\n"
    "The code above is only `{name}` (lines {start}-{end} of `{filename}`, shown dedented); "
    "the rest of the file is not shown and stays as it is. Return this code with the change "
    "the instruction asks for in it, keeping everything else as it is; return it unchanged if "
    "the instruction asks for nothing here.\n\n"
    "The definitions of `{filename}`:\n{outline}"
)


def planned(backend: Backend, prepared: PreparedEdit) -> PreparedEdit:
    """``prepared`` with its :class:`Plan` when the backend's options allow parts (a
    first attempt; ``--whole-file`` turns them off)."""
    if backend.options.parts:
        prepared.plan = plan_parts(prepared.source.text, prepared.lang, prepared.instruction)
    return prepared


def prepare_edit(
    backend: Backend, source: SourceFile, instruction: str, lang: str | None = None
) -> PreparedEdit:
    """The first attempt: :func:`~adapld_cli.edit.request.prepare` with its plan
    (:func:`planned`). A file too long for the context is still edited when a plan covers
    the edit: its prepared edit has no whole-file prompt (and so no repair attempt)."""
    try:
        return planned(backend, prepare(backend, source, instruction, lang))
    except TooLongError:
        lang = lang if lang is not None else language_for(source.name)
        plan = plan_parts(source.text, lang, instruction) if backend.options.parts else None
        if plan is None:
            raise
    conv = conversation(
        backend.template, code=source.text, instruction=instruction, filename=source.name,
        lang=lang,
    )  # fmt: skip
    fence = conv.fence
    return PreparedEdit(
        source=source,
        instruction=instruction,
        lang=lang,
        prompt=Prompt(text="", ids=[], fence=fence, stop_string="\n" + fence),
        config=GenerationConfig(max_new_tokens=0),
        source_tokens=0,
        context_limit=backend.context.limit if backend.context else None,
        conversation=None,  # no whole-file prompt: nothing to repair from
        plan=plan,
    )


def generate(
    backend: Backend, prepared: PreparedEdit, on_event: Callable[[StepEvent], None] | None = None
) -> Generation:
    """The answer to one attempt: the backend's for a whole-file prompt, the spliced parts'
    for a planned one (module contract)."""
    plan = prepared.plan
    if plan is None:
        answer = backend.generate(prepared, on_event)
        conv = prepared.conversation
        if conv is not None and conv.explain:  # the words before the file are not the file
            return replace(answer, text=after_explanation(answer.text, conv.fence))
        return answer
    if plan.mechanical:
        return _renamed(prepared, plan, backend.options.method)
    if plan.base is not None:
        from adapld_cli.edit.repair_parts import repaired

        return repaired(backend, prepared, on_event)
    from adapld_cli.edit.repair import combined_stats

    lines = prepared.source.text.splitlines(keepends=True)
    stats = None
    tokens: list[int] = []
    done: dict[Part, str] = {}
    for part in plan.parts:
        request = part_request(backend, prepared, part)
        answer = backend.generate(request, on_event)
        stats = answer.stats if stats is None else combined_stats(stats, answer.stats)
        tokens += answer.tokens
        code, closed = extract_file(answer.text, request.prompt.fence, trailing_newline=True)
        if not closed and answer.stop_reason not in ("eos", "stop_string"):
            return Generation(answer.text, stats, answer.stop_reason, tokens, plan)
        original = "".join(lines[part.start - 1 : part.end])
        if part.why == "imports" and not imports_only(original, code, prepared.lang):
            code = textwrap.dedent(original)  # the block is there for imports, nothing else
        done[part] = reindent(code, indent_of(lines[part.start - 1 : part.end]))
    text = spliced_answer(lines, done, prepared.prompt.fence)
    return Generation(text, stats, "stop_string", tokens, plan)


def _renamed(prepared: PreparedEdit, plan: Plan, method: str) -> Generation:
    """A mechanical rename plan's answer: each part with every whole-word ``old`` replaced by
    ``new``, spliced; no token generated."""
    lines = prepared.source.text.splitlines(keepends=True)
    done: dict[Part, str] = {}
    for part in plan.parts:
        code = "".join(lines[part.start - 1 : part.end])
        for old, new in plan.renames:
            code = word(old).sub(new, code)
        done[part] = code
    text = spliced_answer(lines, done, prepared.prompt.fence)
    return Generation(text, Stats(method=method), "stop_string", [], plan)


def imports_only(before: str, after: str, lang: str | None) -> bool:
    """Whether ``after`` (an import block's answer) adds nothing but imports to ``before``:
    asked for the block beside the instruction, the model also wrote the new code there (a
    second class holding the new method, a ``def Class.method``): such an answer is dropped
    and the block kept as it was."""
    from adapld_cli.edit.guard.scan import scan
    from adapld_cli.edit.syntax import first_syntax_error

    if first_syntax_error(after, lang) is not None:
        return False
    old, new = scan(textwrap.dedent(before), lang), scan(after, lang)
    if old is None or new is None:
        return False
    kept = {(i.name, i.kind) for i in old.items}
    return all(i.kind == "import" or (i.name, i.kind) in kept for i in new.items)


def part_request(backend: Backend, prepared: PreparedEdit, part: Part) -> PreparedEdit:
    """The prompt for one part: its dedented code as the file, the instruction with where the
    part sits and the file's outline. Raises ``InputError`` when even that cannot fit."""
    from adapld_cli.edit.errors import InputError

    source = prepared.source
    lines = source.text.splitlines(keepends=True)
    code = textwrap.dedent("".join(lines[part.start - 1 : part.end]))
    note = PART_NOTE.format(
        instruction=prepared.instruction.strip(),
        name=part.name,
        start=part.start,
        end=part.end,
        filename=source.name,
        outline=describe_outline(source.text, prepared.lang),
    )
    if part.why == "append":
        head, tail = note.split("\n\nThe definitions of", 1)
        note = head + APPEND_NOTE.format(kind="method") + "\n\nThe definitions of" + tail
    conv = conversation(
        backend.template, code=code, instruction=note, filename=source.name, lang=prepared.lang
    )
    piece = decode_source(code.encode("utf-8"), source.name)
    fitted = fit(backend, piece, note, prepared.lang, conv)
    if isinstance(fitted, str):
        raise InputError(fitted)
    return replace(fitted, plan=None)


def describe_outline(text: str, lang: str | None) -> str:
    """One line per definition, ``line: name``, at most :data:`OUTLINE_ENTRIES`."""
    defs = outline(text, lang)
    shown = [f"{d.start_line}: {d.name}" for d in defs[:OUTLINE_ENTRIES]]
    if len(defs) > OUTLINE_ENTRIES:
        shown.append(f"(+{len(defs) - OUTLINE_ENTRIES} more)")
    return "\n".join(shown)
