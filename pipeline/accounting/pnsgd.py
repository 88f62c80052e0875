"""Privacy of shuffled, randomly-stopped and online PNSGD (seed 002: Sordello, Bu, Dong, Su).

Projected noisy SGD with batch size 1 and one pass over the data:
w_t = Π_K(w_{t−1} − η(∇ℓ(w_{t−1}, x_t) + Z_t)), Z_t Gaussian N(0, σ²I) or (K = [a, b] ⊂ R
only) Laplace with scale v, ℓ(·, x) L-Lipschitz, ρ-strongly convex (ρ = 0 allowed) and
β-smooth, η ≤ 2/(β+ρ) so that the gradient map is M-Lipschitz with M = √(1 − 2ηβρ/(β+ρ)).

CAVEAT: every bound here covers releasing ONLY THE FINAL ITERATE of a pass. The
intermediate iterates and the permutation must stay secret; logging any w_t inside a
pass voids the guarantee. The randomly-stopped baseline releases w_τ for a secret τ.

Implemented (all natural logs, δ as a function of ε ≥ 0):
  Thm 1 (Asoodeh et al. Thms 3-4)  entry at position i: δ_i = A·B^{n−i}, with
                                   A = θ(2L/σ), B = θ(M·D_K/(ησ)) (Gaussian, eq. 3) or
                                   A = (1−e^{ε/2−L/v})₊, B = (1−e^{ε/2−M(b−a)/(2ηv)})₊ (Laplace, eq. 4).
  Thm 2                            shuffled PNSGD: δ = A(1−Bⁿ)/(n(1−B)), uniform over entries.
  Asoodeh et al. Thm 5             randomly stopped: δ = A/(n(1−B)) (baseline).
  Thms 4, 5                        noise calibrated to n: v(n), σ(n); the exact finite-n δ is
                                   Thm 2 at that noise; δ*_L, δ*_G are only the n → ∞ limits.
  Thms 6, 7                        online decaying noise v_j, σ_j: δ_i(n) = A_i·Π_{t>i} B_t
                                   (exact, finite n); δ^{*,o} is the paper's n → ∞ upper
                                   bound on the limit, not a guarantee at finite n.
  Remark 3 (beyond the paper)      E epochs, each with a fresh secret permutation and only
                                   its end-of-epoch iterate released: basic composition
                                   (Eε₀, E·δ(ε₀)), or numerically by a privacy-loss
                                   distribution (dp_accounting) built from the whole per-epoch
                                   privacy profile δ(ε): the trade-off function
                                   max_ε f_{ε,δ(ε)} (Dong, Roth, Su 2019, Prop. 2.12) has a
                                   discrete dominating pair, composed by dp_accounting.

The entry point is `pnsgd_epsilon` (ε at a target δ) and `pnsgd_delta` (δ at a given ε,
as in the paper's figures). Numerics: θ and 1−θ without cancellation (log_ndtr),
Bⁿ = exp(n·log1p(−(1−B))), Lambert W from the log of its argument.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import scipy  # submodules load on first use (scipy.stats alone costs 0.5 s per process)

from pipeline.accounting import arguments

NOISES = ("gaussian", "laplace")
SCHEDULES = ("fixed", "calibrated", "online")
VARIANTS = ("shuffled", "random_stop", "per_index")
COMPOSITIONS = ("pld", "basic")

# Online δ_i(n): this many steps after i are summed exactly, the rest bounded by an integral.
ONLINE_EXACT_STEPS = 2**17
# Epsilon search: bisection to this width (relative above ε = 1), never above this ε.
_EPS_TOL = 1e-10
_EPS_CAP = 1e5
# Privacy-profile grid for the PLD: points on [0, ε_max]; ε_max ≤ this.
_PROFILE_POINTS = 4000
_PROFILE_EPS_CAP = 512.0

_THEOREMS = {
    ("shuffled", "gaussian"): "Sordello et al. Thm 2 (shuffled PNSGD, δ = A(1−Bⁿ)/(n(1−B))), A, B of Thm 1 eq. (3), Gaussian",
    ("shuffled", "laplace"): "Sordello et al. Thm 2 (shuffled PNSGD, δ = A(1−Bⁿ)/(n(1−B))), A, B of Thm 1 eq. (4), Laplace",
    ("random_stop", "gaussian"): "Asoodeh et al. Thm 5 (randomly stopped PNSGD, δ = A/(n(1−B))), A, B of eq. (3), Gaussian",
    ("random_stop", "laplace"): "Asoodeh et al. Thm 5 as Sordello et al. extend it (δ = A/(n(1−B))), A, B of eq. (4), Laplace",
    ("per_index", "gaussian"): "Sordello et al. Thm 1 = Asoodeh et al. Thm 3 (entry i: δ = A·B^(n−i)), Gaussian",
    ("per_index", "laplace"): "Sordello et al. Thm 1 = Asoodeh et al. Thm 4 (entry i: δ = A·B^(n−i)), Laplace",
}
_SCHEDULE_TEXT = {
    "fixed": "fixed noise",
    "calibrated": {"gaussian": "noise σ(n) of Thm 5 (exact finite-n Thm 2 δ, not the limit δ*_G)",
                   "laplace": "noise v(n) of Thm 4 (exact finite-n Thm 2 δ, not the limit δ*_L)"},
    "online": {"gaussian": "online decaying noise σ_j of Thm 7, exact finite-n δ_i(n) = A_i·Π_{t>i} B_t",
               "laplace": "online decaying noise v_j of Thm 6, exact finite-n δ_i(n) = A_i·Π_{t>i} B_t"},
}


# --------------------------------------------------------------------------- validation


def _fail(name, value, rule):
    raise ValueError(f"{name}={value!r}: {rule}")


def _finite(name, value, low=None, *, strict=True):
    """A finite real number above `low` (strictly unless strict=False)."""
    return arguments.real(name, value, -math.inf if low is None else low, low_open=strict)


def _integer(name, value, low):
    return arguments.integer(name, value, low)


def _choice(name, value, options):
    return arguments.choice(name, value, options)


def _array(name, value, low, *, strict):
    """A float array with every entry finite and above `low`."""
    arr = np.asarray(value, dtype=float)
    bad = ~np.isfinite(arr) | ((arr <= low) if strict else (arr < low))
    if np.any(bad):
        _fail(name, arr[bad].flat[0].item(), f"must be finite and {'>' if strict else '≥'} {low:g}")
    return arr


def _out(value):
    """A float, or a float array's plain float when it has one element."""
    value = np.asarray(value, dtype=float)
    return float(value) if value.ndim == 0 else value


