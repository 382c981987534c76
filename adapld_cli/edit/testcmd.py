"""The user's own tests as a judge (``--test CMD``): run the command, read its verdict, put
a result the tests fail back.

Contract: :func:`run_tests` runs ``CMD`` through the shell in the current directory, in a
process group of its own, and returns a :class:`TestRun` (exit code, seconds, the bounded
tail of its output). Past ``timeout`` seconds the whole group is killed and the run counts
as failed. ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM through
:class:`~adapld_cli.edit.interrupt.Signals`) while it runs kills the group too, then
propagates: the caller puts the file back. :func:`failure_feedback` is what the model is
told when the tests fail after its edit: the failing assertion and traceback first when the
runner is pytest, else the output's tail, without the lines of ``^`` and ``~`` markers
Python 3.11+ sets under a traceback's source lines (columns the model cannot use, at a
token a character or two). :class:`TestJudge` is the run's side of it (see
there): baseline, the run after each written result, taking a failing result back.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from adapld_cli.edit.judge import Status

if TYPE_CHECKING:
    from adapld_cli.edit.files.journal import Run
    from adapld_cli.edit.files.source import Snapshot
    from adapld_cli.edit.judge import EditResult
    from adapld_cli.edit.outcome import Outcome

DEFAULT_TIMEOUT_S = 300.0
TAIL_LINES = 60
TAIL_BYTES = 4096
_PYTEST_FAILURES = re.compile(r"^=+ (FAILURES|ERRORS) =+$", re.MULTILINE)
_PYTEST_SUMMARY = re.compile(r"^=+ short test summary info =+$", re.MULTILINE)
_MARKERS = re.compile(r"^[ \t]*[~^]+[ \t~^]*\n", re.MULTILINE)  # a traceback's column markers
# what differs from run to run in the same failure: object addresses, pytest's timing
_ADDRESSES = re.compile(r" at 0x[0-9a-fA-F]+\b")
_PYTEST_TIME = re.compile(
    r"(?<=[a-z]) in \d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d\))?(?=(?: =+)?$)", re.MULTILINE
)


@dataclass(frozen=True)
class TestRun:
    """One run of the test command."""

    __test__ = False  # not a pytest test class, whatever its name

    command: str
    exit_code: int | None  # None: killed at the timeout
    seconds: float
    output: str  # stdout and stderr together, bounded (the tail that matters)
    timeout: float

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def summary(self) -> str:
        """One line: ``exit 1: FAILED test_x.py::test_y - AssertionError`` or ``timed out``."""
        if self.exit_code is None:
            return f"timed out after {self.timeout:g}s"
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        failed = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
        last = failed[0] if failed else (lines[-1] if lines else "no output")
        return f"exit {self.exit_code}: {last[:160]}"

    def stats(self) -> dict[str, object]:
        """The ``--stats-json`` record of this run."""
        return {"exit_code": self.exit_code, "seconds": round(self.seconds, 3)}


def run_tests(command: str, timeout: float = DEFAULT_TIMEOUT_S) -> TestRun:
    """Run ``command`` (see the module contract)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            command,
            shell=True,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: killed whole, spared the terminal's ^C
        )
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code = None
        except BaseException:  # KeyboardInterrupt and the like: nothing may keep running
            _kill_group(proc)
            raise
        seconds = time.perf_counter() - started
        out.seek(0)
        text = out.read().decode("utf-8", errors="replace")
    return TestRun(command, code, seconds, bounded_output(text), timeout)


def failure_feedback(run: TestRun) -> str:
    """What the model is told about a failing run."""
    if run.exit_code is None:
        what = f"The tests (`{run.command}`) did not finish within {run.timeout:g} seconds"
    else:
        what = f"The tests (`{run.command}`) fail with your file (exit {run.exit_code})"
    return f"{what}. Their output:\n\n{run.output.strip() or '(none)'}\n\nMake them pass."


def refuse_failing(result: EditResult, run: TestRun) -> None:
    """Make ``result``, which ``run`` failed, a refusal the model is told about: the tests'
    output as its feedback, marked so that a repair may keep its other parts."""
    result.status, result.message = Status.REFUSED, "tests failed"
    result.feedback = failure_feedback(run)
    result.test_run = run


