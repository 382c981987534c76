"""The edit cases with checks, edited by the default model through the CLI (slow: ``-m real``).

For each case of ``adapld_cli/bench/edit_cases.jsonl`` (rename a function, rename a method, add
docstrings, change a constant, add a parameter, replace print with logging; real-world files of
450-1,000 tokens): ``adapld edit FILE -i INSTRUCTION`` in place on a temporary copy, with the
default model (no ``--model``; ``ADAPLD_MODEL`` is cleared by conftest), one thread,
then the case's checks run against the edited file as ``adapld bench --run-tests`` runs them.
The file name and instruction are the ones the bench uses (``Task.filename``, the descriptive
instruction), so this and ``adapld bench --tasks adapld_cli/bench/edit_cases.jsonl --methods
adapld --run-tests`` measure the same edits.
"""

from __future__ import annotations

import difflib
import json

import pytest
from typer.testing import CliRunner

from adapld_cli.bench.tasks import load_tasks
from adapld_cli.cli.app import app
from tests.test_edit_cases import CASES_PATH, run_checks

pytestmark = [pytest.mark.real, pytest.mark.default_model]

TASKS = load_tasks(CASES_PATH)

# What coder-1.5b (the default) does with these cases, measured with `adapld bench --tasks
# adapld_cli/bench/edit_cases.jsonl --model coder-1.5b --methods adapld --threads 1 --run-tests`
# (README, Performance): it passes 3 of 6. The other three are the model's limits, kept as
# documented failures (not strict: a better model or prompt may pass them).
MODEL_FAILS = {
    "1_rename_function_bisect": "coder-1.5b drops code; the scope guard refuses it (exit 1)",
    "5_add_parameter_humanize": "coder-1.5b: naturalsize(1536, precision=2) is not '1.54 kB'",
    "6_print_to_logging_prune": "coder-1.5b uses `logger` without defining it (NameError)",
}
PARAMS = [
    pytest.param(t, marks=pytest.mark.xfail(reason=MODEL_FAILS[t.name], strict=False))
    if t.name in MODEL_FAILS
    else t
    for t in TASKS
]


def _diff(before: str, after: str, name: str, limit: int = 4000) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), name, name
    )
    text = "".join(lines) or "(unchanged)\n"
    return text if len(text) <= limit else text[:limit] + "\n[... diff cut ...]\n"


@pytest.mark.parametrize("task", PARAMS, ids=[t.name for t in TASKS])
def test_default_model_does_the_edit(task, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    path = tmp_path / task.filename
    path.write_text(task.before, encoding="utf-8")
    stats = tmp_path / "stats.jsonl"
    result = CliRunner().invoke(
        app,
        # one thread, as measured: bfloat16 results may depend on how a sum is split
        ["edit", str(path), "-i", task.instruction, "--no-live", "--threads", "1",
         "--stats-json", str(stats)],
    )  # fmt: skip
    assert result.exit_code == 0, f"adapld edit exited {result.exit_code}:\n{result.stderr}"
    edited = path.read_text(encoding="utf-8")
    info = stats.read_text().splitlines()[0] if stats.exists() else "{}"
    new_tokens = json.loads(info).get("new_tokens")
    proc = run_checks(edited, task.tests or "")
    assert proc.returncode == 0, (
        f"the checks fail on the edited file ({new_tokens} new tokens):\n"
        f"{proc.stderr[-2000:]}\n{_diff(task.before, edited, task.filename)}"
    )
