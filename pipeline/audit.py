"""`python -m pipeline audit CONFIG`: an empirical lower bound on the ε of the
protocol a run uses, from a distinguishing attack on worst-case neighbours.

Neighbours: n users all at x = −Δ₂·e₁, against the same with user 1 moved to
+Δ₂·e₁ (the largest change a user can make, all on one coordinate: label 1's
count of ones moves by exactly g). The attack sees what the analyzer sees, the
shuffled messages' counts, and guesses "neighbour" when label 1's count
reaches a threshold. For any (ε, δ)-DP mechanism and any test,
TPR ≤ e^ε·FPR + δ, so ε ≥ ln((TPR − δ)/FPR). With Clopper–Pearson bounds
(TPR from below, FPR from above, each at confidence 1 − α/2), this is a lower
bound on ε that holds with confidence 1 − α. The threshold is chosen on one
half of the trials and evaluated on the other, so choosing it does not bias
the bound.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

from pipeline.protocols import cjmp


def _statistic(params: cjmp.PvecParams, moved: bool, trials: int, seed: int) -> np.ndarray:
    """Label 1's centred count in `trials` independent runs of the real encoder."""
    base = np.zeros((params.dim, params.users))
    base[0, :] = -params.norm_bound
    if moved:
        base[0, 0] = params.norm_bound
    rng = np.random.default_rng(np.random.SeedSequence([seed, int(moved)]))
    out = np.empty(trials)
    for trial in range(trials):
        total = cjmp.encode_block(params, [base.copy()], rng)
        out[trial] = cjmp.finish(params, total).centred_ones[0]
    return out


def _epsilon_lower_bound(null: np.ndarray, alternative: np.ndarray, threshold: float, delta: float,
                         alpha: float) -> float:
    """ln((TPR_low − δ)/FPR_high) at one threshold (0 where it says nothing)."""
    trials = len(null)
    false_positives = int((null >= threshold).sum())
    true_positives = int((alternative >= threshold).sum())
    fpr_high = 1.0 if false_positives == trials else stats.beta.ppf(1 - alpha / 2, false_positives + 1, trials - false_positives)
    tpr_low = 0.0 if true_positives == 0 else stats.beta.ppf(alpha / 2, true_positives, trials - true_positives + 1)
    if tpr_low - delta <= 0.0 or fpr_high <= 0.0:
        return 0.0
    return max(0.0, math.log((tpr_low - delta) / fpr_high))


def audit_pvec(params: cjmp.PvecParams, trials: int = 20_000, alpha: float = 0.05, seed: int = 0) -> dict:
    """Runs the attack against one P_vec (or P_1D) call.

    Args:
      params: the call's parameters (from plan_pvec or plan_p1d).
      trials: runs per neighbour (half choose the threshold, half measure).
      alpha: 1 − confidence of the bound.
      seed: the attack's randomness.

    Returns:
      {epsilon_lower_bound, threshold, trials, confidence, ...}.
    """
    null = _statistic(params, False, trials, seed)
    alternative = _statistic(params, True, trials, seed + 1)
    half = trials // 2
    candidates = np.quantile(np.concatenate([null[:half], alternative[:half]]), np.linspace(0.5, 0.9999, 200))
    chosen = max(candidates, key=lambda t: _epsilon_lower_bound(null[:half], alternative[:half], t, params.delta, alpha))
    return {
        "epsilon_lower_bound": _epsilon_lower_bound(null[half:], alternative[half:], chosen, params.delta, alpha),
        "threshold": float(chosen),
        "trials_per_neighbour": trials - half,
        "confidence": 1 - alpha,
        "neighbours": "all users at -norm_bound*e1 vs one user moved to +norm_bound*e1",
    }
