"""One file's edit (LocalModel, judge, the attempt loop through ``edit_file``) on the scripted
tiny models, through the real model layer and engine."""

from __future__ import annotations

import pytest

from adapld_cli.edit import EditOptions, InputError, LocalModel, decode_source, prepare
from adapld_cli.edit.run import edit_file
from adapld_cli.engine.types import StepEvent


@pytest.fixture
def src(texts):
    def make(text: str | None = None, name: str = "calc.py"):
        return decode_source((texts.source if text is None else text).encode(), name)

    return make


@pytest.mark.parametrize("method", ["ar", "pld", "adapld"])
def test_rename_is_the_same_for_every_method(loaded, src, texts, method):
    events: list[StepEvent] = []
    local = LocalModel(loaded("rename"), EditOptions(method=method))
    result = edit_file(local, src(), "rename foo to bar", on_event=events.append)
    assert result.status == "changed" and result.exit_code == 0
    assert result.new_text == texts.renamed
    assert result.stop_reason == "stop_string"
    assert [t for e in events for t in e.tokens] == result.tokens
    assert events[-1].finished
    assert result.stats.method == method
    assert result.changes.describe() == "renamed foo -> bar; changed main"


def test_prompt_ends_with_the_opened_fence(loaded, src):
    lm = loaded("rename")
    prepared = prepare(LocalModel(lm), src(), "rename foo to bar")
    assert prepared.prompt.ids[-1] == lm.tokenizer.convert_tokens_to_ids("```python\n")
    assert prepared.config.stop_strings == ("\n```",)
    assert lm.tokenizer.eos_token_id in prepared.config.stop_token_ids


def test_unchanged(loaded, src, texts):
    result = edit_file(LocalModel(loaded("same")), src(), "do nothing")
    assert result.status == "unchanged" and result.new_text == texts.source


def test_syntax_break_is_refused_unless_forced(loaded, src, texts):
    result = edit_file(LocalModel(loaded("broken")), src(), "rename")
    assert result.status == "refused" and result.exit_code == 1
    assert "does not parse (line 1" in result.message
    forced = edit_file(LocalModel(loaded("broken"), EditOptions(force=True)), src(), "rename")
    assert forced.status == "changed" and forced.new_text == texts.broken
    assert forced.syntax_error is not None and forced.syntax_error.line == 1


def test_a_rename_not_made_is_refused_and_asked_again_unless_forced(loaded, src, texts):
    # the scripted model renames foo to bar whatever it is asked
    result = edit_file(LocalModel(loaded("rename")), src(), "rename foo to baz")
    assert result.status == "refused" and result.exit_code == 1 and result.attempts == 2
    assert result.message == (
        "the result does not make the rename: `baz` appears nowhere; nothing written "
        "(--force writes it anyway)"
    )
    assert result.feedback.startswith("The file you returned does not make the rename")
    forced = edit_file(
        LocalModel(loaded("rename"), EditOptions(force=True)), src(), "rename foo to baz"
    )
    assert forced.status == "changed" and forced.new_text == texts.renamed
    assert forced.lost == "does not make the rename: `baz` appears nowhere"


def test_broken_input_is_not_held_to_the_check(loaded, src, texts):
    bad_input = texts.source.replace("def main():", "def main(:")
    result = edit_file(LocalModel(loaded("broken")), src(bad_input), "rename")
    assert result.status == "changed"


def test_truncation_is_refused(loaded, src):
    result = edit_file(LocalModel(loaded("loop"), EditOptions(max_new_tokens=9)), src(), "rename")
    assert result.status == "refused" and result.stop_reason == "max_new_tokens"
    assert "token limit (9)" in result.message


def test_crlf_bom_and_missing_final_newline_survive(loaded, texts):
    raw = b"\xef\xbb\xbf" + texts.source.rstrip("\n").replace("\n", "\r\n").encode()
    source = decode_source(raw, "calc.py")
    result = edit_file(LocalModel(loaded("rename")), source, "rename")
    expected = b"\xef\xbb\xbf" + texts.renamed.rstrip("\n").replace("\n", "\r\n").encode()
    assert result.new_bytes == expected


def test_input_errors_before_generation(loaded, src):
    with pytest.raises(InputError, match="empty instruction"):
        edit_file(LocalModel(loaded("rename")), src(), "   ")
    with pytest.raises(InputError, match="too long for the model's context"):
        edit_file(LocalModel(loaded("small-context")), src(), "rename")
    with pytest.raises(InputError, match="unknown method"):
        LocalModel(loaded("rename"), EditOptions(method="fast"))


def test_interrupt_propagates(loaded, src):
    def stop(_event):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        edit_file(
            LocalModel(loaded("loop"), EditOptions(max_new_tokens=50)), src(), "x", on_event=stop
        )
