"""Judging a generation: may the file the model returned be written, and if not, why.

Contract: :func:`judge` turns a :class:`~adapld_cli.edit.request.Generation` into an
:class:`EditResult` whose ``status`` is :attr:`Status.CHANGED`, :attr:`Status.UNCHANGED` or
:attr:`Status.REFUSED` (exit 1). The checks run in this order:

1. the token limit was hit before the closing fence (refused, whatever ``force`` says);
2. the output is the input (unchanged; the model is told so if asked again);
3. the input parsed (tree-sitter, or JSON/TOML/YAML by file name) and the output does not;
4. the output loses definitions, statements or most lines that the instruction does not ask
   to lose (:func:`adapld_cli.edit.guard.check_scope`), or changes what it did not ask to
   change: a rename left undone, a data table rewritten
   (:func:`adapld_cli.edit.guard.check_unasked`);
5. the output uses names it never defines or imports (:mod:`.lint`): noted, never refused.

With ``force`` checks 3 and 4 are kept and noted (``syntax_error``, ``lost``) instead of
refused. A result the model should be asked again about carries ``feedback``.

:class:`Status` is the one vocabulary of results and outcomes: the judge says ``changed``,
``unchanged`` or ``refused``; the write-back turns ``changed`` into ``edited``, ``written``
or ``would change`` when it acts on it, and leaves it ``changed`` when it only prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from adapld_cli.edit.errors import EXIT_OK, EXIT_REFUSED
from adapld_cli.edit.files.source import SourceFile, encode_like
from adapld_cli.edit.formats import check_format, format_for
from adapld_cli.edit.guard import REFUSAL_TAIL, check_scope, check_unasked
from adapld_cli.edit.prompt import extract_file
from adapld_cli.edit.request import Generation, PreparedEdit
from adapld_cli.edit.syntax import (
    DefinitionChanges,
    SyntaxIssue,
    changed_definitions,
    first_syntax_error,
)
from adapld_cli.engine.types import Stats

UNCHANGED_FEEDBACK = (
    "You returned the file unchanged. If the instruction asks for a change to this file, make "
    "it now; if the file already does what it asks, return it unchanged again."
)


class Status(str, Enum):
    """A result's or a file's end state, as printed after its name."""

    EDITED = "edited"  # written in place
    WRITTEN = "written"  # written to --output
    CHANGED = "changed"  # the result changes the file; as an outcome: printed, nothing written
    WOULD_CHANGE = "would change"  # --check found a change (exit 1)
    UNCHANGED = "unchanged"
    REFUSED = "refused"  # a check refused the result (exit 1), nothing written
    ERROR = "error"  # bad input, model or write failure (exit 2)
    INTERRUPTED = "interrupted"  # SIGINT/SIGTERM during the edit (130/143), nothing written

    def __str__(self) -> str:
        return self.value


@dataclass
class EditResult:
    """The judged outcome of one edit. ``new_text`` is the extracted file (``\\n`` line
    endings), also when refused (for inspection); write :attr:`new_bytes` only when
    ``status`` is :attr:`Status.CHANGED`."""

    source: SourceFile
    lang: str | None
    status: Status  # CHANGED | UNCHANGED | REFUSED
    new_text: str
    stats: Stats
    stop_reason: str | None
    message: str | None = None  # why it was refused
    syntax_error: SyntaxIssue | None = None  # kept despite it (force)
    lost: str | None = None  # what the result loses or changes unasked, kept despite it (force)
    changes: DefinitionChanges | None = None
    tokens: list[int] = field(default_factory=list)
    feedback: str | None = None  # what to tell the model when asking again (None: do not)
    attempts: int = 1  # generations this result took (the first + repairs)
    undefined: str | None = None  # names it uses and never defines (edit.lint), if any
    plan: Any = None  # edit.parts.Plan the result was spliced by (None: the whole file)
    # edit.testcmd.TestRun: the run of the tests that failed it after every check passed
    test_run: Any = None

    def __post_init__(self) -> None:
        self.status = Status(self.status)  # "changed" given as a plain string counts too

    @property
    def tests_failed(self) -> bool:
        """The tests failed it after every check passed: a repair may keep its other parts."""
        return self.test_run is not None

    @property
    def exit_code(self) -> int:
        return EXIT_REFUSED if self.status is Status.REFUSED else EXIT_OK

    @property
    def new_bytes(self) -> bytes:
        """The edited file encoded like the original (encoding, BOM, line endings)."""
        return encode_like(self.new_text, self.source)


def judge(prepared: PreparedEdit, generation: Generation, *, force: bool = False) -> EditResult:
    """Extract the file from ``generation`` and apply the checks (see the module contract)."""
    source = prepared.source
    new_text, closed = extract_file(
        generation.text, prepared.prompt.fence, trailing_newline=source.trailing_newline
    )
    result = EditResult(
        source=source,
        lang=prepared.lang,
        status=Status.CHANGED,
        new_text=new_text,
        stats=generation.stats,
        stop_reason=generation.stop_reason,
        tokens=generation.tokens,
        plan=generation.plan,
    )
    if not closed and generation.stop_reason not in ("eos", "stop_string"):
        limit = prepared.config.max_new_tokens
        return _refuse(
            result,
            f"generation hit the token limit ({limit}) before the end of the file; nothing "
            "written (raise --max-new-tokens)",
        )
    if new_text == source.text:
        result.status = Status.UNCHANGED
        result.feedback = UNCHANGED_FEEDBACK
        return result
    result.changes = changed_definitions(source.text, new_text, prepared.lang)
    _check_parse(result, force)
    if result.status is not Status.REFUSED:
        _check_scope(result, prepared.instruction, force)
    if result.status is Status.CHANGED:
        _check_names(result)
    return result


def parse_issue(before: str, after: str, lang: str | None, name: str) -> SyntaxIssue | None:
    """How ``after`` fails to parse when ``before`` parsed: tree-sitter for ``lang``, then the
    data format of ``name`` (JSON, TOML, YAML); ``None`` when nothing broke."""
    if first_syntax_error(before, lang) is None:
        issue = first_syntax_error(after, lang)
        if issue is not None:
            return issue
    return check_format(before, after, name)


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
    """Refuse (or note, with ``force``) a result that loses what was not asked, or changes
    what was not asked."""
    language = result.lang or format_for(result.source.name)
    issue = scope_issue(
        result.source.text, result.new_text, language=language, instruction=instruction
    )
    if issue is None:
        return
    result.lost, refusal = issue
    if not force:
        _refuse(result, refusal)
        result.feedback = f"The file you returned {result.lost}."


def scope_issue(
    before: str, after: str, *, language: str | None, instruction: str
) -> tuple[str, str] | None:
    """What ``after`` loses or changes that ``instruction`` does not ask for: the scope guard
    (:func:`check_scope`), then :func:`check_unasked` on a result it keeps. Returns ``(lost,
    refusal)``: ``lost`` reads after "the file you returned" (``would delete report, which the
    instruction does not name``), ``refusal`` after "refused — "; ``None`` when nothing is.
    ``language``: a :func:`~adapld_cli.edit.syntax.language_for` id, else the data format of
    the file's name. The one definition ``adapld edit`` and ``adapld serve --check-edits``
    share."""
    verdict = check_scope(before, after, language=language, instruction=instruction)
    if verdict.lost:
        return verdict.message or "", verdict.refusal or ""
    lost = check_unasked(before, after, language=language, instruction=instruction)
    return None if lost is None else (lost, f"the result {lost}{REFUSAL_TAIL}")


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


def _refuse(result: EditResult, message: str) -> EditResult:
    result.status = Status.REFUSED
    result.message = message
    return result
