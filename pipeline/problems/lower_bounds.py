"""Certified lower bounds for (ε, δ)-DP estimators: the two-point testing bound of
one coordinate pair of the hard instances (pipeline/problems/hard.py), pure numpy/scipy.

The instances (hard.py) are indexed by a vertex v ∈ {±1}^d. Flipping v_j moves
probability mass q = m/n of one user's distribution from the point +R·v_j·e_j to
−R·v_j·e_j, and changes nothing else. Both bounds below lower-bound, for any
test ψ (any function of an (ε, δ)-DP algorithm's output, with its own coins),
the sum of its two error probabilities between P = P_v^n and Q = P_{v^(j)}^n.

1. Private two-point bound (the coupling argument of Acharya–Sun–Zhang 2021,
   "Differentially private Assouad, Fano and Le Cam", Thm 1, with its constants
   written out here rather than their rounded 0.9·e^{−10εD}):
   - Coupling. Draw X ~ P and, for each user independently, move the user's
     point from +R·v_j·e_j to −R·v_j·e_j when it is there (probability q).
     Then X' ~ Q exactly, and the Hamming distance K between X and X' is
     Binomial(n, q).
   - Group privacy for replace-one neighbours (Dwork–Roth 2014, Thm 2.2 for
     δ = 0; for δ > 0 by induction along a path X = X_0, …, X_k = X' of
     neighbours: P[M(X_0) ∈ S] ≤ e^ε P[M(X_1) ∈ S] + δ ≤ … ≤
     e^{kε} P[M(X_k) ∈ S] + δ·Σ_{i<k} e^{iε}). So with
     δ_k = δ (e^{kε} − 1)/(e^ε − 1), every event obeys
     P[M(X) ∈ S] ≤ e^{kε} P[M(X') ∈ S] + δ_k, and the same with X, X' swapped.
   - Given (X, X') at distance k, let a = P[ψ = Q | X] and b = P[ψ = P | X'].
     Then 1 − b ≤ e^{kε} a + δ_k and 1 − a ≤ e^{kε} b + δ_k. The least a + b
     over this convex set, symmetric in (a, b), is at a = b:
     a + b ≥ 2 (1 − δ_k)_+ / (1 + e^{kε}).
   - Averaging over the coupling: err_P + err_Q ≥ E_K[2 (1 − δ_K)_+ / (1 + e^{Kε})].
2. Le Cam's bound without privacy (Tsybakov 2009, Lemma 2.3 with (2.26)):
   err_P + err_Q ≥ 1 − TV(P, Q) ≥ ½ (∫√(pq))² = ½ BC^{2n}, where BC = ∫√(p₁q₁)
   is the Bhattacharyya coefficient of one user's two distributions
   (BC(P^n, Q^n) = BC^n). One user's two laws differ only on the atoms ±R·e_j,
   of masses (α, β) under P and (β, α) under Q, so BC = 1 − α − β + 2√(αβ).

`pair_error` returns a lower bound on (err_P + err_Q)/2: the larger of the two.
The Binomial expectation is a finite sum over k = 0…min(n, k_max), where k_max
is the last k with δ_k < 1 (the terms after it are 0), and at most 75/ε and
the Binomial's mean + 50 sd + 50 (later terms are ≥ 0 and dropped); the result
is multiplied by (1 − 10⁻⁹) so that float64 rounding in the sum (relative
≤ 10⁻¹²) cannot lift it above the exact value.
"""
from __future__ import annotations

import math

import numpy as np
import scipy  # submodules load on first use (scipy.stats alone costs 0.5 s per process)

# Float64 rounding of the finite sum is far below this (relative ~1e-13); the bound is lowered by it.
ROUNDING_SLACK = 1e-9


def group_delta(k: np.ndarray, epsilon: float, delta: float) -> np.ndarray:
    """δ_k = δ·(e^{kε} − 1)/(e^ε − 1), the δ of group privacy for k replaced users.

    Args:
      k: group sizes (≥ 0).
      epsilon: ε > 0.
      delta: δ ≥ 0.

    Returns:
      δ_k per entry of k (δ_0 = 0, δ_1 = δ).
    """
    k = np.asarray(k, dtype=float)
    if delta == 0:  # pure DP: no δ to carry (and 0·∞ would be NaN)
        return np.zeros_like(k)
    return delta * np.expm1(np.minimum(k * epsilon, 700.0)) / math.expm1(epsilon)


def private_pair_error(users: int, flip: float, epsilon: float, delta: float) -> float:
    """E_K[(1 − δ_K)_+ / (1 + e^{Kε})] with K ~ Binomial(users, flip): bound 1 over 2.

    Args:
      users: n.
      flip: q, the mass that one coordinate flip moves (the coupling's per-user probability).
      epsilon, delta: the algorithm's (ε, δ).

    Returns:
      A lower bound on (err_P + err_Q)/2 for any (ε, δ)-DP test.
    """
    # δ_k < 1 ⟺ e^{kε} < 1 + (e^ε − 1)/δ; beyond that k every term is 0.
    last = users if delta == 0 else min(users, int(math.log1p(math.expm1(epsilon) / delta) / epsilon) + 1)
    # Terms past e^{−kε} < e^{−75} or the Binomial's mean + 50 sd + 50 are dropped: they are ≥ 0, so the
    # sum stays a lower bound, and what is dropped is below 10⁻³² of it.
    mean = users * flip
    last = min(last, int(75.0 / epsilon) + 1, int(mean + 50.0 * math.sqrt(mean) + 50))
    k = np.arange(last + 1)
    weights = scipy.stats.binom.pmf(k, users, flip)
    terms = np.clip(1.0 - group_delta(k, epsilon, delta), 0.0, None) / (1.0 + np.exp(np.minimum(k * epsilon, 700.0)))
    return float(np.sum(weights * terms))


def lecam_pair_error(users: int, plus_mass: float, minus_mass: float) -> float:
    """½·(½ BC^{2n}) with BC = 1 − α − β + 2√(αβ): bound 2 over 2.

    Args:
      users: n.
      plus_mass: α, one user's mass at +R·v_j·e_j under P.
      minus_mass: β, its mass at −R·v_j·e_j under P.

    Returns:
      A lower bound on (err_P + err_Q)/2 for any test.
    """
    coefficient = 1.0 - plus_mass - minus_mass + 2.0 * math.sqrt(plus_mass * minus_mass)
    return 0.25 * math.exp(2 * users * math.log(coefficient)) if coefficient > 0 else 0.0


def pair_error(users: int, plus_mass: float, minus_mass: float, epsilon: float, delta: float) -> float:
    """τ: a certified lower bound on (err_P + err_Q)/2, the larger of bounds 1 and 2, less rounding slack.

    Args:
      users: n.
      plus_mass, minus_mass: α ≥ β, one user's masses at ±R·v_j·e_j under P (q = α − β is flipped).
      epsilon, delta: the algorithm's (ε, δ).

    Returns:
      τ ∈ [0, ½].
    """
    flip = plus_mass - minus_mass
    tau = max(private_pair_error(users, flip, epsilon, delta), lecam_pair_error(users, plus_mass, minus_mass))
    return tau * (1.0 - ROUNDING_SLACK)
