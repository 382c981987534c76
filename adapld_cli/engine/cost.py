"""Online model of what a verification pass costs on this device.

``t(n) = a + b * (n - 1)`` seconds for a pass over ``n`` new tokens, fitted by exponentially
weighted least squares over measured passes, anchored by a device prior (DESIGN.md §2.4: on
CPU fp32 a 64-token verify costs ~5x one step, on a GPU about 1x). Drafters ask for
:meth:`ratio` — the cost of ``n`` tokens in single-step units — to size their drafts.
"""

from __future__ import annotations

# Prior slope per extra token, in single-step units (measured: CPU fp32 64 tokens ~5.1 steps).
PRIOR_SLOPE = {"cpu": 0.065, "cuda": 0.004, "mps": 0.02}


class CostModel:
    """Exponentially weighted linear fit of pass seconds against tokens per pass."""

    def __init__(self, device_type: str = "cpu", decay: float = 0.97) -> None:
        self.prior_slope = PRIOR_SLOPE.get(device_type, 0.065)
        self.decay = decay
        self._w = self._sx = self._sy = self._sxx = self._sxy = 0.0
        self._prior_w = 0.05  # weight of the prior, in observations
        self._prior: tuple[float, float] | None = None  # (a, b) anchored at the first pass
        self.a = 0.0  # seconds of a single-token pass
        self.b = 0.0  # extra seconds per additional token

    def observe(self, n: int, seconds: float) -> None:
        """Record one pass over ``n`` tokens that took ``seconds``."""
        x = n - 1
        if self._prior is None:
            a0 = seconds / (1.0 + self.prior_slope * x)
            self._prior = (a0, a0 * self.prior_slope)
        d = self.decay
        self._w = self._w * d + 1.0
        self._sx = self._sx * d + x
        self._sy = self._sy * d + seconds
        self._sxx = self._sxx * d + x * x
        self._sxy = self._sxy * d + x * seconds
        self._fit()

    def _fit(self) -> None:
        """Ridge-regularised least squares: the prior line pulls ``a`` and ``b`` only where
        the measurements say little (e.g. every pass had the same size)."""
        a0, b0 = self._prior
        la, lb = self._prior_w, self._prior_w * 32 * 32
        m11, m12, m22 = self._w + la, self._sx, self._sxx + lb
        r1, r2 = self._sy + la * a0, self._sxy + lb * b0
        det = m11 * m22 - m12 * m12
        a = (r1 * m22 - m12 * r2) / det
        b = (m11 * r2 - m12 * r1) / det
        self.a, self.b = max(a, 1e-9), max(b, 0.0)

    def ratio(self, n: int) -> float:
        """Cost of a pass over ``n`` tokens in units of a single-token pass."""
        if self.a <= 0:
            return 1.0 + self.prior_slope * (n - 1)
        return 1.0 + (self.b / self.a) * (n - 1)
