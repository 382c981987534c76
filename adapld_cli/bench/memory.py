"""Peak resident memory of this process, per measured run.

Contract: :func:`reset_peak` starts a new measurement and :func:`peak_rss_mb` reads the peak
since then, in MiB. On Linux the kernel's high-water mark (``VmHWM``) is reset through
``/proc/self/clear_refs``, so each run gets its own peak; elsewhere (or when that fails) the
process-lifetime peak from :mod:`resource` is returned and :data:`per_run` is False.
"""

from __future__ import annotations

import sys

per_run = False


def reset_peak() -> None:
    global per_run
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        per_run = True
    except OSError:
        per_run = False


def peak_rss_mb() -> float | None:
    if per_run:
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except (OSError, ValueError, IndexError):
            pass
    try:
        import resource
    except ImportError:  # Windows
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024
