"""The attempts at one file: the first generation, then repairs while a result asks for one.

Contract: iterate over :class:`Attempts` to get each attempt's :class:`Attempt` (the prepared
edit to generate), and :meth:`Attempts.record` each judged result before asking for the next;
:attr:`Attempts.result` is the one result that may be written. Another attempt is made while
the last result carries feedback for the model (refused by a check, unchanged, or changed but
using undefined names), fewer than ``options.attempts`` generations ran, the repair prompt
(the first attempt's conversation, the rejected file and the feedback) fits the context, and
it is not the last attempt's prompt again (:func:`repeats`: greedy decoding would give the
same answer). Which repair (:func:`repairs`, the first that fits and is not a repeat): the
first request with the feedback as a note, or, after the tests failed a result, only the
parts of it that the edit changed or the failure names, when they are a small enough share
of it (:func:`repair_plan`); and after the tests failed a result, the fix request
(:func:`fix_request`: that result shown as the file, the tests' output, the cause asked for
first), first for a result that changed the file, second for one that did not. A changed
result is never traded for a later one that is refused or unchanged: the changed one stays
the result, counting every attempt's work.

The loop calls nothing back: whoever iterates generates and judges (the run with its live
panel, the benchmark with its timers, :func:`adapld_cli.edit.edit_file` with neither).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace

from adapld_cli.edit.judge import EditResult, Status
from adapld_cli.edit.prompt import Conversation, fix_conversation, repair_conversation
from adapld_cli.edit.request import Backend, PreparedEdit, refit
from adapld_cli.engine.types import Stats


@dataclass(frozen=True)
class Attempt:
    """One generation to make: its number (1 = the first), what to generate, and the result
    it repairs (``None`` for the first)."""

    number: int
    prepared: PreparedEdit
    previous: EditResult | None = None


class Attempts:
    """The attempt loop of one file (see the module contract)."""

    def __init__(self, backend: Backend, prepared: PreparedEdit) -> None:
        self.backend = backend
        self.prepared = prepared
        self.result: EditResult | None = None  # the result so far (the one to write)
        self.first: EditResult | None = None  # the first attempt's result
        self._settled = False  # a changed result met a worse retry: no more attempts

    def __iter__(self) -> Iterator[Attempt]:
        prepared = self.prepared
        yield Attempt(1, prepared)
        while True:
            result = self.result
            assert result is not None, "record() each attempt's result before the next"
            if self._settled or result.attempts >= self.backend.options.attempts:
                return
            retry = next_attempt(self.backend, prepared, result)
            if retry is None:
                return
            prepared = retry
            yield Attempt(result.attempts + 1, prepared, result)

    def record(self, result: EditResult) -> None:
        """The judged result of the attempt just yielded."""
        if self.result is None:
            self.result = self.first = result
            return
        latest = after_attempts(self.result, result)
        if self.result.status is Status.CHANGED and latest.status is not Status.CHANGED:
            self.result.attempts, self.result.stats = latest.attempts, latest.stats
            self._settled = True
            return
        self.result = latest


Repair = Callable[[Backend, PreparedEdit, EditResult], "PreparedEdit | None"]


def next_attempt(
    backend: Backend, prepared: PreparedEdit, result: EditResult
) -> PreparedEdit | None:
    """The attempt after ``result``, ``prepared``'s answer: the first of :func:`repairs` that
    fits and is not ``prepared`` again (:func:`repeats`); ``None`` when none is left."""
    for make in repairs(prepared, result):
        retry = make(backend, prepared, result)
        if retry is not None and not repeats(retry, prepared):
            return retry
    return None


def repairs(prepared: PreparedEdit, result: EditResult) -> tuple[Repair, ...]:
    """The repairs to try after ``result``, in order: :func:`repair_request` (the first request
    with a note, or by parts); after the tests failed it, :func:`fix_request` as well: first
    when the result changed the file (an attempt with a bug: shown it and asked for the cause,
    the model fixes some), second when it did not (told the tests' output on its first
    request, the model makes the change on some; docs/design.md, "Fixing a failing result")."""
    if not result.tests_failed:
        return (repair_request,)
    if result.new_text == prepared.source.text:
        return (repair_request, fix_request)
    return (fix_request, repair_request)


def repair_request(
    backend: Backend, prepared: PreparedEdit, result: EditResult
) -> PreparedEdit | None:
    """The attempt after ``result``: the first attempt's conversation, the rejected file and
    the feedback, fitted into ``backend``'s context; ``None`` when the result asks for no
    other attempt or the longer prompt does not fit."""
    planned = repair_plan(backend, prepared, result)
    if planned is not None:
        return planned
    conv = repair_conversation_for(prepared, result)
    if conv is None:
        return None
    retry = refit(backend, prepared, conv)
    if retry is not None:
        retry.base = prepared.first
    return retry


def fix_request(
    backend: Backend, prepared: PreparedEdit, result: EditResult
) -> PreparedEdit | None:
    """After the tests failed ``result``: the request to fix it, shown as the file, with the
    instruction, the tests' output and a note asking first for the cause
    (:func:`~adapld_cli.edit.prompt.fix_conversation`), fitted into ``backend``'s context;
    ``None`` otherwise (a refusal by a check: not a file to build on) or when it does not fit.
    An unchanged result is the original file, and fixing it is the edit. The scope guard
    still judges the answer against the original file."""
    run = result.test_run
    if run is None:
        return None
    timed_out = run.exit_code is None
    how = f"no end within {run.timeout:g} s" if timed_out else f"exit {run.exit_code}"
    conv = fix_conversation(
        backend.template, code=result.new_text, instruction=prepared.instruction, how=how,
        output=run.output, filename=prepared.source.name, lang=prepared.lang,
    )  # fmt: skip
    retry = refit(backend, prepared, conv)
    if retry is not None:
        retry.base = prepared.first
    return retry


def repeats(retry: PreparedEdit, last: PreparedEdit) -> bool:
    """Whether ``retry`` would be the attempt just made again: a repair whose answer was
    the result it repaired, told the same feedback, under greedy decoding, which would give
    the same answer once more (the prompts, the drafts' reference and the plan all equal).
    Such an attempt is not made: it would cost a generation and change nothing."""
    return (
        last.config.greedy
        and retry.conversation == last.conversation
        and retry.plan == last.plan
        and retry.config == last.config
    )


def repair_plan(
    backend: Backend, prepared: PreparedEdit, result: EditResult
) -> PreparedEdit | None:
    """After the tests failed ``result``: the attempt that asks again, with the tests' output,
    only for the parts of it :func:`~adapld_cli.edit.plan.plan_repair` names, spliced into
    it; ``None`` (a whole-file repair) otherwise or with ``--whole-file``. What the edit left
    as the original had it is not generated again, so it cannot drift, and the attempt costs
    the parts' tokens, not the file's (docs/design.md, "Repair by parts")."""
    from adapld_cli.edit.plan import plan_repair

    if not (result.tests_failed and result.feedback and backend.options.parts):
        return None
    if result.undefined:  # names to import or define at the top: the whole file
        return None
    plan = plan_repair(prepared.source.text, result.new_text, prepared.lang, result.feedback)
    if plan is None:
        return None
    return replace(prepared, plan=plan, base=prepared.first)


def repair_conversation_for(prepared: PreparedEdit, result: EditResult) -> Conversation | None:
    """The conversation of the attempt after ``result`` (``None``: no feedback to give)."""
    base = prepared.first
    if result.feedback is None or base is None:
        return None
    return repair_conversation(base, result.new_text, result.feedback)


def after_attempts(earlier: EditResult, latest: EditResult) -> EditResult:
    """``latest``, counting ``earlier``'s attempts and generation work in its own."""
    latest.attempts = earlier.attempts + 1
    latest.stats = combined_stats(earlier.stats, latest.stats)
    return latest


def combined_stats(a: Stats, b: Stats) -> Stats:
    """Two generations' statistics as one: counts and times added, the latest step cost."""
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
