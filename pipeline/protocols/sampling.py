"""Exact centred binomial draws for noise-bit counts of any size (shared/DESIGN.md §4)."""
from __future__ import annotations

import fractions
import functools
import math

import numpy as np

# numpy's binomial sampler takes int64 trial counts, but it is measurably wrong
# well before 2^63: at n = 2^62 its variance is 6-8% too large and its tails
# heavy, at 2^60 the fourth moment is off by 6 standard errors (2e6 draws),
# while 2^40..2^59 match Binomial(n, p). Stay 16x below the first bad size.
MAX_TRIALS_PER_DRAW = 2**56
# Above this many exact draws per coordinate (about 1.2e21 trials, reached
# only by fully interactive P_GD at n of order 1e7 and beyond) we switch to the
# normal approximation, which the ledger flags (notes seed-000 T11).
MAX_EXACT_CHUNKS = 16384

EXACT = "binomial"
NORMAL_APPROXIMATION = "normal_approximation"


def noise_sampler(trials: int) -> str:
    """The sampler `binomial_above_floor` uses for this many trials.

    Args:
      trials: the number of Bernoulli trials summed in one draw.

    Returns:
      EXACT or NORMAL_APPROXIMATION.
    """
    chunks = -(-trials // MAX_TRIALS_PER_DRAW)
    return EXACT if chunks <= MAX_EXACT_CHUNKS else NORMAL_APPROXIMATION


@functools.lru_cache(maxsize=4096)
def split_mean(trials: int, p: float) -> tuple[int, float]:
    """trials·p as an integer part and a fraction in [0, 1), computed exactly."""
    exact = fractions.Fraction(p) * trials
    whole = math.floor(exact)
    return whole, float(exact - whole)


def binomial_above_floor(rng: np.random.Generator, trials: int, p: float, size: int) -> tuple[np.ndarray, int]:
    """Draws N ~ Binomial(trials, p) `size` times, as exact integers N − F.

    F is a public, data-independent integer near trials·p (the sum of
    ⌊m_k·p⌋ over the draws), so N − F stays small enough for int64 even when
    N itself is far beyond it (fully interactive P_GD, notes seed-000 T11),
    and sums of such parts are exact and independent of their order.
    Binomial(m, p) is the sum of independent Binomial(m_k, p) with Σ m_k = m,
    so large trial counts are split into exact chunks of at most
    MAX_TRIALS_PER_DRAW.

    Args:
      rng: the generator.
      trials: the number of Bernoulli(p) trials (any non-negative int).
      p: the success probability.
      size: how many independent draws.

    Returns:
      (N − F as int64 of shape (size,), F).
    """
    whole, fraction = split_mean(trials, p)
    if noise_sampler(trials) == NORMAL_APPROXIMATION:
        # Flagged in the ledger: a rounded normal with the binomial's mean and variance.
        normal = rng.standard_normal(size) * math.sqrt(trials * p * (1.0 - p)) + fraction
        return np.rint(normal).astype(np.int64), whole
    above = np.zeros(size, dtype=np.int64)
    floor_total = 0
    remaining = trials
    while remaining > 0:
        chunk = min(remaining, MAX_TRIALS_PER_DRAW)
        chunk_whole, _ = split_mean(chunk, p)
        above += rng.binomial(chunk, p, size) - chunk_whole
        floor_total += chunk_whole
        remaining -= chunk
    return above, floor_total

