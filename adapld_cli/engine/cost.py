"""Online model of what a verification pass costs on this device.

Passes over ``n`` new tokens are timed; the model keeps a decaying average of seconds per
size bucket (``n`` = 1, 2-3, 4-7, ..., 64-127, 128+) and interpolates between buckets. The
curve is far from linear on a CPU (a pass of a few tokens already costs more than a step,
the matrix products switching from vector to matrix kernels, while a large one costs far
less than its size in steps), so the drafters see the real shape. Buckets not measured yet
follow a device prior scaled to the measured ones (docs/design.md, "2. Cost model").
:meth:`ratio` gives the cost of ``n`` tokens in single steps.

Passes of one static shape (``flat``: uniform passes compute every row of the shape whatever
the draft's size) cost one pass by construction: their ratio is 1 up to the shape, whatever
the timings say. Measured, they would be only as flat as the noise lets them look, and a
size that once looked dear (a pass that captured a graph, a scheduler hiccup) is one the
drafter stops proposing, so it is never measured again: trees stuck at one size.
"""

from __future__ import annotations

import math
from bisect import bisect_right

# Prior cost of a pass over n tokens in single-step units: on a CPU the measured curve of the
# default kernels (docs/design.md, "2. Cost model", with its command; 128 extrapolated), on
# a GPU nearly flat up to a few dozen tokens.
PRIOR = {
    "cpu": {1: 1.0, 2: 1.12, 4: 1.3, 8: 1.65, 16: 2.4, 32: 3.9, 64: 6.7, 128: 13.0},
    "cuda": {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.02, 16: 1.05, 32: 1.1, 64: 1.2, 128: 1.5},
}
BUCKETS = 8  # n = 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64-127, 128+


def _bucket(n: int) -> int:
    return min(BUCKETS - 1, int(math.log2(max(n, 1))))


class CostModel:
    """Decaying per-bucket averages of pass seconds, interpolated over the pass size."""

    def __init__(self, device_type: str = "cpu", decay: float = 0.8, flat: int = 0) -> None:
        self.flat = flat  # passes of up to this many tokens cost the same (one shape); 0: none
        prior = PRIOR.get(device_type, PRIOR["cpu"])
        self._prior_n = sorted(prior)
        self._prior_r = [prior[n] for n in self._prior_n]
        self.decay = decay
        self._w = [0.0] * BUCKETS
        self._n = [0.0] * BUCKETS  # weighted sums of pass sizes
        self._t = [0.0] * BUCKETS  # ... and of seconds
        self._curve: tuple[list[float], list[float]] | None = None  # (sizes, seconds)
        self._ratios: dict[int, float] = {}  # n -> ratio(n) until the next observation

    def observe(self, n: int, seconds: float) -> None:
        """Record one pass over ``n`` tokens that took ``seconds`` (with ``flat``, as a
        single step's: every pass is one)."""
        if n <= self.flat:
            n = 1
        b = _bucket(n)
        d = self.decay
        self._w[b] = self._w[b] * d + 1.0
        self._n[b] = self._n[b] * d + n
        self._t[b] = self._t[b] * d + seconds
        self._curve = None
        self._ratios.clear()

    @staticmethod
    def _interp(x: float, xs: list[float], ys: list[float]) -> float:
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            return ys[-1] * x / xs[-1]  # beyond the last point: proportional
        i = bisect_right(xs, x)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0)

    def _prior(self, n: float) -> float:
        return self._interp(n, self._prior_n, self._prior_r)

    def _build(self) -> tuple[list[float], list[float]]:
        seen = [b for b in range(BUCKETS) if self._w[b] > 0]
        if not seen:
            return [], []
        # scale of the prior: the single-step seconds the measured buckets imply
        scales = [self._t[b] / self._w[b] / self._prior(self._n[b] / self._w[b]) for b in seen]
        step = self._t[0] / self._w[0] if self._w[0] > 0 else sorted(scales)[len(scales) // 2]
        xs, ys = [], []
        for b in range(BUCKETS):
            if self._w[b] > 0:
                n, t = self._n[b] / self._w[b], self._t[b] / self._w[b]
            else:
                n = float(2**b)
                t = step * self._prior(n)
            xs.append(n)
            ys.append(max(t, ys[-1]) if ys else t)  # bigger passes never cost less
        return xs, ys

    @property
    def step_s(self) -> float:
        """Seconds of a single-token pass (0 until something was measured)."""
        xs, ys = self._get()
        return self._interp(1, xs, ys) if xs else 0.0

    def _get(self) -> tuple[list[float], list[float]]:
        if self._curve is None:
            self._curve = self._build()
        return self._curve

    def ratio(self, n: int) -> float:
        """Cost of a pass over ``n`` tokens in units of a single-token pass (kept until the
        next :meth:`observe`: the drafter asks for every size up to its budget each step);
        1 up to ``flat``."""
        if n <= self.flat:
            return 1.0
        r = self._ratios.get(n)
        if r is None:
            xs, ys = self._get()
            r = self._prior(n) if not xs else self._interp(n, xs, ys) / self._interp(1, xs, ys)
            self._ratios[n] = r
        return r
