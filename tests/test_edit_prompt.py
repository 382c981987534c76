"""Prompt templates, rendering through a chat template, and extraction of the answer."""

from __future__ import annotations

import pytest

from adapld_cli.edit import InputError, available_templates, load_template
from adapld_cli.edit.prompt import build_prompt, extract_file, fence_for, parse_template


def test_bundled_templates_parse():
    names = available_templates()
    assert {"default", "minimal", "strict"} <= set(names)
    for name in names:
        t = load_template(name)
        assert "{source}" in t.user
    assert load_template(None).name == "default"


def test_template_file_and_errors(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text("# comment\n[user]\nFix: {instruction}\n{source}\n[assistant]\nSure.\n")
    t = load_template(str(path))
    assert t.system is None and t.assistant_prefix == "Sure.\n"
    with pytest.raises(InputError, match="no such template"):
        load_template("nope")
    with pytest.raises(InputError, match=r"\{source\}"):
        parse_template("[user]\nno source here\n")
    with pytest.raises(InputError, match=r"\[user\]"):
        parse_template("[system]\nonly system\n")


def test_fence_is_longer_than_backticks_in_file():
    assert fence_for("x = 1\n") == "```"
    assert fence_for('doc = """\n```py\nx\n```\n"""\n') == "````"


def test_render_order_and_opened_fence(tiny_tokenizer):
    code = "print('{instruction}')\n"
    p = build_prompt(
        load_template("default"),
        tiny_tokenizer,
        code=code,
        instruction="rename it",
        filename="a.py",
        lang="python",
    )
    assert p.text.endswith("<|im_start|>assistant\n```python\n")
    assert p.text.index(code) < p.text.index("rename it")  # file first, then instruction
    assert "print('{instruction}')" in p.text  # placeholders inside the file are left alone
    assert p.stop_string == "\n```"
    assert p.ids[-1] == tiny_tokenizer.convert_tokens_to_ids("```python\n")


def test_prompt_names_the_file_the_same_however_its_path_is_spelled(
    tiny_tokenizer, tmp_path, monkeypatch
):
    """The same file gets the same prompt (so the same greedy output) however its path is
    spelled; a file outside the working directory (a test's temporary copy) by its base name."""

    def text(name: str) -> str:
        return build_prompt(
            load_template("default"), tiny_tokenizer, code="x = 1\n", instruction="i",
            filename=name, lang="python",
        ).text  # fmt: skip

    monkeypatch.chdir(tmp_path)
    assert text("app.py") == text("./app.py") == text(str(tmp_path / "app.py"))
    assert text("src/app.py") == text(f"{tmp_path}/src/../src/app.py")
    assert "`src/app.py`" in text("src/app.py")
    assert "`app.py`" in text("/elsewhere/pytest-of-me/pytest-7/t0/app.py")
    assert "`<stdin>`" in text("<stdin>")


@pytest.mark.parametrize(
    ("generated", "trailing", "expected", "closed"),
    [
        ("a\nb\n```", True, "a\nb\n", True),
        ("a\nb\n```", False, "a\nb", True),
        ("a\nb\n```\nmore chatter", True, "a\nb\n", True),
        ("```", True, "", True),
        ("a\nb", True, "a\nb\n", False),
        ("a\nb\n", True, "a\nb\n", False),
    ],
)
def test_extract_file(generated, trailing, expected, closed):
    assert extract_file(generated, "```", trailing_newline=trailing) == (expected, closed)
