"""edit/diff.py: the patch applies with the real git, and a hunk header names the definition
around the hunk's first changed line (real tree-sitter grammar)."""

from __future__ import annotations

import subprocess

import pytest

from adapld_cli.edit.diff import unified_diff

SOURCE = """def a():
    x = 1
    return x
def b():
    return 2
"""


def headers(patch: str) -> list[str]:
    return [line for line in patch.splitlines() if line.startswith("@@")]


def test_the_header_names_the_definition_of_the_first_change_not_of_the_context_end():
    # the hunk starts at line 1, so 3 lines of leading context do not precede the change:
    # its first changed line (2) is in a, while line 1 + 3 is in b
    patch = unified_diff(SOURCE, SOURCE.replace("x = 1", "x = 10"), "m.py", "python")
    assert headers(patch) == ["@@ -1,5 +1,5 @@ def a():"]


def test_the_header_of_a_change_deep_in_a_function_and_of_an_insertion():
    body = "".join(f"    v{i} = {i}\n" for i in range(12))
    method = body.replace("    ", "        ")
    before = f"import os\n\n\ndef f():\n{body}    return 0\n\n\n"
    before += f"class C:\n    def m(self):\n{method}"
    after = before.replace("    v8 = 8\n", "    v8 = 80\n", 1).replace(
        "class C:\n    def m(self):\n", "class C:\n    def m(self):\n        new = 1\n"
    )
    assert headers(unified_diff(before, after, "m.py", "python")) == [
        "@@ -10,7 +10,7 @@ def f():",
        "@@ -19,6 +19,7 @@ def m(self):",
    ]
    plain = ["@@ -10,7 +10,7 @@", "@@ -19,6 +19,7 @@"]  # no language: no names
    assert headers(unified_diff(before, after, "m.py")) == plain


@pytest.mark.parametrize("tail", ["\n", ""], ids=["newline", "no-newline"])
def test_the_patch_applies_with_git(tmp_path, tail):
    before = SOURCE + "def c():\n    return 3" + tail
    after = before.replace("return 2", "return 20").replace("return 3", "return 30")
    (tmp_path / "m.py").write_text(before)
    patch = unified_diff(before, after, "m.py", "python")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply", "-"], cwd=tmp_path, input=patch.encode(), check=True)
    assert (tmp_path / "m.py").read_text() == after
    assert unified_diff(before, before, "m.py", "python") == ""
