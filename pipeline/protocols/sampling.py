"""Exact centred binomial draws for noise-bit counts of any size (shared/DESIGN.md §4)."""
from __future__ import annotations

import fractions
import math

import numpy as np

# numpy's binomial sampler takes int64 trial counts, but it is measurably wrong
# well before 2^63: at n = 2^62 its variance is 6-8% too large and its tails
# heavy, at 2^60 the fourth moment is off by 6 standard errors (2e6 draws),
# while 2^40..2^59 match Binomial(n, p). Stay 16x below the first bad size.
MAX_TRIALS_PER_DRAW = 2**56
# Above this many exact draws per coordinate we switch to the normal
# approximation, which the ledger flags (notes seed-000 T11).
MAX_EXACT_CHUNKS = 1024

EXACT = "binomial"
NORMAL_APPROXIMATION = "normal_approximation"


def noise_sampler(trials: int) -> str:
    """The sampler `centred_binomial` uses for this many trials.

    Args:
      trials: the number of Bernoulli trials summed in one draw.

    Returns:
      EXACT or NORMAL_APPROXIMATION.
    """
    chunks = -(-trials // MAX_TRIALS_PER_DRAW)
    return EXACT if chunks <= MAX_EXACT_CHUNKS else NORMAL_APPROXIMATION


def split_mean(trials: int, p: float) -> tuple[int, float]:
    """trials·p as an integer part and a fraction in [0, 1), computed exactly."""
    exact = fractions.Fraction(p) * trials
    whole = math.floor(exact)
    return whole, float(exact - whole)


def centred_binomial(rng: np.random.Generator, trials: int, p: float, size: int) -> np.ndarray:
    """Draws Binomial(trials, p) − trials·p, `size` times independently.

    The count is centred by its public mean before conversion to float64, so
    counts far beyond int64 (fully interactive P_GD, notes seed-000 T11) keep
    full precision. Binomial(m, p) is the sum of independent Binomial(m_k, p)
    with Σ m_k = m, so trial counts above int64 are split into exact chunks.

    Args:
      rng: the generator.
      trials: the number of Bernoulli(p) trials (any non-negative int).
      p: the success probability.
      size: how many independent draws.

    Returns:
      float64 array of shape (size,).
    """
    if noise_sampler(trials) == NORMAL_APPROXIMATION:
        return rng.standard_normal(size) * math.sqrt(trials * p * (1.0 - p))
    total = np.zeros(size)
    remaining = trials
    while remaining > 0:
        chunk = min(remaining, MAX_TRIALS_PER_DRAW)
        whole, fraction = split_mean(chunk, p)
        # Subtract the integer part in int64 (exact), the fraction in float64.
        total += (rng.binomial(chunk, p, size) - whole).astype(np.float64) - fraction
        remaining -= chunk
    return total
