"""``adapld edit --test CMD``: the user's tests judge each written result; a result they fail
is put back byte for byte and repaired with their output. Real shell commands, the real
journal, the scripted tiny models (whose answer does not depend on the conversation)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from adapld_cli.cli.app import app
from adapld_cli.edit.testcmd import TAIL_LINES, run_tests

HAS_BAR = "grep -q 'def bar' calc.py"  # the scripted rename makes this pass


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a killed child not yet reaped is a zombie: dead)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def edit(tiny_models, source_file, monkeypatch):
    """``edit(*args, model="rename")``: `adapld edit calc.py -i rename ...` in calc.py's folder."""
    monkeypatch.chdir(source_file.parent)

    def run(*args, model="rename"):
        argv = ["edit", "calc.py", "-i", "rename foo to bar", "--no-live"]
        argv += ["--model", str(tiny_models[model]), *map(str, args)]
        return CliRunner().invoke(app, argv, catch_exceptions=False)

    return run


def test_a_result_the_tests_pass_is_kept(edit, source_file, texts, tmp_path):
    stats = tmp_path / "stats.jsonl"
    r = edit("--test", HAS_BAR, "--stats-json", stats)
    assert r.exit_code == 0, r.stderr
    assert source_file.read_text() == texts.renamed
    assert "the tests fail before the edit (exit 1: no output)" in r.stderr
    assert "tests passed (they failed before the edit)" in r.stderr
    row = json.loads(stats.read_text())
    assert row["tests"]["baseline"]["exit_code"] == 1 and row["tests"]["after"]["exit_code"] == 0
    assert row["attempts"] == 1


def test_tests_that_always_fail_leave_the_original_byte_for_byte(edit, source_file):
    source_file.write_bytes(b"\xef\xbb\xbf" + source_file.read_bytes().replace(b"\n", b"\r\n"))
    source_file.chmod(0o640)
    original = source_file.read_bytes()
    r = edit("--test", "echo boom; exit 3")
    assert r.exit_code == 1
    assert source_file.read_bytes() == original and source_file.stat().st_mode & 0o777 == 0o640
    assert "tests failed after 2 attempts (last: exit 3: boom); file restored" in r.stderr
    undo = CliRunner().invoke(app, ["undo"], catch_exceptions=False)
    assert undo.exit_code == 2  # nothing this run wrote is left to undo


def test_tests_that_fail_then_pass_keep_the_repair(edit, source_file, texts, tmp_path):
    count = tmp_path / "count"
    # baseline: pass; after attempt 1: fail; after attempt 2: pass
    cmd = f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count}; [ $n -ne 1 ]"
    stats = tmp_path / "stats.jsonl"
    r = edit("--test", cmd, "--stats-json", stats, "-v")
    assert r.exit_code == 0, r.stderr
    assert source_file.read_text() == texts.renamed
    assert "attempt 1 refused: the tests fail (exit 1: no output)." in r.stderr
    assert json.loads(stats.read_text())["attempts"] == 2
    assert count.read_text().strip() == "3"


def test_an_unchanged_answer_to_failing_tests_is_asked_again_with_their_output(
    edit, source_file, tmp_path
):
    """The tests fail before the edit and the model changes nothing: the answer fails them
    as the file did, so the next attempt hears their output (not only "unchanged"); in the
    end the line says so, exit 1, the file untouched. Passing tests leave it unchanged, 0."""
    original = source_file.read_bytes()
    runs = tmp_path / "runs"
    r = edit("--test", f"echo run >> {runs}; echo boom; exit 3", "-v", model="same")
    assert r.exit_code == 1 and source_file.read_bytes() == original
    assert "attempt 1 refused: the tests fail (exit 3: boom)." in r.stderr
    assert "tests failed after 2 attempts (last: exit 3: boom); the file is as it was" in r.stderr
    assert runs.read_text().count("run") == 1  # the baseline: nothing else changed the file
    r = edit("--test", "true", model="same")
    assert r.exit_code == 0 and source_file.read_bytes() == original
    assert "calc.py: unchanged" in r.stderr
    r = edit("--test", "exit 1", "--keep-failing", model="same")
    assert r.exit_code == 0 and source_file.read_bytes() == original
    assert "--keep-failing: left unchanged although the tests fail (exit 1" in r.stderr


