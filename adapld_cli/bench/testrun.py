"""Run a task's test script (CanItEdit style) against an edited file.

Contract: :func:`run` writes ``code + "\\n\\n" + tests`` to a temporary file and runs it with
this Python in a subprocess (working directory = a fresh temporary folder, stdin closed) with
a timeout: a :class:`~adapld_cli.edit.testcmd.TestRun` (exit 0 passes; its output bounded as
``adapld edit --test`` bounds it, for test feedback). :func:`passes` is whether it passed.
Results are cached per (code, tests), so identical outputs of several methods run once.
"""

from __future__ import annotations

import hashlib
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
    output = output.replace(str(script), "test.py")
    result = TestRun(COMMAND, code_, time.perf_counter() - started, bounded_output(output), timeout)
    _cache[key] = result
    return result
