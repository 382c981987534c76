"""The edit cases with checks (``adapld_cli/bench/edit_cases.jsonl``), without a model.

Each case's ``tests`` script must pass on the hand-written reference ``after`` and fail on the
unedited ``before``: a check that passes on ``before`` would not notice a model that copies the
file back. The scripts run exactly as ``adapld bench --run-tests`` runs them (code, a blank line,
the script; a subprocess in a fresh folder). The real-model run of these cases is
``tests/test_edit_cases_real.py``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from adapld_cli.bench import testrun
from adapld_cli.bench.tasks import builtin_tasks_path, load_tasks

CASES_PATH = builtin_tasks_path().with_name("edit_cases.jsonl")
KINDS = {
    "rename function",
    "rename method",
    "add docstrings",
    "change constant",
    "add parameter",
    "print to logging",
}


def load_cases() -> list[dict]:
    """The cases as stored (every field, including ``source``, ``kind`` and ``tokens``)."""
    lines = CASES_PATH.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


CASES = load_cases()
IDS = [case["full_name"] for case in CASES]

# Half-done edits the checks must also reject: (text in the reference edit, what replaces it).
HALF_DONE = {
    "rename_function_bisect": ("lo = bisect_upper(a, x, lo", "lo = bisect_right(a, x, lo"),
    "rename_method_sched": ("return self.enter_at(", "return self.enterabs("),
    "add_docstrings_colorsys": ('"""Return one RGB', "# Return one RGB"),
    "change_constant_base64": ("MAXBINSIZE = (MAXLINESIZE//4)*3", "MAXBINSIZE = 57"),
    "add_parameter_humanize": ("precision: int = 1", "precision: int = 2"),
    "print_to_logging_prune": ('logger.info(f"removed {path}', 'print(f"removed {path}'),
}


def run_checks(code: str, tests: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run ``tests`` appended to ``code`` as ``adapld_cli.bench.testrun.passes`` does, but keep
    the output for the failure message."""
    with tempfile.TemporaryDirectory(prefix="adapld-edit-case-") as tmp:
        script = Path(tmp) / "edited_with_tests.py"
        script.write_text(f"{code}\n\n{tests}\n", encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        return subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )


def test_one_case_per_kind():
    assert {case["kind"] for case in CASES} == KINDS
    assert len(IDS) == len(set(IDS)) == len(KINDS)


def test_the_bench_loads_them():
    """``adapld bench --tasks adapld_cli/bench/edit_cases.jsonl --run-tests`` reads the same
    file through ``load_tasks``: every task has its reference and its checks."""
    for kind in ("descriptive", "lazy"):
        tasks = load_tasks(CASES_PATH, instruction=kind)
        assert [t.name for t in tasks] == IDS
        for task, case in zip(tasks, CASES, strict=True):
            assert task.instruction == case[f"instruction_{kind}"].strip()
            assert task.after == case["after"] and task.tests == case["tests"]
            assert task.filename.endswith(".py")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_is_well_formed(case):
    assert case["source"].strip() and case["license"].strip()
    assert case["instruction_descriptive"].strip() and case["instruction_lazy"].strip()
    assert case["tests"].startswith("### START TESTS ###\n")
    for field in ("before", "after"):
        ast.parse(case[field], filename=f"{case['full_name']}.{field}.py")
        assert case[field].endswith("\n")
    assert case["before"] != case["after"]
    # Real-world sized: 60-150 lines (the stored Qwen2.5 token count is 450-1,000).
    assert 60 <= len(case["before"].splitlines()) <= 150
    assert 450 <= case["tokens"] <= 1000


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_checks_pass_on_the_reference_edit(case):
    proc = run_checks(case["after"], case["tests"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert testrun.passes(case["after"], case["tests"])  # as the bench sees it


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_checks_fail_on_the_unedited_file(case):
    proc = run_checks(case["before"], case["tests"])
    assert proc.returncode != 0
    # failed on a check (an assertion, or a TypeError for the new parameter), not on the script
    error = proc.stderr.strip().splitlines()[-1].split(":")[0]
    assert error in ("AssertionError", "TypeError"), proc.stderr[-3000:]
    assert not testrun.passes(case["before"], case["tests"])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_checks_fail_on_a_half_done_edit(case):
    old, new = HALF_DONE[case["name"]]
    assert case["after"].count(old) == 1
    half = case["after"].replace(old, new)
    ast.parse(half)
    assert run_checks(half, case["tests"]).returncode != 0


def test_bench_runs_them_with_tests(tiny_models):
    """``adapld bench --tasks edit_cases.jsonl --run-tests`` end to end, on a scripted model that
    answers with an unrelated file: every reference passes its checks, no output does."""
    from typer.testing import CliRunner

    from adapld_cli.cli.app import app

    r = CliRunner().invoke(
        app,
        [
            "bench", "--model", str(tiny_models["same"]), "--tasks", str(CASES_PATH),
            "--methods", "ar,adapld", "--run-tests", "--json", "-", "--max-new-tokens", "64",
            "--threads", "1", "--no-warmup", "--quiet",
        ],
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["reference_pass"] == {name: True for name in IDS}
    assert doc["problems"] == []
    for method in ("ar", "adapld"):
        assert doc["methods"][method]["tasks"] == len(IDS)
        assert doc["methods"][method]["pass_at_1"] == 0.0
    assert sorted({row["task"] for row in doc["tasks"]}) == sorted(IDS)
