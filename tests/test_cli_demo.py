"""`adapld demo` on a scripted tiny model: measured comparison, sample never modified."""

from __future__ import annotations

import hashlib
import importlib.resources

from typer.testing import CliRunner

from adapld_cli.cli.app import app


def test_demo_compare(tiny_models):
    sample = importlib.resources.files("adapld_cli.data") / "inventory.py"
    digest = hashlib.sha256(sample.read_bytes()).hexdigest()
    r = CliRunner().invoke(
        app, ["demo", "--compare", "--no-live", "--model", str(tiny_models["rename"])]
    )
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("--- a/inventory.py\n+++ b/inventory.py\n")
    assert "measured" in r.stderr and "same output: yes" in r.stderr
    assert hashlib.sha256(sample.read_bytes()).hexdigest() == digest


def test_demo_rejects_ar_method(tiny_models):
    r = CliRunner().invoke(app, ["demo", "--method", "ar", "--model", str(tiny_models["same"])])
    assert r.exit_code == 2 and "--method" in r.stderr
