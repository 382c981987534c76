"""The attempts at one file: the first generation, then repairs while a result asks for one.

Contract: iterate over :class:`Attempts` to get each attempt's :class:`Attempt` (the prepared
edit to generate), and :meth:`Attempts.record` each judged result before asking for the next;
:attr:`Attempts.result` is the one result that may be written. Another attempt is made while
the last result carries feedback for the model (refused by a check, unchanged, or changed but
using undefined names), fewer than ``options.attempts`` generations ran, the repair prompt
(the first attempt's conversation, the rejected file and the feedback) fits the context, and
it is not the last attempt's prompt again (:func:`repeats`: greedy decoding would give the
same answer); after the tests failed a result, the repair asks only for the parts of it that
the edit changed or the failure names, when they are a small enough share of it
(:func:`repair_plan`). A changed result is never traded for a later one that is refused or
unchanged: the changed one stays the result, counting every attempt's work.

The loop calls nothing back: whoever iterates generates and judges (the run with its live
panel, the benchmark with its timers, :func:`adapld_cli.edit.edit_file` with neither).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields, replace

from adapld_cli.edit.judge import EditResult, Status
from adapld_cli.edit.prompt import Conversation, repair_conversation
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
            retry = repair_request(self.backend, prepared, result)
            if retry is None or repeats(retry, prepared):
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
