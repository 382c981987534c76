"""Run a task's test script (CanItEdit style) against an edited file.

Contract: :func:`run` writes ``code + "\\n\\n" + tests`` to a temporary file and runs it with
this Python in a subprocess (working directory = a fresh temporary folder, stdin closed) with
a timeout: a :class:`~adapld_cli.edit.testcmd.TestRun` (exit 0 passes; its output bounded as
``adapld edit --test`` bounds it, for test feedback). :func:`passes` is whether it passed.
Results are cached per (code, tests), so identical outputs of several methods run once.

The verdict is always that run's. A failing script is run once more under pytest, when it
is installed, for its output only: pytest rewrites the script's asserts, so a failing one
says what it compared (``assert 'AUGAUC' == 'AUGAUCU'``, ``where 'AUGAUC' =
transcribe('TACTAGA')``) where plain Python says ``AssertionError``: the feedback a user's
own ``pytest`` run gives ``adapld edit --test``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adapld_cli.edit.testcmd import TestRun

COMMAND = "the task's tests"  # how test feedback names them to the model
_cache: dict[str, TestRun] = {}


def passes(code: str, tests: str, timeout: float = 30.0) -> bool:
    return run(code, tests, timeout).passed


def run(code: str, tests: str, timeout: float = 30.0) -> TestRun:
    from adapld_cli.edit.testcmd import TestRun, bounded_output

    key = hashlib.sha256(f"{timeout}\0{code}\0{tests}".encode()).hexdigest()
    if key in _cache:
        return _cache[key]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="adapld-bench-") as tmp:
        script = Path(tmp) / "edited_with_tests.py"
        script.write_text(f"{code}\n\n{tests}\n", encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["MPLBACKEND"] = "Agg"
        try:
            proc = subprocess.run(
                [sys.executable, str(script)],
                cwd=tmp,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                env=env,
            )
            code_, output = proc.returncode, proc.stdout.decode("utf-8", errors="replace")
        except subprocess.TimeoutExpired:
            code_, output = None, ""
        if code_:  # failed (not timed out): pytest's account of it, if it fails there too
            output = _explained(script, env, timeout) or output
    output = output.replace(str(script), "test.py")
    result = TestRun(COMMAND, code_, time.perf_counter() - started, bounded_output(output), timeout)
    _cache[key] = result
    return result


def _explained(script: Path, env: dict[str, str], timeout: float) -> str | None:
    """pytest's output for the failing ``script`` (its asserts rewritten to show what they
    compared), or ``None``: pytest missing, timed out, or not failing there."""
    if importlib.util.find_spec("pytest") is None:
        return None
    named = script.with_name("test_task.py")  # a test module's name: its asserts rewritten
    named.write_bytes(script.read_bytes())
    argv = [sys.executable, "-m", "pytest", "-q", "--tb=short", "-p", "no:cacheprovider"]
    try:
        proc = subprocess.run(
            [*argv, named.name],
            cwd=script.parent,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            env={**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        )
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode not in (1, 2):  # 0 or 5: passed there (no test function to fail)
        return None
    return proc.stdout.decode("utf-8", errors="replace").replace(named.name, "test.py")