# --------------------------------------------------------------------------- primitives


def _log_gaussian_hockey_stick(r, eps):
    """log θ_{e^ε}(r) = log Φ(a) + log(1 − exp(ε + log Φ(a−r) − log Φ(a))), a = r/2 − ε/r."""
    a = r / 2.0 - eps / r
    log_phi_a = scipy.special.log_ndtr(a)
    diff = np.minimum(eps + scipy.special.log_ndtr(a - r) - log_phi_a, 0.0)
    with np.errstate(divide="ignore"):
        return log_phi_a + np.log(-np.expm1(diff))


def _log_gaussian_hockey_stick_complement(r, eps):
    """log(1 − θ_{e^ε}(r)) = log(Φ(ε/r − r/2) + e^ε Φ(−ε/r − r/2))."""
    log_ndtr = scipy.special.log_ndtr
    return np.minimum(np.logaddexp(log_ndtr(eps / r - r / 2.0), eps + log_ndtr(-eps / r - r / 2.0)), 0.0)


def gaussian_hockey_stick(r, epsilon):
    """θ_{e^ε}(r) = E_{e^ε}(N(r,1) ‖ N(0,1)) = Q(ε/r − r/2) − e^ε Q(ε/r + r/2) (Thm 1).

    Computed as Φ(a)·(1 − exp(ε + log Φ(a−r) − log Φ(a))), a = r/2 − ε/r, so that small
    values (large noise) keep their relative precision.

    Args:
      r: shift over noise standard deviation, > 0 (array or scalar).
      epsilon: ε ≥ 0 (array or scalar, broadcast against r).

    Returns:
      θ in [0, 1], a float or an array.

    Raises:
      ValueError: r ≤ 0 or ε < 0, or either not finite.
    """
    r = _array("r", r, 0.0, strict=True)
    eps = _array("epsilon", epsilon, 0.0, strict=False)
    return _out(np.clip(np.exp(_log_gaussian_hockey_stick(r, eps)), 0.0, 1.0))


def gaussian_hockey_stick_complement(r, epsilon):
    """1 − θ_{e^ε}(r) = Φ(ε/r − r/2) + e^ε Φ(−ε/r − r/2), without cancellation (Thm 1's B).

    Args:
      r: shift over noise standard deviation, > 0.
      epsilon: ε ≥ 0.

    Returns:
      1 − θ in [0, 1].

    Raises:
      ValueError: r ≤ 0 or ε < 0, or either not finite.
    """
    r = _array("r", r, 0.0, strict=True)
    eps = _array("epsilon", epsilon, 0.0, strict=False)
    value = scipy.special.ndtr(eps / r - r / 2.0) + np.exp(eps + scipy.special.log_ndtr(-eps / r - r / 2.0))
    return _out(np.clip(value, 0.0, 1.0))


def laplace_hockey_stick(ratio, epsilon):
    """E_{e^ε}(Lap(Δ, s) ‖ Lap(0, s)) = (1 − e^{ε/2 − Δ/(2s)})₊, ratio = Δ/s (Thm 1 eq. 4).

    Args:
      ratio: shift over Laplace scale, Δ/s > 0.
      epsilon: ε ≥ 0.

    Returns:
      The divergence in [0, 1).

    Raises:
      ValueError: ratio ≤ 0 or ε < 0, or either not finite.
    """
    ratio = _array("ratio", ratio, 0.0, strict=True)
    eps = _array("epsilon", epsilon, 0.0, strict=False)
    return _out(np.maximum(0.0, -np.expm1(eps / 2.0 - ratio / 2.0)))


def laplace_hockey_stick_complement(ratio, epsilon):
    """1 − (1 − e^{ε/2 − Δ/(2s)})₊ = min(1, e^{ε/2 − Δ/(2s)}), ratio = Δ/s (Thm 1 eq. 4).

    Args:
      ratio: Δ/s > 0.
      epsilon: ε ≥ 0.

    Returns:
      The complement in (0, 1].

    Raises:
      ValueError: ratio ≤ 0 or ε < 0, or either not finite.
    """
    ratio = _array("ratio", ratio, 0.0, strict=True)
    eps = _array("epsilon", epsilon, 0.0, strict=False)
    return _out(np.minimum(1.0, np.exp(eps / 2.0 - ratio / 2.0)))


def _hockey(ratio, eps, noise):
    return gaussian_hockey_stick(ratio, eps) if noise == "gaussian" else laplace_hockey_stick(ratio, eps)


def _hockey_complement(ratio, eps, noise):
    if noise == "gaussian":
        return gaussian_hockey_stick_complement(ratio, eps)
    return laplace_hockey_stick_complement(ratio, eps)


def contraction_constant(step_size, smoothness, strong_convexity=0.0):
    """M = √(1 − 2ηβρ/(β+ρ)), the Lipschitz constant of the gradient map (Thm 1).

    Args:
      step_size: η > 0; must satisfy η ≤ 2/(β+ρ), the condition under which the map
        w ↦ w − η∇ℓ(w, x) is M-Lipschitz (implicit in Thm 1 via Asoodeh et al.).
      smoothness: β > 0, Lipschitz constant of ∇ℓ(·, x).
      strong_convexity: ρ with 0 ≤ ρ ≤ β (ρ = 0 gives M = 1).

    Returns:
      M in [0, 1].

    Raises:
      ValueError: a parameter outside these ranges.
    """
    eta = _finite("step_size", step_size, 0.0)
    beta = _finite("smoothness", smoothness, 0.0)
    rho = _finite("strong_convexity", strong_convexity, 0.0, strict=False)
    if rho > beta:
        _fail("strong_convexity", rho, f"must be ≤ smoothness β = {beta:g}")
    if eta > 2.0 / (beta + rho):
        _fail("step_size", eta, f"must be ≤ 2/(β+ρ) = {2.0 / (beta + rho):g} for the gradient map to contract")
    return math.sqrt(max(0.0, 1.0 - 2.0 * eta * beta * rho / (beta + rho)))


