"""`adapld demo` on scripted tiny models: measured comparison, sample never modified."""

from __future__ import annotations

import hashlib
import importlib.resources

import pytest
from typer.testing import CliRunner

from adapld_cli.cli.app import app
from tests.scripted import build_models

SAMPLE = importlib.resources.files("adapld_cli.data") / "inventory.py"


@pytest.fixture(scope="module")
def demo_models(tmp_path_factory):
    """``renamed``: the demo's edit done right; the conftest models answer another file."""
    text = SAMPLE.read_text()
    answers = {"renamed": text.replace("def total_value", "def value").replace(
        "total_value()", "value()")}  # fmt: skip
    return build_models(tmp_path_factory.mktemp("demo-models"), answers, extra=(text,))


def test_demo_compare(demo_models):
    digest = hashlib.sha256(SAMPLE.read_bytes()).hexdigest()
    r = CliRunner().invoke(
        app, ["demo", "--compare", "--no-live", "--model", str(demo_models["renamed"])]
    )
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("--- a/inventory.py\n+++ b/inventory.py\n")
    assert "-    def total_value(self) -> float:\n+    def value(self) -> float:\n" in r.stdout
    assert "inventory.py: changed — renamed Item.total_value -> Item.value" in r.stderr
    assert "measured" in r.stderr and "same output: yes" in r.stderr
    assert hashlib.sha256(SAMPLE.read_bytes()).hexdigest() == digest


def test_demo_refuses_an_answer_that_loses_code(tiny_models):
    """The conftest "rename" model answers a 6-line file: the scope guard refuses it."""
    r = CliRunner().invoke(app, ["demo", "--no-live", "--model", str(tiny_models["rename"])])
    assert r.exit_code == 1
    assert "inventory.py: refused — would delete Item, Inventory" in r.stderr
    assert r.stdout == ""


def test_demo_rejects_ar_method(tiny_models):
    r = CliRunner().invoke(app, ["demo", "--method", "ar", "--model", str(tiny_models["same"])])
    assert r.exit_code == 2 and "--method" in r.stderr
