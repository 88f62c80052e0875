"""Losses of linear models on labelled records, with the constants the theorems need.

Every loss here is ℓ(θ, (x, y)) = φ(s, y) for the score s = ⟨θ, x⟩ (K scores Θx for
the multinomial one), on features clipped to ‖x‖₂ ≤ B and a domain ‖θ‖₂ ≤ R (the
Frobenius norm for a K × d matrix Θ), so |s| ≤ R·B. Then ∇_θ ℓ = φ'(s, y)·x and
∇²_θ ℓ = φ''(s, y)·xxᵀ, which gives, for each loss,

  L = sup |φ'|·B   (‖∇ℓ‖₂ ≤ |φ'|·‖x‖₂),   β = sup φ''·B²   (xxᵀ ⪯ ‖x‖²·I),   λ = 0,

with sup |φ'| and sup φ'' over |s| ≤ R·B and the labels' domain. An optional ridge
term (μ/2)‖θ‖² adds μR to L, μ to β and makes λ = μ. Each class's docstring gives
its φ, its label domain and the two sups.
"""
from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
import scipy  # submodules load on first use (scipy.stats alone costs 0.5 s per process)


class Loss:
    """A loss φ(scores, labels) of a linear model.

    Scores have shape (K, T, rows) for K outputs (K = 1 but for the multinomial loss),
    T models and the rows' records; labels have shape (rows,), in the loss's coding.

    Attributes:
      name: the config value (problem.loss).
      outputs: K, scores per record for `classes` classes.
      classifier: whether accuracy means something.
    """

    name: ClassVar[str]
    classifier: ClassVar[bool] = False

    def __init__(self, classes: int, label_bound: float, huber_delta: float):
        self.classes, self.label_bound, self.huber_delta = classes, label_bound, huber_delta

    @property
    def outputs(self) -> int:
        return 1

    def label_rule(self) -> str:
        """The labels' domain, as an error line states it."""
        raise NotImplementedError

    def bad_labels(self, labels: np.ndarray) -> np.ndarray:
        """A mask of the labels outside the domain (raw, as read from the table)."""
        raise NotImplementedError

    def code(self, labels: np.ndarray) -> np.ndarray:
        """Raw labels in the loss's coding (±1 for binary losses)."""
        return labels

    def codings(self, labels: np.ndarray) -> set[str]:
        """The label codings some raw labels use (a table must use one); none for most losses."""
        return set()

    def values(self, scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """φ(s, y), shape (T, rows)."""
        raise NotImplementedError

    def derivative(self, scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """∂φ/∂s, the same shape as scores."""
        raise NotImplementedError

    def correct(self, scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Whether each prediction is right, shape (T, rows) (classifiers only)."""
        raise NotImplementedError

    def slope_bound(self, score_bound: float) -> float:
        """sup |φ'| (the ℓ2 norm of ∂φ/∂s for K outputs) over |s| ≤ score_bound."""
        raise NotImplementedError

    def curvature_bound(self) -> float:
        """sup of the largest eigenvalue of ∂²φ/∂s²."""
        raise NotImplementedError


class _Binary(Loss):
    """Labels {0, 1} or {−1, +1}, coded y ∈ {−1, +1}; φ depends on the margin z = y·s."""

    classifier = True

    def label_rule(self) -> str:
        return "must be 0 or 1, or −1 or +1 (a binary label)"

    def bad_labels(self, labels):
        return ~np.isin(labels, (-1.0, 0.0, 1.0))

    def code(self, labels):
        return np.where(labels > 0, 1.0, -1.0)

    def codings(self, labels):
        """"0/1" where a 0 occurs, "±1" where a −1 does: a table with both would merge 0 and −1."""
        return {coding for coding, value in (("0/1", 0.0), ("±1", -1.0)) if (labels == value).any()}

    def correct(self, scores, labels):
        return np.where(scores[0] > 0, 1.0, -1.0) == labels


class LogisticLoss(_Binary):
    """φ = log(1 + e^{−z}): φ' = −y·σ(−z), so |φ'| ≤ 1; φ'' = σ(z)σ(−z) ≤ 1/4."""

    name = "logistic"

    def values(self, scores, labels):
        return np.logaddexp(0.0, -labels * scores[0])

    def derivative(self, scores, labels):
        return -labels * scipy.special.expit(-labels * scores)

    def slope_bound(self, score_bound):
        return 1.0

    def curvature_bound(self):
        return 0.25


class SmoothedHingeLoss(_Binary):
    """φ = 0 for z ≥ 1, (1 − z)²/2 for 0 < z < 1, 1/2 − z for z ≤ 0 (the hinge with
    its corner rounded): φ' = −y·min(1, max(0, 1 − z)), so |φ'| ≤ 1; φ'' ∈ {0, 1} ≤ 1."""

    name = "smoothed_hinge"

    def values(self, scores, labels):
        z = labels * scores[0]
        return np.where(z >= 1.0, 0.0, np.where(z <= 0.0, 0.5 - z, 0.5 * (1.0 - z) ** 2))

    def derivative(self, scores, labels):
        return -labels * np.clip(1.0 - labels * scores, 0.0, 1.0)

    def slope_bound(self, score_bound):
        return 1.0

    def curvature_bound(self):
        return 1.0


class _Regression(Loss):
    """Real labels with |y| ≤ Y (problem.label_bound); φ depends on the residual r = s − y,
    |r| ≤ R·B + Y."""

    def label_rule(self) -> str:
        return f"must lie in [−{self.label_bound:g}, {self.label_bound:g}] (problem.label_bound)"

    def bad_labels(self, labels):
        return np.abs(labels) > self.label_bound


class LeastSquaresLoss(_Regression):
    """φ = r²/2: φ' = r, |φ'| ≤ R·B + Y; φ'' = 1."""

    name = "least_squares"

    def values(self, scores, labels):
        return 0.5 * (scores[0] - labels) ** 2

    def derivative(self, scores, labels):
        return scores - labels

    def slope_bound(self, score_bound):
        return score_bound + self.label_bound

    def curvature_bound(self):
        return 1.0


class HuberLoss(_Regression):
    """φ = r²/2 for |r| ≤ δ, δ(|r| − δ/2) beyond (δ = problem.huber_delta): φ' = clip(r, −δ, δ),
    |φ'| ≤ min(δ, R·B + Y); φ'' ∈ {0, 1} ≤ 1."""

    name = "huber"

    def values(self, scores, labels):
        r = np.abs(scores[0] - labels)
        return np.where(r <= self.huber_delta, 0.5 * r**2, self.huber_delta * (r - 0.5 * self.huber_delta))

    def derivative(self, scores, labels):
        return np.clip(scores - labels, -self.huber_delta, self.huber_delta)

    def slope_bound(self, score_bound):
        return min(self.huber_delta, score_bound + self.label_bound)

    def curvature_bound(self):
        return 1.0


class MultinomialLoss(Loss):
    """K classes (problem.classes), labels 0 … K−1; scores s = Θx ∈ ℝ^K and
    φ = log Σ_k e^{s_k} − s_y. ∂φ/∂s = p − e_y with p = softmax(s), and
    ‖p − e_y‖₂² = (1 − p_y)² + Σ_{k≠y} p_k² ≤ 2(1 − p_y)² ≤ 2, so the slope is at most √2;
    ∂²φ/∂s² = diag(p) − ppᵀ, whose Gershgorin rows are 2p_k(1 − p_k) ≤ 1/2.
    (∇_Θ ℓ = (p − e_y)xᵀ has Frobenius norm ‖p − e_y‖·‖x‖; the Hessian over vec Θ is
    (diag(p) − ppᵀ) ⊗ xxᵀ.)"""

    name = "multinomial"
    classifier = True

    @property
    def outputs(self) -> int:
        return self.classes

    def label_rule(self) -> str:
        return f"must be an integer class 0 … {self.classes - 1} (problem.classes = {self.classes})"

    def bad_labels(self, labels):
        return (labels != np.round(labels)) | (labels < 0) | (labels >= self.classes)

    def values(self, scores, labels):
        index = labels.astype(np.int64)
        return -np.take_along_axis(scipy.special.log_softmax(scores, axis=0), index[None, None, :], axis=0)[0]

    def derivative(self, scores, labels):
        slope = scipy.special.softmax(scores, axis=0)
        index = labels.astype(np.int64)
        slope[index, ..., np.arange(index.size)] -= 1.0
        return slope

    def correct(self, scores, labels):
        return np.argmax(scores, axis=0) == labels

    def slope_bound(self, score_bound):
        return math.sqrt(2.0)

    def curvature_bound(self):
        return 0.5


LOSSES = {cls.name: cls for cls in (LogisticLoss, MultinomialLoss, LeastSquaresLoss, HuberLoss, SmoothedHingeLoss)}
