"""Run a task's test script (CanItEdit style) against an edited file.

Contract: :func:`passes` writes ``code + "\\n\\n" + tests`` to a temporary file and runs it with
this Python in a subprocess (working directory = a fresh temporary folder, stdin closed) with
a timeout; the test passes when the script exits 0. Results are cached per (code, tests), so
identical outputs of several methods run once.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_cache: dict[str, bool] = {}


def passes(code: str, tests: str, timeout: float = 30.0) -> bool:
    key = hashlib.sha256(f"{timeout}\0{code}\0{tests}".encode()).hexdigest()
    if key in _cache:
        return _cache[key]
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
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=timeout,
                env=env,
            )
            ok = proc.returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
    _cache[key] = ok
    return ok
