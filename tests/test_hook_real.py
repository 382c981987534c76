"""adapld as a pre-commit hook with the embedded model (slow: run with ``pytest -m real``).

The README's local hook config as written, a real 15-line file: the hook rewrites the
file, pre-commit blocks the commit, the result is the asked-for rename; after `git add`
the second commit passes (the model leaves the renamed file unchanged).
"""

from __future__ import annotations

import ast

import pytest

from tests.test_hook import Repo, hook_output, make_hook_env, readme_hook_config

pytestmark = pytest.mark.real

SHAPES = """import math


def area(radius):
    return math.pi * radius ** 2


def circumference(radius):
    return 2 * math.pi * radius


def describe(radius):
    return f"r={radius}: area {area(radius):.2f}, circumference {circumference(radius):.2f}"
"""


def test_hook_with_embedded_model(tmp_path):
    config = readme_hook_config()
    config["repos"][0]["hooks"][0]["args"] = [
        "-i",
        "Rename the function area to circle_area and update its call.",
    ]
    repo = Repo(tmp_path / "repo", make_hook_env(tmp_path), config)
    shapes = repo.write("shapes.py", SHAPES)
    repo.git("add", "-A")

    proc = repo.commit()
    assert proc.returncode == 1, proc.out
    assert "files were modified by this hook" in proc.out
    assert repo.head() is None
    text = shapes.read_text()
    ast.parse(text)
    assert "def circle_area(radius):" in text and "def area(" not in text
    assert "circle_area(radius):.2f" in text
    assert "def circumference(radius):" in text
    assert "shapes.py: edited — renamed area -> circle_area" in hook_output(proc.out)

    # second commit: the same instruction on the renamed file changes nothing; commit passes
    repo.git("add", "shapes.py")
    again = repo.commit()
    assert again.returncode == 0, again.out
    assert repo.head() is not None
    assert shapes.read_text() == text
