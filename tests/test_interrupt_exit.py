"""Once a run's outcome is decided, a late SIGINT/SIGTERM neither kills the `adapld` process
nor changes its exit code (the file was written and reported; issue: exit 130 with the file
edited)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

_SCRIPT = """
import os, signal, sys
from adapld_cli.edit.interrupt import Signals, ignore_after_run
if sys.argv[1] == "process":
    ignore_after_run()
with Signals():
    pass
os.kill(os.getpid(), getattr(signal, sys.argv[2]))
sys.exit(7)
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_signal_after_the_run_is_ignored_in_the_process(name: str) -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, "process", name], timeout=60)
    assert done.returncode == 7


def test_in_process_callers_get_their_handlers_back() -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, "library", "SIGTERM"], timeout=60)
    assert done.returncode == -signal.SIGTERM
