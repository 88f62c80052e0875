"""`python -m pipeline audit CONFIG`: an empirical lower bound on the ε of the
protocol a run uses, from a distinguishing attack on worst-case neighbours
(and the same attack on the shuffle Gaussian mechanism of seed 004).

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
from scipy import special, stats

from pipeline.protocols import cjmp


def worst_case_inputs(params: cjmp.PvecParams) -> tuple[np.ndarray, np.ndarray]:
    """The worst-case neighbours' inputs (d, users): every user at −Δ₂·e₁, and the same with
    user 0 moved to +Δ₂·e₁."""
    base = np.zeros((params.dim, params.users))
    base[0, :] = -params.norm_bound
    moved = base.copy()
    moved[0, 0] = params.norm_bound
    return base, moved


def _statistic(params: cjmp.PvecParams, inputs: np.ndarray, trials: int, key: list[int]) -> np.ndarray:
    """Label 1's centred count in `trials` independent runs of the real encoder on `inputs`."""
    rng = np.random.default_rng(np.random.SeedSequence(key))
    out = np.empty(trials)
    for trial in range(trials):
        total = cjmp.encode_block(params, [inputs.copy()], rng)
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


def audit_pvec(params: cjmp.PvecParams, trials: int = 20_000, alpha: float = 0.05, seed: int = 0,
               neighbours: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """Runs the attack against one P_vec (or P_1D) call.

    Args:
      params: the call's parameters (from plan_pvec or plan_p1d).
      trials: runs per neighbour (half choose the threshold, half measure).
      alpha: 1 − confidence of the bound.
      seed: the attack's randomness.
      neighbours: the two neighbouring datasets' inputs (d, users), as users send them (for
        instance a round's inputs from the engine, for users holding several records); None:
        `worst_case_inputs`. The attack's statistic is label 1's count either way.

    Returns:
      {epsilon_lower_bound, threshold, trials, confidence, ...}.
    """
    null, alternative = worst_case_inputs(params) if neighbours is None else neighbours
    counts = [_statistic(params, inputs, trials, [seed + moved, moved]) for moved, inputs in enumerate((null, alternative))]
    return {**_split_audit(*counts, params.delta, alpha),
            "neighbours": "all users at -norm_bound*e1 vs one user moved to +norm_bound*e1" if neighbours is None
            else "the given pair"}


def _split_audit(null: np.ndarray, alternative: np.ndarray, delta: float, alpha: float) -> dict:
    """The threshold chosen on the first half of the trials, the bound measured on the second."""
    half = len(null) // 2
    candidates = np.quantile(np.concatenate([null[:half], alternative[:half]]), np.linspace(0.5, 0.9999, 200))
    chosen = max(candidates, key=lambda t: _epsilon_lower_bound(null[:half], alternative[:half], t, delta, alpha))
    return {
        "epsilon_lower_bound": _epsilon_lower_bound(null[half:], alternative[half:], chosen, delta, alpha),
        "threshold": float(chosen),
        "trials_per_neighbour": len(null) - half,
        "confidence": 1 - alpha,
    }


def audit_shuffle_gaussian(users: int, sigma: float, delta: float, trials: int = 20_000, alpha: float = 0.05,
                           seed: int = 0) -> dict:
    """Runs the attack against one round of the shuffle Gaussian mechanism (seed 004, Def. 4).

    Every user releases x_i + N(0, σ²) and the analyzer sees the shuffled multiset.
    Neighbours: all x_i = 0, against x_1 = 1 (sensitivity 1, Theorem 1's convention).
    The statistic is the likelihood ratio of the two, Σ_i exp(y_i/σ²) (a symmetric
    function of the multiset, so the shuffle hides nothing it uses).

    Args:
      users: n.
      sigma: σ.
      delta: the δ at which ε is bounded.
      trials: runs per neighbour.
      alpha: 1 − confidence of the bound.
      seed: the attack's randomness.

    Returns:
      {epsilon_lower_bound, threshold, trials_per_neighbour, confidence, neighbours}.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, users]))
    outputs = rng.normal(0.0, sigma, size=(2, trials, users))
    outputs[1, :, 0] += 1.0
    statistic = special.logsumexp(outputs / sigma**2, axis=2)
    return {**_split_audit(statistic[0], statistic[1], delta, alpha),
            "neighbours": "all users at 0 vs one user at 1"}
