"""Paper-mode privacy formulas of seed 000, each as its theorem states it."""
from __future__ import annotations

import fractions
import functools
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # an annotation only: full_gd's budget split loads in shard actors without dp_accounting
    from pipeline.accounting.events import PvecDpEvent


@functools.lru_cache(maxsize=4096)  # events are frozen; runs repeat the same call per round
def pvec_analysis_bound(event: PvecDpEvent) -> tuple[float, float]:
    """The (ε, δ) the proof of Theorem 3.2 / A.6 establishes for one P_vec call.

    With γ = δ̂ = δ/(d+1) and ε̂ = ε/(18√ln(1/γ)), Lemma 3.3 gives
    ε' ≤ 18ε̂² + 6ε̂√ln(1/γ) = ε/3 + ε²/(18 ln((d+1)/δ)) and δ' = δ. The proof
    needs g ≥ max(2Δ₂√n, √d, 4), ε ≤ 15, δ < 1/2, and per coordinate the
    noise of Lemma 3.1 at (ε̂, δ̂): b_noise > 180g² ln(2/δ̂)/(ε̂²n) and
    b_noise·p·n ≥ 90g² ln(2/δ̂)/ε̂² with p < 1/2. A call that breaks them gets
    no bound.

    Args:
      event: the call.

    Returns:
      (ε', δ').

    Raises:
      ValueError: the call is outside the theorem's conditions.
    """
    needed_g = max(2.0 * event.norm_bound * math.sqrt(event.users), math.sqrt(event.dim), 4.0)
    if event.g < needed_g or not 0.0 < event.p < 0.5:
        raise ValueError(f"P_vec call outside Theorem 3.2: g={event.g} (needs ≥ {needed_g:.3f}), p={event.p}")
    if not (0.0 < event.epsilon <= 15.0 and 0.0 < event.delta < 0.5):
        raise ValueError(f"P_vec call outside Theorem 3.2: ε={event.epsilon}, δ={event.delta}")
    # γ = δ̂ and ε̂ computed in the same order as the planner, so the check
    # below sees the planner's own threshold up to float error.
    delta_hat = event.delta / (event.dim + 1)
    log_inv_gamma = math.log(1.0 / delta_hat)
    epsilon_hat = event.epsilon / (18.0 * math.sqrt(log_inv_gamma))
    threshold = 180.0 * event.g**2 * math.log(2.0 / delta_hat) / (epsilon_hat**2 * event.users)
    # p < 1/2 (checked above) with b_noise·p ≥ threshold/2 implies b_noise > threshold.
    # Relative slack 1e-12 only absorbs float error in recomputing the threshold.
    if not event.b_noise * event.p >= threshold / 2.0 * (1.0 - 1e-12):
        raise ValueError(f"P_vec call outside Theorem 3.2: b_noise={event.b_noise}, p={event.p} give less "
                         f"noise than Lemma 3.1 needs (b_noise·p ≥ {threshold / 2:.6g})")
    bound = 18.0 * epsilon_hat**2 + 6.0 * epsilon_hat * math.sqrt(log_inv_gamma)
    return bound, event.delta


def advanced_composition(epsilon0: float, delta0: float, rounds: int, slack: float) -> tuple[float, float]:
    """Advanced composition (Dwork, Rothblum, Vadhan 2010, Thm III.3), as the
    proof of Lemma B.6 / Theorem 4.9 of seed 000 uses it for P_GD.

    k adaptively chosen (ε0, δ0)-DP mechanisms are (ε', kδ0 + δ')-DP with
    ε' = √(2k ln(1/δ'))·ε0 + k·ε0·(e^ε0 − 1).

    Args:
      epsilon0, delta0: the per-round guarantee.
      rounds: k ≥ 0.
      slack: δ' ∈ (0, 1).

    Returns:
      (ε', δ').
    """
    if rounds == 0:
        return 0.0, 0.0
    epsilon = math.sqrt(2.0 * rounds * math.log(1.0 / slack)) * epsilon0 + rounds * epsilon0 * math.expm1(epsilon0)
    # Rounded up by far more than the formula's float error: never report less.
    return epsilon * (1.0 + 1e-12), round_up(fractions.Fraction(delta0) * rounds + fractions.Fraction(slack))


def round_up(value: fractions.Fraction) -> float:
    """The smallest float ≥ an exact value: a ledger never reports less than was spent."""
    nearest = float(value)
    return nearest if fractions.Fraction(nearest) >= value else math.nextafter(nearest, math.inf)


def split_below(total: float, parts: int) -> float:
    """A float share s with parts·s ≤ total exactly (one ulp under total/parts)."""
    return math.nextafter(total / parts, 0.0)


def full_gd_round_budget(epsilon: float, delta: float, rounds: int) -> tuple[float, float]:
    """Per-round (ε0, δ0) of P_GD (Lemma B.6 / Theorem 4.9 of seed 000).

    ε0 = ε/(2√(2T ln(1/δ))), δ0 = δ/(T+1); composed with slack δ/(T+1). δ0
    is rounded down so that T·δ0 + δ' ≤ δ holds exactly, not only up to float error.

    Args:
      epsilon, delta: the whole run's target.
      rounds: T.

    Returns:
      (ε0, δ0).
    """
    return epsilon / (2.0 * math.sqrt(2.0 * rounds * math.log(1.0 / delta))), split_below(delta, rounds + 1)
