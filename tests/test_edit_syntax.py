"""tree-sitter helpers: languages, syntax errors, outlines and changed definitions."""

from __future__ import annotations

import pytest

from adapld_cli.edit.syntax import (
    changed_definitions,
    enclosing_definition,
    first_syntax_error,
    get_language,
    language_for,
    outline,
)


@pytest.mark.parametrize(
    ("name", "lang"),
    [
        ("a.py", "python"), ("b.JS", "javascript"), ("c.ts", "typescript"), ("d.tsx", "tsx"),
        ("e.go", "go"), ("f.rs", "rust"), ("g.java", "java"), ("h.c", "c"), ("i.hpp", "cpp"),
        ("run.sh", "shell"), ("README", None), (None, None),
    ],
)  # fmt: skip
def test_language_for(name, lang):
    assert language_for(name) == lang


def test_missing_grammar_degrades():
    assert get_language("shell") is None
    assert first_syntax_error("if [ x ]; then", "shell") is None
    assert outline("echo hi", "shell") == []


def test_python_syntax_error_line():
    assert first_syntax_error("def f(a):\n    return a\n", "python") is None
    issue = first_syntax_error("x = 1\n\ndef f(a)\n    return a\n", "python")
    assert issue is not None and issue.line == 3
    assert str(issue).startswith("line 3:")


@pytest.mark.parametrize(
    ("lang", "code", "names"),
    [
        ("python", "class A:\n    def m(self):\n        pass\n\ndef f():\n    pass\n",
         ["A", "A.m", "f"]),
        ("javascript", "function g() {}\nconst h = () => 1;\nclass C { m() {} }\n",
         ["g", "h", "C", "C.m"]),
        ("typescript", "interface I { x: number }\nfunction f(a: number): number { return a; }\n",
         ["I", "f"]),
        ("tsx", "const View = () => <div/>;\n", ["View"]),
        ("go", "package m\n\nfunc F() {}\n\ntype T struct{}\n\nfunc (t T) M() {}\n",
         ["F", "T", "M"]),
        ("rust", "struct S;\nimpl S { fn f(&self) {} }\nfn main() {}\n",
         ["S", "impl S", "impl S.f", "main"]),
        ("java", "class A { A() {} void f() {} }\n", ["A", "A.A", "A.f"]),
        ("c", "struct P { int x; };\nint main(void) { return 0; }\n", ["P", "main"]),
        ("cpp", "namespace n { class K { int f() { return 1; } }; }\n", ["n", "n.K", "n.K.f"]),
    ],
)  # fmt: skip
def test_outline_per_language(lang, code, names):
    # every grammar is a required dependency (pyproject.toml): a missing one is a failure
    assert get_language(lang) is not None, f"no {lang} grammar installed"
    assert first_syntax_error(code, lang) is None
    assert [d.name for d in outline(code, lang)] == names


def test_changed_definitions_rename_and_change():
    before = "def foo(a):\n    return a\n\n\nclass K:\n    def m(self):\n        return foo(1)\n"
    after = "def bar(a):\n    return a\n\n\nclass K:\n    def m(self):\n        return bar(1)\n"
    changes = changed_definitions(before, after, "python")
    assert changes.renamed == [("foo", "bar")]
    assert changes.changed == ["K.m"]  # the class itself is not repeated
    assert changes.describe() == "renamed foo -> bar; changed K.m"


def test_changed_definitions_added_removed():
    changes = changed_definitions("def a():\n    pass\n", "def b():\n    return 1\n", "python")
    assert changes.added == ["b"] and changes.removed == ["a"]
    assert not changed_definitions("x = 1\n", "x = 1\n", "python")


def test_enclosing_definition():
    code = "class A:\n    def m(self):\n        x = 1\n        return x\n"
    defs = outline(code, "python")
    assert enclosing_definition(defs, 3).name == "A.m"
    assert enclosing_definition(defs, 1).name == "A"


def test_python_compile_errors_tree_sitter_accepts() -> None:
    """A ``from __future__`` import below other code parses for tree-sitter, not for CPython
    (a real 0.5B edit put ``import logging`` first)."""
    bad = "import logging\nfrom __future__ import annotations\n\nx = 1\n"
    issue = first_syntax_error(bad, "python")
    assert issue is not None and issue.line == 2 and "__future__" in issue.message
    assert (
        first_syntax_error("from __future__ import annotations\nimport logging\n", "python") is None
    )
