"""Formats without a grammar: JSON, JSON Lines, TOML, YAML; notebooks refused up front."""

from __future__ import annotations

import pytest

from adapld_cli.edit.formats import check_format, first_format_error, format_for, precheck
from adapld_cli.edit.guard import check_scope
from adapld_cli.edit.syntax import SyntaxIssue

CONFIG = '{\n  "host": "localhost",\n  "port": 8080,\n  "debug": false\n}\n'
# What the model wrote for "add a comment explaining each key": no longer JSON.
COMMENTED = (
    '{\n  // where the server listens\n  "host": "localhost",\n  "port": 8080,\n'
    '  "debug": false\n}\n'
)


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("config.json", "json"), ("a/B.JSON", "json"), ("log.jsonl", "jsonl"),
        ("x.ndjson", "jsonl"), ("pyproject.toml", "toml"), ("Pipfile", "toml"),
        ("Cargo.lock", "toml"), ("ci.yml", "yaml"), ("k8s.yaml", "yaml"),
        ("nb.ipynb", "notebook"), ("config", None), ("a.py", None), (None, None),
    ],
)  # fmt: skip
def test_format_for(name, fmt):
    assert format_for(name) == fmt


def test_json_comment_is_refused_like_a_syntax_error():
    issue = check_format(CONFIG, COMMENTED, "config.json")
    assert isinstance(issue, SyntaxIssue)
    assert issue.line == 2 and str(issue).startswith("line 2: invalid JSON: ")
    assert check_format(CONFIG, CONFIG.replace("8080", "9090"), "config.json") is None


def test_input_that_does_not_parse_is_not_checked():
    jsonc = "// settings\n" + CONFIG
    assert check_format(jsonc, jsonc + "oops", "tsconfig.json") is None


def test_files_without_a_format_are_not_checked():
    assert check_format(CONFIG, COMMENTED, "config") is None
    assert check_format("x = 1\n", "x = (\n", "a.py") is None  # tree-sitter's job


def test_toml():
    before = '[tool]\nname = "x"\nvalues = [1, 2]\n'
    assert check_format(before, before + "extra = 3\n", "pyproject.toml") is None
    issue = check_format(before, before.replace("[1, 2]", "[1, 2"), "pyproject.toml")
    assert issue is not None and issue.message.startswith("invalid TOML")
    assert issue.line >= 3


def test_yaml():
    before = "name: ci\non: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n"
    assert check_format(before, before.replace("ci", "build"), "ci.yml") is None
    issue = check_format(before, before.replace("[push]", "[push"), "ci.yml")
    assert issue is not None and issue.message.startswith("invalid YAML")
    tagged = "Resources:\n  Bucket: !Ref Name\n---\nsecond: doc\n"  # custom tags, two docs
    assert first_format_error(tagged, "yaml") is None


def test_json_lines():
    before = '{"a": 1}\n\n{"b": 2}\n'
    issue = check_format(before, '{"a": 1}\n{"b": 2\n', "x.jsonl")
    assert issue is not None and issue.line == 2 and "JSON line" in issue.message


def test_notebook_is_refused_before_the_model_loads():
    reason = precheck("work/analysis.ipynb")
    assert reason is not None and "\n" not in reason
    assert reason.startswith("analysis.ipynb: notebooks (.ipynb) are not edited")
    assert precheck("analysis.py") is None and precheck("config.json") is None


def test_config_without_extension_still_gets_the_line_rule():
    v = check_scope(CONFIG, "{}\n", language=None, instruction="add a comment to each key")
    assert v.lost and v.message.startswith("would drop 4 of 5 non-blank lines")
