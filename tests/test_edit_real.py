"""End-to-end edits on the embedded model (slow: run with ``pytest -m real``)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from adapld_cli.cli.app import app

pytestmark = pytest.mark.real

SHAPES = """import math


def area(radius):
    return math.pi * radius ** 2


def circumference(radius):
    return 2 * math.pi * radius


def describe(radius):
    return f"r={radius}: area {area(radius):.2f}, circumference {circumference(radius):.2f}"
"""
INSTRUCTION = "Rename the function area to circle_area and update its call."


def _edit(tmp_path, method: str) -> tuple[bytes, dict]:
    folder = tmp_path / method
    folder.mkdir()
    path = folder / "shapes.py"
    path.write_text(SHAPES)
    stats = folder / "stats.jsonl"
    result = CliRunner().invoke(
        app,
        ["edit", str(path), "-i", INSTRUCTION, "--method", method, "--no-live",
         "--dtype", "float32", "--stats-json", str(stats)],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    return path.read_bytes(), json.loads(stats.read_text().splitlines()[0])


def test_rename_same_bytes_with_ar_and_adapld(tmp_path):
    ar_bytes, ar_stats = _edit(tmp_path, "ar")
    ad_bytes, ad_stats = _edit(tmp_path, "adapld")
    assert ad_bytes == ar_bytes
    text = ad_bytes.decode()
    assert "def circle_area(radius):" in text and "def area(" not in text
    assert "circle_area(radius):.2f" in text
    assert ar_stats["forward_passes"] == ar_stats["new_tokens"]
    assert ad_stats["new_tokens"] == ar_stats["new_tokens"]
    assert ad_stats["forward_passes"] < ad_stats["new_tokens"]
    assert ad_stats["mean_accepted"] > 1.5
