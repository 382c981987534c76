"""A repair by parts: after the tests failed a result, only some of its definitions asked for
again (the plan of :func:`~adapld_cli.edit.plan.plan_repair`) and spliced into it.

Contract: :func:`repaired` is :func:`~adapld_cli.edit.parts.generate`'s answer to a prepared
edit whose plan has a ``base`` (the rejected result). Each definition of the plan is asked for
on its own (:func:`repair_part_request`): the first attempt's whole-file conversation (its
cache rows reused) with the tests' output and the request for that definition alone, the
answer opened with the definition's first line up to its name, stopped at the fence or the
next definition at the margin, the rejected definition as the drafts' reference. The
answer's first definition (:func:`first_definition`), re-indented, replaces the rejected
one; an answer that is no definition keeps it. Every other byte is the rejected result's.
The result is a :class:`~adapld_cli.edit.request.Generation` of the whole file, judged like
any other (docs/design.md, "Repair by parts").
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import replace

from adapld_cli.edit.errors import InputError
from adapld_cli.edit.plan import Part
from adapld_cli.edit.prompt import extract_file, repair_part_conversation
from adapld_cli.edit.request import Backend, Generation, PreparedEdit, fit
from adapld_cli.edit.splice import indent_of, reindent, spliced_answer
from adapld_cli.edit.syntax import parse
from adapld_cli.engine.types import Stats, StepEvent

# where a definition asked for on its own ends: the next one at the left margin, or the fence
# (with the fence, four stop strings: the most an OpenAI-compatible server takes; anything
# else after the definition is generated, then cut by first_definition)
UNIT_STOPS = ("\ndef ", "\nclass ", "\n@")
HEADER_RE = re.compile(r"^(?:async\s+)?def\s+\w+|^class\s+\w+", re.MULTILINE)


def repaired(
    backend: Backend, prepared: PreparedEdit, on_event: Callable[[StepEvent], None] | None = None
) -> Generation:
    """A repair plan's answer (module contract): each definition asked for again and spliced
    into the rejected result."""
    from adapld_cli.edit.repair import combined_stats

    plan = prepared.plan
    assert plan is not None and plan.base is not None
    lines = plan.base.splitlines(keepends=True)
    stats = None
    tokens: list[int] = []
    done: dict[Part, str] = {}
    for part in plan.parts:
        request, header = repair_part_request(backend, prepared, part)
        answer = backend.generate(request, on_event)
        stats = answer.stats if stats is None else combined_stats(stats, answer.stats)
        tokens += answer.tokens
        body, _ = extract_file(header + answer.text, request.prompt.fence, trailing_newline=True)
        code = first_definition(body, prepared.lang)
        if code is not None:
            done[part] = reindent(code, indent_of(lines[part.start - 1 : part.end]))
    text = spliced_answer(lines, done, prepared.prompt.fence)
    return Generation(
        text, stats or Stats(method=backend.options.method), "stop_string", tokens, plan
    )


def repair_part_request(
    backend: Backend, prepared: PreparedEdit, part: Part
) -> tuple[PreparedEdit, str]:
    """The prompt asking again for one definition of a repair plan, and the header its
    answer opens with: the first attempt's conversation (its cache rows reused) with the
    tests' output and the request for the definition alone, stopped at the next definition
    at the margin. Raises ``InputError`` when it cannot fit."""
    plan, base = prepared.plan, prepared.first
    assert plan is not None and plan.base is not None and base is not None
    lines = plan.base.splitlines(keepends=True)
    code = textwrap.dedent("".join(lines[part.start - 1 : part.end]))
    m = HEADER_RE.search(code)
    header = code[: m.end()] if m else ""
    conv = repair_part_conversation(base, code, plan.feedback or "", part.name, header)
    fitted = fit(backend, prepared.source, prepared.instruction, prepared.lang, conv)
    if isinstance(fitted, str):
        raise InputError(fitted)
    config = replace(fitted.config, stop_strings=fitted.config.stop_strings + UNIT_STOPS)
    return replace(fitted, config=config, plan=None), header


def first_definition(code: str, lang: str | None) -> str | None:
    """The text of ``code``'s first statement when it is a definition that parses (with its
    decorators); ``None`` otherwise."""
    tree = parse(code, lang)
    if tree is None or not tree.root_node.named_children:
        return None
    node = tree.root_node.named_children[0]
    if node.type not in DEFINITION_NODES or node.has_error:
        return None
    return code.encode("utf-8")[: node.end_byte].decode("utf-8") + "\n"


DEFINITION_NODES = ("function_definition", "class_definition", "decorated_definition")