def bounded_output(text: str) -> str:
    """pytest's failure sections (and its summary) when present, else the last lines; at most
    :data:`TAIL_LINES` lines and :data:`TAIL_BYTES` bytes either way; a traceback's column
    markers, object addresses and pytest's timing dropped, so that the same failure is told
    in the same words (and a greedy repair of it is the same)."""
    text = _PYTEST_TIME.sub("", _ADDRESSES.sub("", _MARKERS.sub("", text)))
    start = _PYTEST_FAILURES.search(text)
    if start is not None:
        end = _PYTEST_SUMMARY.search(text, start.end())
        body = text[start.start() : end.start() if end else len(text)]
        tail = text[end.start() :] if end else ""
        text = _head(body, TAIL_LINES // 2, TAIL_BYTES // 2) + "\n" + _tail(tail)
    return _tail(text)


def _head(text: str, lines: int, size: int) -> str:
    return "\n".join(text.splitlines()[:lines])[:size]


def _tail(text: str) -> str:
    kept = "\n".join(text.splitlines()[-TAIL_LINES:])
    data = kept.encode("utf-8")
    if len(data) > TAIL_BYTES:
        kept = data[-TAIL_BYTES:].decode("utf-8", errors="ignore")
    return kept


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``proc``'s whole process group and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


@dataclass(frozen=True)
class TestConfig:
    """``--test CMD``, ``--test-timeout``, ``--keep-failing``."""

    __test__ = False

    command: str
    timeout: float = DEFAULT_TIMEOUT_S
    keep_failing: bool = False


class TestJudge:
    """The tests' side of a run (``adapld edit --test``): the baseline run before any edit,
    the run after each written result, putting a failing result back (through the run's
    journal) and the words the result line and ``--stats-json`` get.

    A result the tests fail is put back at once, byte for byte, and handed to the attempt
    loop as refused, with the tests' output as its feedback: the next attempt starts from
    the original file, and the last one failing leaves the original in place (or, with
    ``keep_failing``, is written again with a warning).
    """

    __test__ = False

    def __init__(self, config: TestConfig, journal: Run) -> None:
        self.config = config
        self.journal = journal
        self.baseline: TestRun | None = None
        self.last: TestRun | None = None
        self.failed: EditResult | None = None  # the latest result the tests failed
        self.unchanged: EditResult | None = None  # ... when it was the file unchanged

    def run_baseline(self) -> TestRun:
        """Run the tests on the untouched files, before any edit."""
        self.baseline = run_tests(self.config.command, self.config.timeout)
        return self.baseline

    def after(self, outcome: Outcome) -> TestRun:
        """Run the tests on the file ``outcome`` wrote; interrupted, the file is put back
        first (then the interrupt propagates)."""
        try:
            self.last = run_tests(self.config.command, self.config.timeout)
        except KeyboardInterrupt:
            self.take_back(outcome)
            raise
        return self.last

    def take_back(self, outcome: Outcome) -> Snapshot | None:
        """Put back what ``outcome`` wrote over (the journal's
        :meth:`~adapld_cli.edit.files.journal.Run.restore`); the restored file's snapshot."""
        assert outcome.written is not None
        return self.journal.restore(outcome.written)

    def refuse(self, result: EditResult, outcome: Outcome, run: TestRun) -> None:
        """The tests failed ``result``: put it back, and make it a refusal the model is told
        about (its line is settled by :meth:`finished` once the attempts are spent). An
        in-place result's ``source`` then carries the restored file's snapshot, so the next
        write's race check compares with the file as it is now."""
        snapshot = self.take_back(outcome)
        src = result.source
        if snapshot is not None and outcome.written == src.path:
            result.source = replace(src, snapshot=snapshot)
        refuse_failing(result, run)
        self.failed = result

    def refuse_unchanged(self, result: EditResult) -> None:
        """An unchanged result while the tests failed before the edit: it fails them as the
        file did (they are not run again), so it is refused with the baseline's output as its
        feedback and the next attempt is told what fails: with failing tests, an edit is
        judged by whether it makes them pass. ``result`` is left as it is when the tests
        passed before."""
        base = self.baseline
        if base is not None and not base.passed:
            refuse_failing(result, base)
            self.failed = self.unchanged = result

    def passed(self, outcome: Outcome, run: TestRun) -> Outcome:
        """The outcome of a written result the tests pass."""
        before = self.baseline is not None and not self.baseline.passed
        note = "tests passed" + (" (they failed before the edit)" if before else "")
        outcome.detail = "; ".join(p for p in (outcome.detail, note) if p)
        outcome.tests = self.stats(run)
        return outcome

    def finished(self, result: EditResult) -> EditResult:
        """The last result after the attempts were spent: a test failure gets its line, or,
        with ``keep_failing``, is made writable again."""
        unchanged = result is self.unchanged
        run = self.baseline if unchanged else self.last
        if result is not self.failed or run is None:
            return result
        summary = run.summary()
        if self.config.keep_failing:
            result.status = Status.UNCHANGED if unchanged else Status.CHANGED
            done = "left unchanged" if unchanged else "written"
            result.message = f"--keep-failing: {done} although the tests fail ({summary})"
        else:
            tries = f"{result.attempts} attempt{'s' if result.attempts != 1 else ''}"
            end = "the file is as it was" if unchanged else "file restored"
            result.message = f"tests failed after {tries} (last: {summary}); {end}"
        return result

    def report(self, outcome: Outcome) -> Outcome:
        """``outcome`` with the tests' runs for ``--stats-json`` and, where the tests decided
        nothing (unchanged, refused by a check), a word on how they stood before."""
        if outcome.tests is None:
            outcome.tests = self.stats(self.last)
        if outcome.result is not None and outcome.result is self.failed:
            if outcome.status is not Status.REFUSED:  # kept failing: say so
                note = outcome.result.message or ""
                outcome.detail = "; ".join(p for p in (outcome.detail, note) if p)
        elif self.last is None and self.baseline is not None and not self.baseline.passed:
            outcome.detail = "; ".join(
                p for p in (outcome.detail, f"the tests fail ({self.baseline.summary()})") if p
            )
        return outcome

    def stats(self, last: TestRun | None) -> dict[str, object]:
        row: dict[str, object] = {"command": self.config.command}
        if self.baseline is not None:
            row["baseline"] = self.baseline.stats()
        if last is not None:
            row["after"] = last.stats()
        return row