def test_keep_failing_writes_the_last_result_with_a_warning(edit, source_file, texts):
    r = edit("--test", "exit 1", "--keep-failing", "--attempts", "1")
    assert r.exit_code == 0, r.stderr
    assert source_file.read_text() == texts.renamed
    assert "--keep-failing: written although the tests fail (exit 1: no output)" in r.stderr


def test_a_hanging_command_is_killed_with_its_children(edit, source_file, tmp_path):
    original = source_file.read_bytes()
    pids = tmp_path / "pids"
    cmd = f"sleep 60 & echo $! >> {pids}; wait"
    r = edit("--test", cmd, "--test-timeout", "1", "--attempts", "1")
    assert r.exit_code == 1 and source_file.read_bytes() == original
    assert "tests failed after 1 attempt (last: timed out after 1s); file restored" in r.stderr
    for pid in map(int, pids.read_text().split()):  # the baseline's and the edit's
        assert not _running(pid)


def test_ctrl_c_during_the_tests_puts_the_file_back(tiny_models, source_file, tmp_path):
    original = source_file.read_bytes()
    started = tmp_path / "started"
    cmd = f"{HAS_BAR} && touch {started} && sleep 60"  # the baseline fails at once
    argv = [sys.executable, "-m", "adapld_cli", "edit", "calc.py", "-i", "rename foo to bar"]
    argv += ["--model", str(tiny_models["rename"]), "--no-live", "--test", cmd]
    proc = subprocess.Popen(argv, cwd=source_file.parent, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), proc.stderr.read() if proc.poll() is not None else "no start"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert source_file.read_bytes() == original
    assert "calc.py: interrupted" in err


def test_a_result_refused_by_a_check_is_never_written_nor_tested(edit, source_file, tmp_path):
    original = source_file.read_bytes()
    runs = tmp_path / "runs"
    r = edit("--test", f"echo run >> {runs}", model="broken")
    assert r.exit_code == 1 and source_file.read_bytes() == original
    assert "does not parse" in r.stderr
    assert runs.read_text().count("run") == 1  # the baseline only


@pytest.mark.parametrize("mode", ["--diff", "--check", "--stdout"])
def test_test_needs_a_written_result(edit, source_file, mode):
    original = source_file.read_bytes()
    r = edit("--test", "true", mode)
    assert r.exit_code == 2 and source_file.read_bytes() == original
    assert r.stderr.strip().count("\n") == 0 and "--test needs the result written" in r.stderr


def test_keep_failing_needs_test(edit):
    r = edit("--keep-failing")
    assert r.exit_code == 2 and "--keep-failing needs --test CMD" in r.stderr


def test_pytest_output_puts_the_failure_first():
    lines = [f"noise {i}" for i in range(200)]
    report = "\n".join(
        ["=== test session starts ===", *lines, "=================== FAILURES ===================",
         "___ test_remove ___", "E   AssertionError: KeyError raised", *lines,
         "=========== short test summary info ===========",
         "FAILED test_inv.py::test_remove - AssertionError", "=== 1 failed in 0.1s ==="]
    )  # fmt: skip
    run = run_tests(f"cat <<'EOF'\n{report}\nEOF\nexit 1")
    assert not run.passed and run.exit_code == 1
    assert "E   AssertionError: KeyError raised" in run.output
    assert "FAILED test_inv.py::test_remove - AssertionError" in run.output
    assert len(run.output.splitlines()) <= TAIL_LINES + 1
    assert run.summary() == "exit 1: FAILED test_inv.py::test_remove - AssertionError"


def test_the_same_failure_is_told_in_the_same_words():
    """What changes between two runs of one failure (object addresses, pytest's timing) is
    dropped, so that a greedy repair of it does not change with them."""
    from adapld_cli.edit.testcmd import bounded_output

    def told(address: str, seconds: str) -> str:
        return bounded_output(
            "E    +  where 17 = <function vowel_count at 0x" + address + ">('ab')\n"
            "FAILED t.py::test_a - assert 17 == 15\n"
            f"========= 1 failed, 2 passed in {seconds}s =========\n1 error in {seconds}s"
        )

    first = told("7f6228e13d80", "0.52")
    assert first == told("7fa8b9ee7d80", "12.01")
    assert "<function vowel_count>('ab')" in first and "1 failed, 2 passed =" in first
    assert first.endswith("\n1 error") and "assert 17 == 15" in first