def step_constants(epsilon, sigma, lipschitz, step_size, diameter, contraction=1.0, noise="gaussian"):
    """Thm 1's A (the differing step) and 1 − B (contraction of each later step) at ε.

    Gaussian (eq. 3): A = θ(2L/σ), 1 − B = 1 − θ(M·D_K/(ησ)). Laplace (eq. 4, K = [a, b]):
    A = (1 − e^{ε/2 − L/v})₊, 1 − B = min(1, e^{ε/2 − M(b−a)/(2ηv)}).

    Args:
      epsilon: ε ≥ 0 (array or scalar).
      sigma: noise level added to the gradient before the step size: Gaussian standard
        deviation σ, or Laplace scale v; > 0 (array or scalar, broadcast against ε).
      lipschitz: L > 0.
      step_size: η > 0.
      diameter: D_K (Gaussian) or b − a (Laplace), > 0: the diameter, not the radius.
      contraction: M in [0, 1] (see `contraction_constant`).
      noise: "gaussian" or "laplace".

    Returns:
      (A, 1 − B), floats or arrays.

    Raises:
      ValueError: a parameter outside these ranges.
    """
    _choice("noise", noise, NOISES)
    lip = _finite("lipschitz", lipschitz, 0.0)
    eta = _finite("step_size", step_size, 0.0)
    diam = _finite("diameter", diameter, 0.0)
    m = _finite("contraction", contraction, 0.0, strict=False)
    if m > 1.0:
        _fail("contraction", m, "must be ≤ 1")
    sig = _array("sigma", sigma, 0.0, strict=True)
    eps = _array("epsilon", epsilon, 0.0, strict=False)
    a = _hockey(2.0 * lip / sig, eps, noise)
    if m == 0.0:  # the map is constant: one later step erases the difference
        return a, _out(np.ones(np.broadcast(eps, sig).shape))
    return a, _hockey_complement(m * diam / (eta * sig), eps, noise)


def _checked_constants(a, one_minus_b):
    a = _array("a", a, 0.0, strict=False)
    omb = _array("one_minus_b", one_minus_b, 0.0, strict=False)
    if np.any(a > 1.0):
        _fail("a", a[a > 1.0].flat[0].item(), "must be ≤ 1 (a hockey-stick divergence)")
    if np.any(omb > 1.0):
        _fail("one_minus_b", omb[omb > 1.0].flat[0].item(), "must be ≤ 1")
    return a, omb


def per_index_delta(a, one_minus_b, n, index):
    """Thm 1: δ_i = A·B^{n−i} for the entry at position i of the (unshuffled) pass.

    Args:
      a: A in [0, 1].
      one_minus_b: 1 − B in [0, 1], computed directly (B is often within 1e-10 of 1).
      n: steps in the pass, ≥ 1.
      index: position i of the differing entry, 1 ≤ i ≤ n (i = n is the worst case, δ = A).

    Returns:
      δ_i.

    Raises:
      ValueError: a parameter outside these ranges.
    """
    a, omb = _checked_constants(a, one_minus_b)
    n = _integer("n", n, 1)
    i = _integer("index", index, 1)
    if i > n:
        _fail("index", i, f"must be ≤ n = {n}")
    if n == i:
        return _out(a * np.ones_like(omb))  # B^0 = 1, also when B = 0
    with np.errstate(divide="ignore"):
        return _out(a * np.exp((n - i) * np.log1p(-omb)))


