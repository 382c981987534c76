"""Run metadata for a benchmark report: what ran, on what, from which source, how loaded.

Contract: :func:`run_meta` returns the report's ``meta`` dict (JSON-ready); :func:`git_state`
and :func:`load_average` are its parts that can fail quietly (they return None). Reading the
metadata imports torch and transformers (only for their versions): call it after a run.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from adapld_cli.engine.settings import AdaPLDSettings


def git_state() -> str | None:
    """``<commit>[+dirty]`` of the source tree adapld runs from, when it is a git checkout."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}+dirty" if dirty else commit or None


def load_average() -> list[float] | None:
    """The 1, 5 and 15-minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def cpu_name() -> str:
    """The CPU model name (``/proc/cpuinfo``), else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_isa() -> str:
    """The vector instructions torch's CPU kernels use (``AVX512``, ``AVX2`` ...), with
    ``+AMX`` where the CPU has AMX tiles (oneDNN's bfloat16 products differ there: the exact
    kernels run them in blocks of rows, docs/design.md)."""
    import torch

    from adapld_cli.model.kernels import has_amx

    isa = torch.backends.cpu.get_cpu_capability()
    return f"{isa}+AMX" if has_amx() else isa


def run_meta(
    loaded: Any,
    *,
    tasks_file: str,
    instruction: str,
    n_tasks: int,
    options: Any,
    started: float,
    warmup_s: float,
    load_start: list[float] | None,
    baseline_model: str | None,
) -> dict[str, Any]:
    """The ``meta`` of a report measured just now (``options``: the run's ``BenchOptions``;
    ``started``: its ``time.time()``; ``load_start``: :func:`load_average` before it)."""
    import torch
    import transformers

    from adapld_cli import __version__
    from adapld_cli.bench import memory

    settings = options.settings or AdaPLDSettings()
    return {
        "command": "adapld " + " ".join(sys.argv[1:]) if sys.argv else "adapld bench",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "wall_s": round(time.time() - started, 1),
        "warmup_s": round(warmup_s, 2),
        "adapld_version": __version__,
        "git": git_state(),
        "model": loaded.name,
        "model_source": loaded.source,
        "device": loaded.device,
        "dtype": loaded.dtype,
        "weights": getattr(loaded, "weights", "dequantized"),
        "activations": getattr(loaded, "activations", ""),
        "baseline_model": baseline_model,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu": cpu_name(),
        "cpu_isa": cpu_isa(),
        "cpu_count": os.cpu_count(),
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tasks_file": tasks_file,
        "n_tasks": n_tasks,
        "instruction": instruction,
        "methods": options.methods,
        "max_new_tokens": options.max_new_tokens,
        "prompt_template": options.template or "default",
        "adapld_settings": dataclasses.asdict(settings),
        "peak_rss_per_run": memory.per_run,
    }
