"""Fixing a failing result: after the tests fail an answer, the model is shown that answer as
the file, with the instruction and the tests' output, and asked first for the cause, then for
the fixed file. The prompt's form, where its answer starts, which repair comes first, and the
loop through ``adapld edit --test`` with real shell commands and the scripted tiny models
(whose answer does not depend on the conversation: the real model's fixes are measured in
docs/performance.md)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from adapld_cli.cli.app import app
from adapld_cli.edit import EditOptions, LocalModel, decode_source, judge, prepare
from adapld_cli.edit.parts import generate
from adapld_cli.edit.prompt import (
    EXPLAIN_NOTE,
    REPAIR_NOTE,
    after_explanation,
    fix_conversation,
    load_template,
)
from adapld_cli.edit.repair import fix_request, next_attempt, repair_request, repairs
from adapld_cli.edit.testcmd import TestRun, refuse_failing

FAILED = TestRun("pytest -q", 1, 0.5, "E   assert 3 == 2\nFAILED test_x.py::test_f", 300.0)


def judged(local, prepared):
    """One attempt: generate and judge, as the run does."""
    return judge(prepared, generate(local, prepared), force=local.options.force)


@pytest.fixture
def src(texts):
    return decode_source(texts.source.encode(), "calc.py")


def test_the_fix_request_shows_the_failing_file_and_asks_for_the_cause_first():
    code = "def f():\n    return 3\n"
    conv = fix_conversation(
        load_template(None), code=code, instruction="Make f return 2", how="exit 1",
        output="\nE   assert 3 == 2\n", filename="f.py", lang="python",
    )  # fmt: skip
    user = conv.messages[-1]["content"]
    assert f"```python\n{code}```" in user  # the failing answer is the file to edit
    assert user.endswith(
        "Edit it: Make f return 2\n\nThis file already tries to make that change, but the tests "
        "fail with it (exit 1). Their output:\n\nE   assert 3 == 2\n\nFix the file so that the "
        "tests pass." + EXPLAIN_NOTE
    )
    # The answer starts a turn of its own (words first), drafts copy from the failing file.
    assert conv.explain and conv.opening == "" and conv.reference == code
    assert conv.with_opening == conv.messages  # no empty assistant turn sent to a server


@pytest.mark.parametrize(
    "answer, text",
    [
        ("It returns 3.\n\n```python\nx = 1\n```\nDone.", "x = 1\n```\nDone."),
        ("Cause.\n```\nx = 1\n```", "x = 1\n```"),
        ("Cause.\n\n```python\nx = 1\n", "x = 1\n"),  # never closed: the rest is the file
        ("x = 1\n```", "x = 1\n```"),  # the file alone, up to its closing fence
        ("x = 1\n```\n", "x = 1\n```\n"),
        ("No block at all.", "No block at all."),
    ],
)
def test_the_file_of_an_explaining_answer_starts_after_the_fence_that_opens_it(answer, text):
    assert after_explanation(answer, "```") == text


def test_a_changed_result_the_tests_fail_is_fixed_first(loaded, src, texts):
    local = LocalModel(loaded("rename"), EditOptions(attempts=3))
    first = prepare(local, src, "rename foo to bar")
    result = judged(local, first)
    assert result.status == "changed"
    refuse_failing(result, FAILED)
    assert result.test_run is FAILED
    assert repairs(first, result) == (fix_request, repair_request)
    retry = next_attempt(local, first, result)
    conv = retry.conversation
    assert conv.explain and conv.reference == texts.renamed
    assert (
        texts.renamed in conv.messages[-1]["content"]
        and FAILED.output in conv.messages[-1]["content"]
    )
    assert retry.config.stop_strings == ()  # the first fence opens the file: read to the end
    assert retry.base is first.conversation  # later repairs still build on the first request
    again = judged(local, retry)  # the scripted model gives the file alone
    assert again.status == "changed" and again.new_text == texts.renamed
    # Failing the same way, the same fix would be asked again: the note on the first
    # request comes instead.
    refuse_failing(again, FAILED)
    third = next_attempt(local, retry, again)
    assert fix_request(local, retry, again).conversation == retry.conversation
    if third.plan is None:  # the whole file with the note
        assert not third.conversation.explain
        assert REPAIR_NOTE.split("{")[0] in third.conversation.messages[-1]["content"]
    else:  # by parts: each part's request is built on the first one
        assert third.plan.base == texts.renamed and third.base is first.conversation


def test_an_unchanged_result_the_tests_fail_gets_the_note_first(loaded, src):
    local = LocalModel(loaded("same"), EditOptions(attempts=3))
    first = prepare(local, src, "make main return 3")
    result = judged(local, first)
    refuse_failing(result, FAILED)  # as the tests that failed before the edit make it
    assert repairs(first, result) == (repair_request, fix_request)
    retry = next_attempt(local, first, result)
    assert not retry.conversation.explain
    again = judged(local, retry)
    refuse_failing(again, FAILED)
    third = next_attempt(local, retry, again)  # the note again would repeat: the fix instead
    assert third.conversation.explain


def test_a_result_refused_by_a_check_is_not_fixed(loaded, src):
    local = LocalModel(loaded("broken"), EditOptions(attempts=3))
    first = prepare(local, src, "rename foo to bar")
    result = judged(local, first)
    assert result.status == "refused" and not result.tests_failed
    assert repairs(first, result) == (repair_request,)
    assert fix_request(local, first, result) is None


def test_edit_test_fixes_then_repairs_and_restores_the_file(tiny_models, source_file, monkeypatch):
    monkeypatch.chdir(source_file.parent)
    original = source_file.read_bytes()
    argv = ["edit", "calc.py", "-i", "rename foo to bar", "--no-live", "-v", "--attempts", "3"]
    argv += ["--model", str(tiny_models["rename"]), "--test", "echo boom; exit 3"]
    r = CliRunner().invoke(app, argv, catch_exceptions=False)
    assert r.exit_code == 1 and source_file.read_bytes() == original
    assert "attempt 1 refused: the tests fail (exit 3: boom)." in r.stderr
    assert "Asking for the cause and a fixed file." in r.stderr
    assert "attempt 2 refused: the tests fail (exit 3: boom)." in r.stderr
    assert "tests failed after 3 attempts (last: exit 3: boom); file restored" in r.stderr


WORDS, AFTER = "The cause.\n\n", "After."


@pytest.fixture(scope="module")
def explaining(tmp_path_factory):
    """A tiny model that, asked to explain first, answers the words, the renamed file in a
    code block, then more words (at the start of its turn; after a fence opener, the file)."""
    from adapld_cli.model import load
    from tests.conftest import FENCE_CLOSE, FENCE_OPEN, LINES, piece_tokenizer, successor_model

    tok = piece_tokenizer([*LINES.values(), *FENCE_OPEN, FENCE_CLOSE, WORDS, AFTER])
    vocab = tok.get_vocab()
    file = [vocab[LINES[k]] for k in ("new1", "body", "main", "new4")] + [vocab[FENCE_CLOSE]]
    chain = [vocab["\u010a"], vocab[WORDS], vocab["```python\n"], *file, vocab[AFTER]]
    following = dict(zip(chain, [*chain[1:], tok.eos_token_id], strict=True))
    folder = tmp_path_factory.mktemp("explaining")
    successor_model(tok, following).save_pretrained(folder)
    tok.save_pretrained(folder)
    return load(str(folder), device="cpu", dtype="float32")


def fix_attempt(local, src):
    """The fix request after a first answer the tests fail, as the attempt loop makes it."""
    first = prepare(local, src, "rename foo to bar")
    result = judged(local, first)
    refuse_failing(result, FAILED)
    retry = next_attempt(local, first, result)
    assert retry.conversation.explain
    return retry


def test_an_explaining_answer_ends_at_the_fence_that_closes_the_file(explaining, src, texts):
    local = LocalModel(explaining, EditOptions(attempts=3))
    retry = fix_attempt(local, src)
    assert retry.config.stop_block == "```"
    answer = generate(local, retry)
    assert answer.stop_reason == "stop_string" and AFTER not in local.tokenizer.decode(
        answer.tokens
    )  # the words after the file are never generated
    assert judge(retry, answer).new_text == texts.renamed