def shuffled_delta(a, one_minus_b, n):
    """Thm 2: δ = A(1 − Bⁿ)/(n(1 − B)) = (A/n)·Σ_{j<n} B^j for shuffled PNSGD.

    Args:
      a: A in [0, 1].
      one_minus_b: 1 − B in [0, 1], computed directly.
      n: dataset size = steps of the pass, ≥ 1.

    Returns:
      δ, uniform over the differing entry.

    Raises:
      ValueError: a parameter outside these ranges.
    """
    a, omb = _checked_constants(a, one_minus_b)
    n = float(_integer("n", n, 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_power = np.where(omb > 0.0, -np.expm1(n * np.log1p(-omb)) / (n * omb), 1.0)
    return _out(a * mean_power)


def random_stop_delta(a, one_minus_b, n, index=None):
    """Randomly-stopped PNSGD (Asoodeh et al. Thm 5): δ = A/(n(1 − B)), the baseline of Thm 2.

    With `index` = i, the bound the proof actually gives for the entry at position i
    (Sordello et al. Sec. 1): A(1 − B^{n−i+1})/(n(1 − B)). Its worst case, i = 1, equals
    Thm 2's shuffled δ exactly.

    Args:
      a: A in [0, 1].
      one_minus_b: 1 − B in [0, 1].
      n: ≥ 1.
      index: None for the stated uniform bound, or 1 ≤ i ≤ n.

    Returns:
      δ (may exceed 1, i.e. be vacuous; +inf when B = 1).

    Raises:
      ValueError: a parameter outside these ranges.
    """
    a, omb = _checked_constants(a, one_minus_b)
    n = _integer("n", n, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        if index is None:
            return _out(np.where(a > 0.0, a / (n * omb), 0.0))
        i = _integer("index", index, 1)
        if i > n:
            _fail("index", i, f"must be ≤ n = {n}")
        steps = float(n - i + 1)
        mean_power = np.where(omb > 0.0, -np.expm1(steps * np.log1p(-omb)) / (n * omb), steps / n)
        return _out(a * mean_power)


# --------------------------------------------------------------------------- noise schedules


def _lambertw_of_exp(log_x):
    """W(e^{log_x}) on the principal branch, for log_x beyond float range too."""
    log_x = np.asarray(log_x, dtype=float)
    out = np.empty_like(log_x)
    small = log_x < 700.0
    out[small] = scipy.special.lambertw(np.exp(log_x[small])).real
    if np.any(~small):
        big = log_x[~small]
        w = big - np.log(big)
        for _ in range(8):  # Newton on w + log w = log_x; quadratic from a close start
            w = w - (w + np.log(w) - big) / (1.0 + 1.0 / w)
        out[~small] = w
    return out


def _schedule_ratio(log_j, alpha, c1, c2, noise):
    """M·D/(η·noise_j) under the schedules of Thms 4-7 (alpha = 1: the n-calibrated ones).

    Laplace: 2·log(j^α/C1 + C2). Gaussian: 2·√W(j^{2α}/(2πC1²) + C2).
    """
    log_j = np.asarray(log_j, dtype=float)
    if noise == "laplace":
        return 2.0 * np.logaddexp(alpha * log_j - math.log(c1), math.log(c2))
    log_arg = np.logaddexp(2.0 * alpha * log_j - math.log(2.0 * math.pi * c1 * c1), math.log(c2))
    return 2.0 * np.sqrt(_lambertw_of_exp(log_arg))


def _check_schedule(c1, c2, noise, smallest_log_level=None):
    c1 = _finite("c1", c1, 0.0)
    c2 = _finite("c2", c2, 0.0)
    if noise == "laplace" and smallest_log_level is not None and not smallest_log_level > 0.0:
        _fail("c2", c2, "Laplace schedule needs j^α/c1 + c2 > 1 at every step (the log must be positive)")
    return c1, c2


def calibrated_noise(n, step_size, diameter, contraction, c1, c2, noise="gaussian"):
    """The noise level of Thm 4 (Laplace) or Thm 5 (Gaussian), fixed for a pass over n points.

    Laplace: v(n) = M(b−a)/(2η·log(n/C1 + C2)). Gaussian: σ(n) = M·D_K/(2η·√W(n²/(2πC1²) + C2)),
    W the principal Lambert W.

    Args:
      n: dataset size ≥ 1.
      step_size: η > 0.
      diameter: D_K or b − a, > 0.
      contraction: M in (0, 1].
      c1: C1 > 0 (sets the limit δ*).
      c2: C2 > 0 (Laplace: n/C1 + C2 > 1).
      noise: "gaussian" or "laplace".

    Returns:
      σ(n) or v(n).

    Raises:
      ValueError: a parameter outside these ranges.
    """
    _choice("noise", noise, NOISES)
    n = _integer("n", n, 1)
    eta = _finite("step_size", step_size, 0.0)
    diam = _finite("diameter", diameter, 0.0)
    m = _finite("contraction", contraction, 0.0)
    c1 = _finite("c1", c1, 0.0)
    c2 = _finite("c2", c2, 0.0)
    ratio = float(_schedule_ratio(math.log(n), 1.0, c1, c2, noise))
    if not ratio > 0.0:
        _fail("c2", c2, f"Laplace schedule needs n/c1 + c2 > 1, got {n / c1 + c2:g}")
    return m * diam / (eta * ratio)


def online_noise(j, step_size, diameter, contraction, c1, c2, alpha, noise="gaussian"):
    """Per-step noise of online PNSGD: v_j of Thm 6 (Laplace) or σ_j of Thm 7 (Gaussian).

    v_j = M(b−a)/(2η·log(j^α/C1 + C2)); σ_j = M·D_K/(2η·√W(j^{2α}/(2πC1²) + C2)).

    Args:
      j: step index ≥ 1 (array or scalar).
      step_size, diameter, contraction, c1, c2: as in `calibrated_noise`.
      alpha: decay exponent α > 1.
      noise: "gaussian" or "laplace".

    Returns:
      The noise level(s).

    Raises:
      ValueError: a parameter outside these ranges.
    """
    _choice("noise", noise, NOISES)
    j = _array("j", j, 1.0, strict=False)
    eta = _finite("step_size", step_size, 0.0)
    diam = _finite("diameter", diameter, 0.0)
    m = _finite("contraction", contraction, 0.0)
    c1 = _finite("c1", c1, 0.0)
    c2 = _finite("c2", c2, 0.0)
    alpha = _finite("alpha", alpha, 1.0)
    ratio = _schedule_ratio(np.log(j), alpha, c1, c2, noise)
    if np.any(ratio <= 0.0):
        _fail("c2", c2, "Laplace schedule needs j^α/c1 + c2 > 1 at every step")
    return _out(m * diam / (eta * ratio))


def shuffled_limit_delta(epsilon, c1, noise="gaussian"):
    """The n → ∞ limit of the calibrated shuffled δ: δ*_L of Thm 4 or δ*_G of Thm 5.

    δ*_L = (1 − e^{−C1 e^{ε/2}})/(C1 e^{ε/2}); δ*_G = (1 − e^{−2C1 e^{ε/2}})/(2C1 e^{ε/2}).
    A limit, not a guarantee at any finite n (the Gaussian δ approaches it at rate 1/log n).

    Args:
      epsilon: ε ≥ 0.
      c1: C1 > 0.
      noise: "gaussian" or "laplace".

    Returns:
      δ*.

    Raises:
      ValueError: a parameter outside these ranges.
    """
    _choice("noise", noise, NOISES)
    eps = _finite("epsilon", epsilon, 0.0, strict=False)
    c1 = _finite("c1", c1, 0.0)
    k = (2.0 if noise == "gaussian" else 1.0) * c1 * math.exp(eps / 2.0)
    return -math.expm1(-k) / k


def calibrate_c1(epsilon, delta_limit, noise="gaussian"):
    """C1 whose limit δ* (Thms 4, 5) is at most `delta_limit` (notes' rule, not in the paper).

    C1 = 1/(2e^{ε/2}δ*) (Gaussian) or 1/(e^{ε/2}δ*) (Laplace); the limit is then
    δ*·(1 − e^{−1/δ*}) ≤ δ*. Check the finite-n δ with `pnsgd_delta`.

    Args:
      epsilon: ε ≥ 0.
      delta_limit: target δ* in (0, 1).
      noise: "gaussian" or "laplace".

    Returns:
      C1.

    Raises:
      ValueError: a parameter outside these ranges.
    """
    _choice("noise", noise, NOISES)
    eps = _finite("epsilon", epsilon, 0.0, strict=False)
    target = _finite("delta_limit", delta_limit, 0.0)
    if target >= 1.0:
        _fail("delta_limit", target, "must be < 1")
    return 1.0 / ((2.0 if noise == "gaussian" else 1.0) * math.exp(eps / 2.0) * target)


# --------------------------------------------------------------------------- the setting


@dataclasses.dataclass(frozen=True)
class _Setting:
    """Validated parameters of one pass, with its per-pass privacy profile δ(ε)."""

    n: int
    noise: str
    variant: str
    schedule: str
    lipschitz: float
    step_size: float
    diameter: float
    contraction: float
    index: int | None
    sigma: float | None  # fixed and calibrated schedules
    c1: float | None
    c2: float | None
    alpha: float | None
    online_ratios: np.ndarray | None = dataclasses.field(default=None, repr=False)

    def constants(self, eps):
        """(A, 1 − B) at ε for a fixed noise level."""
        return step_constants(eps, self.sigma, self.lipschitz, self.step_size, self.diameter,
                              self.contraction, self.noise)

    def delta(self, eps):
        """The per-pass δ(ε) (vectorized over ε except for the online schedule)."""
        if self.schedule == "online":
            return _online_delta_from_ratios(self, float(eps))
        if self.variant == "random_stop" and self.index is None:
            # A/(n(1−B)) in log space: A and 1 − B may both underflow while their ratio is large.
            log_a, log_omb = self.log_constants(eps)
            with np.errstate(over="ignore"):
                return _out(np.exp(log_a - math.log(self.n) - log_omb))
        a, omb = self.constants(eps)
        if self.variant == "shuffled":
            return shuffled_delta(a, omb, self.n)
        if self.variant == "random_stop":
            return random_stop_delta(a, omb, self.n, self.index)
        return per_index_delta(a, omb, self.n, self.n if self.index is None else self.index)

    def log_constants(self, eps):
        """(log A, log(1 − B)) at ε for a fixed noise level, without underflow."""
        eps = _array("epsilon", eps, 0.0, strict=False)
        ratio_a = 2.0 * self.lipschitz / self.sigma
        ratio_b = self.contraction * self.diameter / (self.step_size * self.sigma)
        if self.noise == "gaussian":
            log_a = _log_gaussian_hockey_stick(ratio_a, eps)
            log_omb = _log_gaussian_hockey_stick_complement(ratio_b, eps) if ratio_b > 0.0 else np.zeros_like(eps)
        else:
            with np.errstate(divide="ignore"):
                log_a = np.log(np.maximum(0.0, -np.expm1(eps / 2.0 - ratio_a / 2.0)))
            log_omb = np.minimum(0.0, eps / 2.0 - ratio_b / 2.0)
        return log_a, log_omb

    def online_noise_at(self, j):
        return online_noise(j, self.step_size, self.diameter, self.contraction, self.c1, self.c2,
                            self.alpha, self.noise)


def _setting(n, sigma, lipschitz, step_size, diameter, smoothness, strong_convexity, noise, schedule,
             variant, index, c1, c2, alpha):
    _choice("noise", noise, NOISES)
    _choice("schedule", schedule, SCHEDULES)
    _choice("variant", variant, VARIANTS)
    n = _integer("n", n, 1)
    lip = _finite("lipschitz", lipschitz, 0.0)
    eta = _finite("step_size", step_size, 0.0)
    diam = _finite("diameter", diameter, 0.0)
    m = contraction_constant(eta, smoothness, strong_convexity)
    if index is not None:
        index = _integer("index", index, 1)
        if index > n:
            _fail("index", index, f"must be ≤ n = {n}")
        if variant == "shuffled":
            _fail("index", index, "the shuffled bound (Thm 2) is uniform over entries; give no index")
    if schedule == "fixed":
        sigma = _finite("sigma", sigma, 0.0)
        for name, value in (("c1", c1), ("c2", c2), ("alpha", alpha)):
            if value is not None:
                _fail(name, value, "only the calibrated and online schedules take c1, c2, alpha")
        return _Setting(n, noise, variant, schedule, lip, eta, diam, m, index, sigma, None, None, None)
    if sigma is not None:
        _fail("sigma", sigma, f"the {schedule} schedule sets the noise itself; give sigma=None")
    if c1 is None or c2 is None:
        _fail("c1" if c1 is None else "c2", None, f"the {schedule} schedule needs c1 and c2")
    if m == 0.0:
        _fail("contraction", m, "the calibrated/online schedules need M > 0 (strong_convexity < smoothness or smaller step)")
    if schedule == "calibrated":
        if alpha is not None:
            _fail("alpha", alpha, "only the online schedule takes alpha")
        sigma = calibrated_noise(n, eta, diam, m, c1, c2, noise)
        return _Setting(n, noise, variant, schedule, lip, eta, diam, m, index, sigma, float(c1), float(c2), None)
    if variant != "per_index":
        _fail("variant", variant, "the online schedule (Thms 6, 7) is per entry: use variant='per_index'")
    if alpha is None:
        _fail("alpha", alpha, "the online schedule needs alpha > 1")
    alpha = _finite("alpha", alpha, 1.0)
    c1 = _finite("c1", c1, 0.0)
    c2 = _finite("c2", c2, 0.0)
    online_noise(1, eta, diam, m, c1, c2, alpha, noise)  # validates the schedule at its first step
    i = n if index is None else index
    stop = min(n, i + ONLINE_EXACT_STEPS)
    ratios = _schedule_ratio(np.log(np.arange(i, stop + 1, dtype=float)), alpha, c1, c2, noise)
    return _Setting(n, noise, variant, schedule, lip, eta, diam, m, index, None, c1, c2, alpha, ratios)


def _online_log_b(setting, eps, ratio):
    """log B_t from the schedule ratio M·D/(ησ_t)."""
    omb = _hockey_complement(ratio, eps, setting.noise)
    with np.errstate(divide="ignore"):
        return np.log1p(-omb)


def _log_b_times_x(u, eps, alpha, c1, c2, noise):
    """x·log B(x) at x = e^u under the online schedule, without overflow for large u.

    Written as −exp(u + log(1−B))·(−log1p(−(1−B))/(1−B)) with log(1−B) in log space.
    """
    ratio = float(_schedule_ratio(u, alpha, c1, c2, noise))
    if noise == "gaussian":
        log_omb = float(np.logaddexp(scipy.special.log_ndtr(eps / ratio - ratio / 2.0),
                                     eps + scipy.special.log_ndtr(-eps / ratio - ratio / 2.0)))
    else:
        log_omb = eps / 2.0 - ratio / 2.0
    log_omb = min(log_omb, 0.0)
    if log_omb == 0.0:
        return -math.inf
    omb = math.exp(log_omb)
    factor = -math.log1p(-omb) / omb if omb > 0.0 else 1.0
    return -factor * math.exp(min(u + log_omb, 709.0))


def _online_delta_from_ratios(setting, eps):
    """δ_i(n) = A_i·Π_{t=i+1}^n B_t (Thms 6, 7, finite n); tail beyond the exact steps bounded above.

    log B_t is increasing in t, so Σ_{t=m}^n log B_t ≤ ∫_m^{n+1} log B(x) dx: the integral
    (plus quad's error estimate) keeps δ an upper bound.
    """
    ratios = setting.online_ratios
    # A_i: shift 2ηL over noise ησ_i, i.e. 2L/σ_i = 2Lη·ratio_i/(M·D).
    a = float(_hockey(2.0 * setting.lipschitz * setting.step_size * ratios[0]
                      / (setting.contraction * setting.diameter), eps, setting.noise))
    if a == 0.0:
        return 0.0
    log_sum = float(np.sum(_online_log_b(setting, eps, ratios[1:]))) if ratios.size > 1 else 0.0
    i = setting.n if setting.index is None else setting.index
    first_tail = i + ratios.size  # first step not summed exactly
    if first_tail <= setting.n and math.isfinite(log_sum):
        value, error = scipy.integrate.quad(_log_b_times_x, math.log(first_tail), math.log(setting.n + 1.0),
                                      args=(eps, setting.alpha, setting.c1, setting.c2, setting.noise),
                                      limit=200, epsabs=0.0, epsrel=1e-10)
        log_sum += value + abs(error)
    return a * math.exp(min(log_sum, 0.0))


def online_delta(epsilon, n, index, lipschitz, step_size, diameter, contraction, c1, c2, alpha,
                 noise="gaussian"):
    """Thms 6, 7 at finite n: δ_i(n) = A_i·Π_{t=i+1}^n B_t for the entry at position i.

    The first ONLINE_EXACT_STEPS factors are multiplied exactly; beyond them the sum of
    log B_t is bounded above by its integral, so the result never understates δ.

    Args:
      epsilon: ε ≥ 0.
      n: steps so far ≥ 1.
      index: position i, 1 ≤ i ≤ n (i = n, the latest entry, is the worst: δ = A_n).
      lipschitz, step_size, diameter, contraction: L, η, D_K or b − a, M in (0, 1].
      c1, c2: schedule constants > 0.
      alpha: α > 1.
      noise: "gaussian" or "laplace".

    Returns:
      δ_i(n).

    Raises:
      ValueError: a parameter outside these ranges.
    """
    _choice("noise", noise, NOISES)
    eps = _finite("epsilon", epsilon, 0.0, strict=False)
    n = _integer("n", n, 1)
    i = _integer("index", index, 1)
    if i > n:
        _fail("index", i, f"must be ≤ n = {n}")
    m = _finite("contraction", contraction, 0.0)
    if m > 1.0:
        _fail("contraction", m, "must be ≤ 1")
    lip = _finite("lipschitz", lipschitz, 0.0)
    eta = _finite("step_size", step_size, 0.0)
    diam = _finite("diameter", diameter, 0.0)
    alpha = _finite("alpha", alpha, 1.0)
    online_noise(1, eta, diam, m, c1, c2, alpha, noise)
    stop = min(n, i + ONLINE_EXACT_STEPS)
    ratios = _schedule_ratio(np.log(np.arange(i, stop + 1, dtype=float)), alpha, float(c1), float(c2), noise)
    setting = _Setting(n, noise, "per_index", "online", lip, eta, diam, m, i, None, float(c1), float(c2),
                       alpha, ratios)
    return _online_delta_from_ratios(setting, eps)


def online_limit_delta(epsilon, index, lipschitz, step_size, diameter, contraction, c1, c2, alpha,
                       noise="gaussian", lower=False):
    """The paper's n → ∞ value δ^{*,o} of Thm 6 (Laplace) or Thm 7 (Gaussian), for entry i.

    δ^{*,o} = A_i·exp(∫_{i+1}^∞ log B(x) dx), an upper bound on lim_n δ_i(n) (the sum of the
    increasing log B_t bounded by an integral); with lower=True the integral starts at i,
    a lower bound on the limit (App. E). Neither is a guarantee at finite n: δ_i(n) ≥ the
    limit for every n. Use `online_delta` for the ledger.

    Args:
      epsilon: ε ≥ 0.
      index: i ≥ 1.
      lipschitz, step_size, diameter, contraction, c1, c2, alpha, noise: as in `online_delta`.
      lower: integrate from i instead of i + 1.

    Returns:
      The limit bound.

    Raises:
      ValueError: a parameter outside these ranges.
    """
    _choice("noise", noise, NOISES)
    eps = _finite("epsilon", epsilon, 0.0, strict=False)
    i = _integer("index", index, 1)
    sigma_i = online_noise(i, step_size, diameter, contraction, c1, c2, alpha, noise)
    a = float(_hockey(2.0 * _finite("lipschitz", lipschitz, 0.0) / sigma_i, eps, noise))
    start = math.log(i if lower else i + 1.0)
    value, _ = scipy.integrate.quad(_log_b_times_x, start, math.inf,
                                    args=(eps, float(alpha), float(c1), float(c2), noise),
                                    limit=400, epsabs=0.0, epsrel=1e-10)
    return a * math.exp(value)


# --------------------------------------------------------------------------- composition


def profile_pld(epsilons, deltas, value_discretization_interval=1e-4):
    """A dp_accounting PLD dominating every mechanism that is (ε_k, δ_k)-DP for all k.

    The trade-off function f = max_k f_{ε_k, δ_k} (Dong, Roth, Su 2019, Prop. 2.12; f is
    symmetric) is piecewise linear; a segment of slope −e^s and length ℓ is an atom of
    privacy loss s with mass e^s·ℓ, and 1 − f(0) = min_k δ_k is the mass at +∞. Losses are
    rounded up to the grid (pessimistic, as dp_accounting's own from_privacy_parameters).
    This goes beyond seed 002 (Remark 3 names no formula).

    Args:
      epsilons: ε_k ≥ 0.
      deltas: δ_k, same length, in [0, 1] (larger values are clipped to 1).
      value_discretization_interval: loss grid of the PLD, > 0.

    Returns:
      A symmetric dp_accounting PrivacyLossDistribution.

    Raises:
      ValueError: mismatched or out-of-range inputs.
    """
    from dp_accounting.pld import privacy_loss_distribution

    eps = _array("epsilons", epsilons, 0.0, strict=False).ravel()
    dlt = _array("deltas", deltas, 0.0, strict=False).ravel()
    if eps.size == 0 or eps.shape != dlt.shape:
        _fail("deltas", dlt.shape, f"must match epsilons' shape {eps.shape} and be non-empty")
    step = _finite("value_discretization_interval", value_discretization_interval, 0.0)
    dlt = np.minimum(dlt, 1.0)
    # Lines of f, each c − s·α with c = e^{−b}(1 − δ) and s = e^{e}:
    #   (1−δ_k) − e^{ε_k}α (b = 0, e = ε_k, loss ε_k);  e^{−ε_k}(1−δ_k−α) (b = ε_k, e = −ε_k, loss −ε_k);
    #   the zero line (s = 0, c = 0: e = −inf, b = +inf) closes the hull.
    # Intercept and slope differences are formed with expm1 and δ differences, so that
    # δ_k far below 1e-16 keep their relative precision (1 − δ would round them away).
    lines = [(e, 0.0, d, e) for e, d in zip(eps, dlt)] + [(-e, e, d, -e) for e, d in zip(eps, dlt) if e > 0.0]
    zero = (-math.inf, math.inf, 0.0, -math.inf)

    def slope_gap(p, q):  # s_p − s_q for e_p > e_q
        if q[0] == -math.inf:
            return math.exp(p[0])
        return math.exp(p[0]) * -math.expm1(q[0] - p[0])

    def intercept_gap(p, q):  # c_p − c_q
        if q is zero:
            return math.exp(-p[1]) * (1.0 - p[2])
        if p[1] == q[1]:
            return math.exp(-p[1]) * (q[2] - p[2])
        # e^{−b_p}(1 − δ_p) − e^{−b_q}(1 − δ_q) = (e^{−b_p} − e^{−b_q}) − e^{−b_p}δ_p + e^{−b_q}δ_q
        if p[1] < q[1]:
            base = math.exp(-p[1]) * -math.expm1(p[1] - q[1])
        else:
            base = -math.exp(-q[1]) * -math.expm1(q[1] - p[1])
        return base - math.exp(-p[1]) * p[2] + math.exp(-q[1]) * q[2]

    def crossing(p, q):  # α where q (less steep) overtakes p
        return intercept_gap(p, q) / slope_gap(p, q)

    # Steepest first; equal slopes keep the larger intercept (smaller δ for the same b).
    ordered = sorted(lines, key=lambda line: (-line[0], line[2])) + [zero]
    hull: list[tuple] = []
    for line in ordered:
        if hull and hull[-1][0] == line[0]:
            continue
        while len(hull) >= 2 and crossing(hull[-2], line) <= crossing(hull[-2], hull[-1]):
            hull.pop()
        hull.append(line)
    while len(hull) >= 2 and crossing(hull[0], hull[1]) <= 0.0:
        hull.pop(0)  # active only at α < 0
    pmf: dict[int, float] = {}
    begin = 0.0
    for p, q in itertools.pairwise(hull):
        end = crossing(p, q)
        mass = math.exp(p[0]) * (end - begin)
        if mass > 0.0:
            key = math.ceil(p[3] / step)
            pmf[key] = pmf.get(key, 0.0) + mass
        begin = end
    first = hull[0]
    infinity_mass = float(first[2]) if first[1] == 0.0 else float(1.0 - math.exp(-first[1]) * (1.0 - first[2]))
    return privacy_loss_distribution.PrivacyLossDistribution.create_from_rounded_probability(
        pmf, infinity_mass, step, pessimistic_estimate=True)


def _profile_grid(setting, tail_floor):
    """ε grid on [0, ε_max] with δ(ε_max) ≤ tail_floor (or ε_max at the cap)."""
    top = 1.0
    while top < _PROFILE_EPS_CAP and float(setting.delta(top)) > tail_floor:
        top *= 2.0
    eps = np.linspace(0.0, top, _PROFILE_POINTS + 1)
    return eps, np.asarray(setting.delta(eps), dtype=float)


# --------------------------------------------------------------------------- entry points


def _epsilon_for_delta(delta_fn, target):
    """Smallest ε (to _EPS_TOL, rounded up) with δ(ε) ≤ target; δ is non-increasing in ε."""
    if float(delta_fn(0.0)) <= target:
        return 0.0
    low, high = 0.0, 1.0
    while float(delta_fn(high)) > target:
        low, high = high, 2.0 * high
        if high > _EPS_CAP:
            raise ValueError(f"delta={target!r}: not reached for any ε ≤ {_EPS_CAP:g}")
    while high - low > _EPS_TOL * max(1.0, high):
        mid = 0.5 * (low + high)
        if float(delta_fn(mid)) <= target:
            high = mid
        else:
            low = mid
    return high


def _describe(setting, epochs, composition, conversion):
    text = _THEOREMS[(setting.variant, setting.noise)]
    schedule = _SCHEDULE_TEXT[setting.schedule]
    text += "; " + (schedule if isinstance(schedule, str) else schedule[setting.noise])
    if epochs > 1:
        if composition == "basic":
            text += f"; {epochs} epochs by basic composition (Eε₀, E·δ(ε₀)) (beyond the paper, Remark 3)"
        else:
            text += (f"; {epochs} epochs composed by dp_accounting PLD of the per-epoch privacy profile "
                     "(trade-off function max_ε f_(ε,δ(ε)), pessimistic; beyond the paper, Remark 3)")
    return text + "; " + conversion + "; covers releasing " + _release(setting)


def _release(setting):
    if setting.variant == "random_stop":
        return "only the iterate at the secret uniform stopping time τ"
    if setting.schedule == "online":
        return "only the iterate after step n (each further publication composes)"
    return "only the final iterate of each epoch"


def _report(setting, epochs, composition, eps, dlt, conversion, extra):
    out = {
        "epsilon": float(eps),
        "delta": float(dlt),
        "method": _describe(setting, epochs, composition, conversion),
        "noise": setting.noise,
        "variant": setting.variant,
        "schedule": setting.schedule,
        "n": setting.n,
        "epochs": epochs,
        "composition": composition if epochs > 1 else None,
        "index": setting.n if setting.index is None and setting.variant == "per_index" else setting.index,
        "contraction": setting.contraction,
        "release": _release(setting),
    }
    if setting.schedule == "online":
        i = out["index"]
        out["sigma_index"] = float(setting.online_noise_at(i))
        out["sigma_last"] = float(setting.online_noise_at(setting.n))
    else:
        out["sigma"] = setting.sigma
    out.update(extra)
    return out


def _common(n, sigma, lipschitz, step_size, diameter, smoothness, strong_convexity, noise, schedule, variant,
            index, c1, c2, alpha, epochs, composition, pld_discretization):
    setting = _setting(n, sigma, lipschitz, step_size, diameter, smoothness, strong_convexity, noise,
                       schedule, variant, index, c1, c2, alpha)
    epochs = _integer("epochs", epochs, 1)
    _choice("composition", composition, COMPOSITIONS)
    if epochs > 1 and schedule == "online":
        _fail("epochs", epochs, "the online schedule is a single pass over a stream")
    step = _finite("pld_discretization", pld_discretization, 0.0)
    return setting, epochs, step


def _single_pass_extra(setting, eps):
    extra = {}
    if setting.schedule != "online":
        a, omb = setting.constants(eps)
        extra.update(a=float(a), one_minus_b=float(omb))
    if setting.schedule == "calibrated" and setting.variant == "shuffled":
        extra["delta_limit"] = shuffled_limit_delta(eps, setting.c1, setting.noise)
    if setting.schedule == "online":
        i = setting.n if setting.index is None else setting.index
        extra["delta_limit"] = online_limit_delta(eps, i, setting.lipschitz, setting.step_size, setting.diameter,
                                                  setting.contraction, setting.c1, setting.c2, setting.alpha,
                                                  setting.noise)
    return extra


def pnsgd_delta(n, sigma, epsilon, lipschitz, step_size, diameter, smoothness, *, strong_convexity=0.0,
                noise="gaussian", variant="shuffled", schedule="fixed", index=None, c1=None, c2=None, alpha=None,
                epochs=1, composition="pld", pld_discretization=1e-4):
    """δ at a given ε for PNSGD (Thm 2 by default; the paper's figures plot this against n).

    Args:
      n: dataset size = steps per epoch (batch size 1), ≥ 1.
      sigma: noise level added to the gradient before the step size (noise ~ η·Z): the
        Gaussian standard deviation σ, or the Laplace scale v. Required for
        schedule="fixed"; must be None for the other schedules, which set it.
      epsilon: ε ≥ 0 of the whole run (all epochs).
      lipschitz: L > 0, Lipschitz constant of ℓ(·, x).
      step_size: η > 0, with η ≤ 2/(β+ρ).
      diameter: diameter of the constraint set K (D_K; b − a for Laplace, where K = [a, b]
        must be one-dimensional). A ball of radius R has diameter 2R.
      smoothness: β > 0, Lipschitz constant of ∇ℓ(·, x).
      strong_convexity: ρ in [0, β]; M = √(1 − 2ηβρ/(β+ρ)).
      noise: "gaussian" (eq. 3) or "laplace" (eq. 4).
      variant: "shuffled" (Thm 2), "random_stop" (Asoodeh et al. Thm 5, releases w_τ) or
        "per_index" (Thm 1; the entry at position `index`).
      schedule: "fixed" (sigma given), "calibrated" (σ(n), v(n) of Thms 5, 4; needs c1, c2)
        or "online" (σ_j, v_j of Thms 7, 6; needs c1, c2, alpha; variant "per_index").
      index: position i of the differing entry for "per_index" and "online"; None means
        the worst position i = n. Not allowed for "shuffled".
      c1, c2: schedule constants > 0 (Laplace: log argument > 1).
      alpha: online decay exponent > 1.
      epochs: passes E ≥ 1, each with a fresh secret permutation, releasing only its last
        iterate (Remark 3; not for "online").
      composition: "pld" (numerical composition of the per-epoch privacy profile) or
        "basic" ((ε/E, δ(ε/E)) per epoch); used only when epochs > 1.
      pld_discretization: loss grid of the PLD, > 0 (ε error ≲ E times this).

    Returns:
      A JSON-serializable dict: epsilon, delta, method (theorem and conversion), release
      (what the guarantee covers), and the parameters and intermediate values (sigma, a,
      one_minus_b, delta_limit, ...). delta is the bound as the theorem states it; the
      randomly-stopped one can exceed 1 (vacuous).

    Raises:
      ValueError: a parameter outside the theorem's conditions, naming it and the rule.
    """
    setting, epochs, step = _common(n, sigma, lipschitz, step_size, diameter, smoothness, strong_convexity, noise,
                                    schedule, variant, index, c1, c2, alpha, epochs, composition,
                                    pld_discretization)
    eps = _finite("epsilon", epsilon, 0.0, strict=False)
    if epochs == 1:
        dlt = float(setting.delta(eps))
        how = (f"δ_i(n) as the exact product of the first {ONLINE_EXACT_STEPS} factors B_t, an integral upper "
               "bound beyond"
               if setting.schedule == "online" else "δ(ε) in closed form")
        return _report(setting, 1, composition, eps, dlt, how,
                       _single_pass_extra(setting, eps))
    per_epoch_eps = eps / epochs
    basic = epochs * float(setting.delta(per_epoch_eps))
    if composition == "basic":
        return _report(setting, epochs, composition, eps, basic, "basic composition, δ = E·δ(ε/E)",
                       {"per_epoch_epsilon": per_epoch_eps, "per_epoch_delta": basic / epochs})
    grid, deltas = _profile_grid(setting, min(basic, 1.0) * 1e-6 / epochs)
    composed = profile_pld(grid, deltas, step).self_compose(epochs)
    dlt = min(float(composed.get_delta_for_epsilon(eps)), basic)
    return _report(setting, epochs, composition, eps, dlt, "δ read off the composed PLD",
                   {"basic_composition_delta": basic})


def pnsgd_epsilon(n, sigma, delta, lipschitz, step_size, diameter, smoothness, *, strong_convexity=0.0,
                  noise="gaussian", variant="shuffled", schedule="fixed", index=None, c1=None, c2=None, alpha=None,
                  epochs=1, composition="pld", pld_discretization=1e-4):
    """ε at a target δ for PNSGD (Thm 2 by default), by bisection on the decreasing δ(ε).

    Args:
      n, sigma, lipschitz, step_size, diameter, smoothness, strong_convexity, noise, variant,
        schedule, index, c1, c2, alpha, epochs, composition, pld_discretization: as in
        `pnsgd_delta`.
      delta: target δ of the whole run, in (0, 1).

    Returns:
      A JSON-serializable dict: epsilon (rounded up: δ(ε) ≤ delta holds), delta, method,
      release, and the parameters and intermediate values. With composition="pld" the
      reported ε is the smaller of the PLD's and basic composition's (both valid).

    Raises:
      ValueError: a parameter outside the theorem's conditions, naming it and the rule, or
        a delta no ε ≤ 1e5 reaches.
    """
    setting, epochs, step = _common(n, sigma, lipschitz, step_size, diameter, smoothness, strong_convexity, noise,
                                    schedule, variant, index, c1, c2, alpha, epochs, composition,
                                    pld_discretization)
    target = _finite("delta", delta, 0.0)
    if target >= 1.0:
        _fail("delta", target, "must be < 1")
    if epochs == 1:
        eps = _epsilon_for_delta(setting.delta, target)
        return _report(setting, 1, composition, eps, target, "ε by bisection on δ(ε) (rounded up)",
                       _single_pass_extra(setting, eps))
    per_epoch_eps = _epsilon_for_delta(setting.delta, target / epochs)
    basic = epochs * per_epoch_eps
    if composition == "basic":
        return _report(setting, epochs, composition, basic, target,
                       "basic composition, ε = E·ε₀ with δ(ε₀) = δ/E (ε₀ by bisection, rounded up)",
                       {"per_epoch_epsilon": per_epoch_eps, "per_epoch_delta": target / epochs})
    grid, deltas = _profile_grid(setting, target * 1e-6 / epochs)
    composed = profile_pld(grid, deltas, step).self_compose(epochs)
    eps = min(float(composed.get_epsilon_for_delta(target)), basic)
    return _report(setting, epochs, composition, eps, target, "ε read off the composed PLD",
                   {"basic_composition_epsilon": basic})
