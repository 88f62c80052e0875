"""Rényi DP curves and their conversion to (ε, δ), shared by the RDP accountants."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

# Integer orders 2..256 plus a sparse tail: cheap for every accountant here and wide
# enough that the optimum sits below the cap for the (n, ε0, σ, δ) users run.
DEFAULT_ORDERS = np.concatenate([np.arange(2, 257), [320, 384, 512, 768, 1024]]).astype(float)


@dataclasses.dataclass(frozen=True)
class RdpConversion:
    """An (ε, δ) guarantee read off an RDP curve.

    Attributes:
      epsilon: the ε at the requested δ.
      delta: the requested δ.
      order: the Rényi order that attains it.
      at_cap: the best order is the largest one scanned, so a wider scan could give less.
    """

    epsilon: float
    delta: float
    order: float
    at_cap: bool


def rdp_to_dp(orders, rdp, delta: float) -> RdpConversion:
    """Convert a (composed) RDP curve to (ε, δ)-DP.

    Canonne, Kamath, Steinke 2020 (Prop. 12) / Balle et al. 2020 (Thm 21), as seed 001
    Lemma 2.1.3 and seed 004 eq. (4) state it: an (α, ε_α)-RDP mechanism is (ε, δ)-DP with
    ε = ε_α + (ln(1/δ) + (α−1) ln(1 − 1/α) − ln α)/(α − 1), minimized over α > 1.
    Curves are composed by adding them before this conversion, never after.

    Args:
      orders: Rényi orders α > 1.
      rdp: ε_α at each order (non-negative; +inf where no bound holds).
      delta: 0 < δ < 1.

    Returns:
      The minimizing conversion; ε is clipped below at 0.

    Raises:
      ValueError: mismatched lengths, an order ≤ 1, a negative or NaN RDP value, or δ outside (0, 1).
    """
    orders = np.asarray(orders, dtype=float)
    rdp = np.asarray(rdp, dtype=float)
    if orders.shape != rdp.shape or orders.ndim != 1 or orders.size == 0:
        raise ValueError(f"orders and rdp must be equal-length 1-D arrays, got {orders.shape} and {rdp.shape}")
    if np.any(orders <= 1.0):
        raise ValueError(f"Rényi orders must exceed 1, got {orders.min()}")
    if np.any(np.isnan(rdp)) or np.any(rdp < 0.0):
        raise ValueError("RDP values must be non-negative numbers")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    candidates = rdp + (math.log(1.0 / delta) + (orders - 1.0) * np.log1p(-1.0 / orders) - np.log(orders)) / (orders - 1.0)
    best = int(np.argmin(candidates))
    return RdpConversion(epsilon=max(0.0, float(candidates[best])), delta=delta, order=float(orders[best]),
                         at_cap=bool(orders[best] == orders.max()) and math.isfinite(candidates[best]))
