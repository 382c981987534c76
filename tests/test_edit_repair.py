"""Repair on refusal (``--attempts``): a result refused by a check, or returned unchanged, is
asked for again with the reason, through the real model layer and engine on the scripted tiny
models (whose answer does not depend on the conversation, so a repair repeats it: what these
tests check is the loop, the conversation and the accounting; the real model's repairs are in
the real-model tests)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from adapld_cli.edit import EditOptions, LocalModel, decode_source, judge, prepare
from adapld_cli.edit.judge import UNCHANGED_FEEDBACK
from adapld_cli.edit.prompt import REPAIR_NOTE
from adapld_cli.edit.repair import repair_request, repeats
from adapld_cli.edit.run import edit_file


def generated(local, prepared):
    """One attempt: generate and judge, as the run does."""
    return judge(prepared, local.generate(prepared), force=local.options.force)


@pytest.fixture
def src(texts):
    return decode_source(texts.source.encode(), "calc.py")


def test_refused_result_is_asked_again_with_the_reason(loaded, src, texts):
    local = LocalModel(loaded("broken"), EditOptions(attempts=3))
    first = prepare(local, src, "rename foo to bar")
    result = generated(local, first)
    assert result.status == "refused" and result.feedback.startswith("The file you returned")
    assert "does not parse (line 1" in result.feedback
    retry = repair_request(local, first, result)
    # The first conversation with the feedback as a note on its user turn; the rejected file
    # is not shown but drafted from.
    msgs = retry.conversation.messages
    assert msgs[:-1] == first.conversation.messages[:-1]
    assert msgs[-1] == {
        "role": "user",
        "content": first.conversation.messages[-1]["content"]
        + REPAIR_NOTE.format(feedback=result.feedback),
    }
    assert retry.conversation.reference == texts.broken
    assert first.conversation.reference == ""
    assert retry.conversation.opening == first.conversation.opening
    assert retry.prompt.ids[-1] == first.prompt.ids[-1]  # the answer opens the same way
    assert len(retry.prompt.ids) > len(first.prompt.ids)
    # A third attempt starts again from the first conversation plus the latest note only.
    third = repair_request(local, retry, generated(local, retry))
    assert third.conversation.messages == retry.conversation.messages

    assert repeats(third, retry)  # the same answer, the same note: the same prompt again

    # Through edit(): the second generation is the same broken file, so a third would be the
    # second again under greedy decoding and is not made; their work added up.
    again = edit_file(local, src, "rename foo to bar")
    assert again.status == "refused" and again.attempts == 2
    assert again.stats.new_tokens == 2 * result.stats.new_tokens
    # the repair copies the rejected answer, its drafts' reference: fewer passes
    assert again.stats.forward_passes < 2 * result.stats.forward_passes
    assert again.stats.prompt_tokens > 2 * result.stats.prompt_tokens
    # sampling may answer otherwise: every attempt is made
    options = EditOptions(attempts=3, temperature=0.8, seed=1)
    sampled = edit_file(LocalModel(loaded("broken"), options), src, "rename foo to bar")
    assert sampled.status == "refused" and sampled.attempts == 3


@pytest.mark.parametrize("attempts", [1, 2])
def test_attempts_bound_the_generations(loaded, src, attempts):
    result = edit_file(LocalModel(loaded("broken"), EditOptions(attempts=attempts)), src, "rename")
    assert result.status == "refused" and result.attempts == attempts


def test_accepted_and_unrepairable_results_are_not_asked_again(loaded, src, texts):
    ok = edit_file(LocalModel(loaded("rename"), EditOptions(attempts=3)), src, "rename foo to bar")
    assert ok.status == "changed" and ok.attempts == 1 and ok.feedback is None
    # Cut off by the token limit: asking again would hit it again.
    cut = edit_file(LocalModel(loaded("loop"), EditOptions(max_new_tokens=9, attempts=3)), src, "x")
    assert cut.status == "refused" and cut.attempts == 1 and cut.feedback is None
    # Forced: kept, so nothing to repair.
    forced = edit_file(LocalModel(loaded("broken"), EditOptions(force=True, attempts=3)), src, "x")
    assert forced.status == "changed" and forced.attempts == 1


def test_unchanged_is_asked_again_and_may_stay_unchanged(loaded, src, texts):
    local = LocalModel(loaded("same"), EditOptions(attempts=2))
    first = prepare(local, src, "add type hints")
    result = generated(local, first)
    assert result.status == "unchanged" and result.feedback == UNCHANGED_FEEDBACK
    final = edit_file(local, src, "add type hints")
    assert final.status == "unchanged" and final.attempts == 2
    assert final.new_text == texts.source


def test_repair_that_does_not_fit_the_context_is_skipped(loaded, src):
    local = LocalModel(loaded("broken"), EditOptions(attempts=2))
    first = prepare(local, src, "rename")
    room = len(first.prompt.ids) + first.source_tokens + 20  # room for one attempt
    local.context = dataclasses.replace(local.context, limit=room)
    result = edit_file(local, src, "rename")
    assert result.status == "refused" and result.attempts == 1


def test_cli_reports_attempts(tiny_models, source_file, tmp_path, texts):
    from typer.testing import CliRunner

    from adapld_cli.cli.app import app

    def cli(*args):
        argv = ["edit", *map(str, args), "--model", str(tiny_models["broken"]), "--no-live"]
        return CliRunner().invoke(app, argv, catch_exceptions=False)

    stats = tmp_path / "stats.jsonl"
    r = cli(source_file, "-i", "rename", "--stats-json", stats, "-v")
    assert r.exit_code == 1 and source_file.read_text() == texts.source
    assert "calc.py: refused after 2 attempts — the edited file does not parse" in r.stderr
    assert "attempt 1 refused: The file you returned does not parse" in r.stderr
    assert json.loads(stats.read_text())["attempts"] == 2
    r = cli(source_file, "-i", "rename", "--attempts", "1")
    assert r.exit_code == 1 and "calc.py: refused — the edited" in r.stderr
    r = cli(source_file, "-i", "rename", "--attempts", "0")
    assert r.exit_code == 2


def test_undefined_names_are_asked_again_and_written_with_a_warning(loaded, src):
    local = LocalModel(loaded("undefined"), EditOptions(attempts=2))
    first = prepare(local, src, "rename foo to bar")
    result = generated(local, first)
    assert result.status == "changed" and result.undefined == "baz (line 6)"
    assert "never defines or imports: baz (line 6)" in result.feedback
    retry = repair_request(local, first, result)
    assert result.feedback in retry.conversation.messages[-1]["content"]
    final = edit_file(local, src, "rename foo to bar")  # the scripted model repeats itself
    assert final.status == "changed" and final.attempts == 2 and final.undefined


def test_cli_writes_a_result_with_undefined_names_and_warns(tiny_models, source_file):
    from typer.testing import CliRunner

    from adapld_cli.cli.app import app

    argv = ["edit", str(source_file), "-i", "rename foo to bar", "--no-live", "-v"]
    argv += ["--model", str(tiny_models["undefined"])]
    r = CliRunner().invoke(app, argv, catch_exceptions=False)
    assert r.exit_code == 0 and "baz(1, 2)" in source_file.read_text()
    assert "attempt 1 changed: The file you returned uses names" in r.stderr
    assert "warning: uses names it never defines or imports: baz (line 6)" in r.stderr


def test_a_changed_result_is_kept_over_a_worse_retry(loaded, src):
    """The attempt loop never trades a changed result (asked again for its undefined names)
    for a retry that is refused or unchanged: the changed one is kept, both attempts counted."""
    from adapld_cli.edit import Attempts, EditResult
    from adapld_cli.engine.types import Stats

    def made(status, feedback=None):
        return EditResult(
            source=src, lang="python", status=status, new_text="x\n", stats=Stats(method="ar"),
            stop_reason="eos", feedback=feedback,
        )  # fmt: skip

    backend = LocalModel(loaded("rename"), EditOptions(attempts=3))
    prepared = prepare(backend, src, "rename foo to bar")
    answers = iter([made("changed", "undefined names"), made("refused", "lost foo")])
    attempts = Attempts(backend, prepared)
    for _attempt in attempts:
        attempts.record(next(answers))
    result = attempts.result
    assert result.status == "changed" and result.feedback == "undefined names"
    assert result.attempts == 2


def test_undefined_names_only_count_when_the_edit_adds_them():
    from adapld_cli.edit.lint import describe, new_undefined_names

    before = "import os\n\ndef f():\n    return os.sep + missing\n"
    same = before.replace("f()", "g()")
    assert new_undefined_names(before, same, "python") == []  # missing was undefined before
    added = before + "\ndef h():\n    logger.info(len(x))\n    return y\n"
    assert new_undefined_names(before, added, "python") == [(7, "logger"), (7, "x"), (8, "y")]
    assert new_undefined_names(before, added, "javascript") == []
    assert new_undefined_names(before, "def broken(:\n", "python") == []
    names = [(i, f"n{i}") for i in range(7)]
    assert (
        describe(names)
        == "n0 (line 0), n1 (line 1), n2 (line 2), n3 (line 3), n4 (line 4) and 2 more"
    )
