"""Tight accounting of P_vec (seed 000, Algorithm 2): a proven Rényi-DP bound
for the whole d-coordinate count vector, and the noise calibrated with it.

What the analyzer sees is, per coordinate j, the count C_j = Σ_i x̂_ij + Z_j,
with x̂_ij ∈ {0..g} user i's randomized rounding of u_ij = (x_ij + Δ₂)·g/(2Δ₂)
and Z_j ~ Bin(N, p), N = n·b_noise, independent across coordinates (the
shuffled multiset of labelled bits is a function of these counts, and the
counts of it: Lemma A.2 of seed 000). Neighbouring inputs replace one user's
x by x' with ‖x‖₂, ‖x'‖₂ ≤ Δ₂.

The argument, step by step (every step is an inequality, never an estimate):

1. Others' contributions. Given the other users' roundings, both outputs
   are shifted by the same vector, which changes no divergence; the output
   is a mixture over those roundings with the same weights on both sides,
   and exp((α−1)D_α) is jointly convex, so the bound for fixed others holds.
2. The user's own rounding. Round with one uniform per coordinate shared by
   x and x' (x̂ = ⌊u + U⌋ is randomized rounding); then the shift
   s_j = x̂_j − x̂'_j lies in {⌊a_j⌋, ⌈a_j⌉}, a_j = u_j − u'_j, so |s_j| ≤ ⌈|a_j|⌉,
   and ‖a‖₂ ≤ g because ‖x − x'‖₂ ≤ 2Δ₂. By joint convexity again it is
   enough to bound every integer vector s with |s_j| ≤ g and
   Σ_j (|s_j| − 1)₊² < g² (as |a_j| > |s_j| − 1).
3. One coordinate, shift s. Split Z = Σ_{t≤s} Z_t into s independent
   binomials of at least ⌊N/s⌋ trials each; Z + s = Σ_t (Z_t + 1) is a
   post-processing of the s pairs (Z_t + 1, Z_t), so its divergence is at most
   s times that of one shift by 1 on Bin(⌊N/s⌋, p) (additivity under products,
   data processing). More trials is post-processing too (add an independent
   Bernoulli), so any M ≤ ⌊N/s⌋ trials give an upper bound: we evaluate
   shifts by one on a geometric ladder of M.
3'. Shift by one on many trials. Split Bin(M, p) further into K pieces of
   m trials (Km ≤ M) and give the +1 to a uniformly random piece J: the sum
   has the same law, so D_α(Z + 1 ‖ Z) is at most the divergence of the tuple
   with a random piece shifted against the unshifted tuple. Its likelihood
   ratio is the mean S̄ of K independent copies of one piece's ratio L, so at
   integer α, E[S̄^α] follows exactly from L's central moments (cumulants of S̄
   are L's divided by K^(j−1)); non-integer α use ⌈α⌉ (D_α grows with α).
   This keeps every window small whatever the noise variance.
4. Shift by one, exactly. Bin(M, p) + 1 and Bin(M, p) have different
   supports, so their Rényi divergence is infinite; we use δ-approximate RDP
   (as in Bun–Steinke's approximate zCDP): both are restricted to a window W
   of ±14 standard deviations, where the Rényi divergence of the restricted
   pair is a finite sum computed exactly (pmf from scipy/Boost, ratios in
   closed form), and δ_a = the larger mass outside W (exact binomial tails).
   Approximate RDP composes (RDP values add, δ_a add) and survives
   post-processing; it converts to (ε, δ_r + δ_a)-DP by the conversion of
   `rdp.rdp_to_dp` applied to the restricted pair. Both directions of the
   shift are bounded (neighbours are symmetric).
5. The worst vector. With φ_α(s) the bound of step 3 for |s_j| = s, the
   d coordinates' total is Σ_j φ_α(s_j) under Σ_j (s_j − 1)₊² < g²; for any
   λ ≥ 0 weak duality bounds it by λg² + d·max_s (φ_α(s) − λ(s − 1)₊²)₊, and
   we take the best λ on a grid, order by order.

Rounds that see the same users compose by adding the RDP curves before one
conversion (fully interactive runs); disjoint batches compose in parallel.

Numerical error: sums are of positive terms with relative error below 1e-12
(Boost's pmf, log/expm1); we add 1e-9 relative and 1e-15 absolute to every
shift-by-one value, far above that error (the errors are relative to the values).
The series of step 3' is checked for cancellation and refuses pieces of small variance.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import scipy  # submodules load on first use (scipy.stats alone costs 0.5 s per process)

from pipeline.accounting.rdp import rdp_to_dp

# Orders for P_vec: dense where binomial mechanisms at ε ∈ [0.05, 15] and
# δ ∈ [1e-12, 0.1] have their optimum.
ORDERS = np.array([1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0, 48.0, 64.0,
                   96.0, 128.0, 256.0])
WINDOW_SDS = 14.0  # half-width of the window W, in standard deviations of Bin(M, p)
LADDER_RATIO = 1.08  # shifts s in (s_{k−1}, s_k] use M = ⌊N/s_k⌋ trials
MAX_PIECE_VARIANCE = 2.5e5  # larger shifts by one are split into pieces of this variance (step 3')
_RELATIVE_MARGIN, _ABSOLUTE_MARGIN = 1e-9, 1e-15
_LAMBDAS = np.geomspace(1e-4, 1e4, 161)  # multipliers, relative to φ(g)/g²


@dataclasses.dataclass(frozen=True)
class PvecRdp:
    """A δ-approximate RDP bound for one P_vec call.

    Attributes:
      orders: the Rényi orders α.
      rdp: the bound on D_α for every pair of neighbouring inputs.
      delta_approx: δ_a, the mass set aside by the windows (step 4).
    """

    orders: np.ndarray
    rdp: np.ndarray
    delta_approx: float


@functools.lru_cache(maxsize=65536)
def shift_by_one(trials: int, p: float) -> tuple[np.ndarray, float]:
    """Approximate-RDP bound of Bin(M, p) + 1 against Bin(M, p), both directions.

    Args:
      trials: M ≥ 1.
      p: 0 < p < 1.

    Returns:
      (max over both directions of D_α of the restricted pair at every order
      in ORDERS, δ_a = the larger probability outside the window).
    """
    q = 1.0 - p
    mean, sd = trials * p, math.sqrt(trials * p * q)
    lo = max(1, math.floor(mean - WINDOW_SDS * sd))
    hi = min(trials, math.ceil(mean + WINDOW_SDS * sd))
    z = np.arange(lo, hi + 1, dtype=np.float64)
    binom = scipy.stats.binom(trials, p)
    # Z outside W under Bin(M, p); Z + 1 outside W under the shifted law.
    outside = max(binom.cdf(lo - 1) + binom.sf(hi), binom.cdf(lo - 2) + binom.sf(hi - 1))
    weights = binom.pmf(z)
    weights /= weights.sum()  # the law of Bin(M, p) restricted to W
    log_ratio = np.log(z * q) - np.log((trials - z + 1.0) * p)  # ln P(z−1)/P(z)
    exponents = np.concatenate([ORDERS, 1.0 - ORDERS, [1.0]])[:, None] * log_ratio[None, :]
    # ln E[R^a] under the restricted law, precisely near 0 (small shifts) and without overflow far from it.
    small = np.abs(exponents).max(axis=1) < 0.5
    log_moments = np.where(
        small,
        np.log1p(np.einsum("ij,j->i", np.expm1(np.where(small[:, None], exponents, 0.0)), weights)),
        scipy.special.logsumexp(exponents, axis=1, b=weights),
    )
    up, down, first = log_moments[: ORDERS.size], log_moments[ORDERS.size: -1], log_moments[-1]
    # Step 4: P' = P₀ on W, Q' = P₀·R on W renormalized (R = P(z−1)/P(z)).
    forward = (up - ORDERS * first) / (ORDERS - 1.0)  # D_α(shifted ‖ unshifted)
    backward = down / (ORDERS - 1.0) + first  # D_α(unshifted ‖ shifted)
    bound = np.maximum(forward, backward)
    return np.maximum(bound, 0.0) * (1.0 + _RELATIVE_MARGIN) + _ABSOLUTE_MARGIN, float(outside)


def _central_moments(trials: int, p: float, step: int) -> tuple[np.ndarray, float]:
    """Central moments E[(L − 1)^k], k ≤ max order, of the ratio L of Bin(M, p) + step
    to Bin(M, p), both restricted to a window (step 4), under the restricted Bin(M, p).

    Returns:
      (moments as longdouble, the larger probability outside the window).
    """
    q = 1.0 - p
    mean, sd = trials * p, math.sqrt(trials * p * q)
    binom = scipy.stats.binom(trials, p)
    if step == 1:  # R(z) = P(z − 1)/P(z) on W ⊂ [1, M]
        lo, hi = max(1, math.floor(mean - WINDOW_SDS * sd)), min(trials, math.ceil(mean + WINDOW_SDS * sd))
        z = np.arange(lo, hi + 1, dtype=np.float64)
        ratio = (z * q) / ((trials - z + 1.0) * p)
        outside = max(binom.cdf(lo - 1) + binom.sf(hi), binom.cdf(lo - 2) + binom.sf(hi - 1))
    else:  # R(z) = P(z + 1)/P(z) on W ⊂ [0, M − 1]
        lo, hi = max(0, math.floor(mean - WINDOW_SDS * sd)), min(trials - 1, math.ceil(mean + WINDOW_SDS * sd))
        z = np.arange(lo, hi + 1, dtype=np.float64)
        ratio = ((trials - z) * p) / ((z + 1.0) * q)
        outside = max(binom.cdf(lo - 1) + binom.sf(hi), binom.cdf(lo) + binom.sf(hi + 1))
    weights = binom.pmf(z).astype(np.longdouble)
    weights /= weights.sum()
    ratio = ratio.astype(np.longdouble)
    centred = ratio / np.dot(weights, ratio) - 1.0  # L − 1, E[L] = 1 on the restricted pair
    moments = np.empty(_SERIES_LENGTH, dtype=np.longdouble)
    power = np.ones_like(centred)
    for k in range(_SERIES_LENGTH):
        moments[k] = np.dot(weights, power)
        power *= centred
    moments[1] = 0.0  # exactly, E[L − 1] = 0
    return moments, float(outside)


_SERIES_LENGTH = int(math.ceil(ORDERS.max())) + 1
_FACTORIALS = np.cumprod(np.concatenate([[1.0], np.arange(1, _SERIES_LENGTH)]).astype(np.longdouble))


@functools.lru_cache(maxsize=64)
def _log_moment_series(trials: int, p: float, step: int) -> tuple[np.ndarray, float]:
    """Coefficients y_j = κ_j/j! of log E[e^{t(L − 1)}] (the cumulants of L), by the
    series logarithm (1 + u)y′ = u′, with the window's set-aside mass."""
    moments, outside = _central_moments(trials, p, step)
    u = moments / _FACTORIALS
    u[0] = 0.0
    y = np.zeros_like(u)
    for j in range(2, _SERIES_LENGTH):
        i = np.arange(1, j)
        y[j] = u[j] - np.dot(i * y[1:j], u[j - 1:0:-1]) / j
    return y, outside


# α!/(α − j)! for every order's ⌈α⌉ (rows) and j (columns), zero for j > ⌈α⌉.
_FALLING = np.array([np.concatenate([np.cumprod(np.concatenate([[1.0], a - np.arange(a)]).astype(np.longdouble)),
                                     np.zeros(_SERIES_LENGTH - a - 1, dtype=np.longdouble)])
                     for a in np.ceil(ORDERS).astype(int)])


def split_shift_by_one(piece_trials: int, pieces: np.ndarray, p: float) -> tuple[np.ndarray, np.ndarray]:
    """Approximate-RDP bounds of a shift by one on ≥ K·piece_trials trials, for several K (step 3').

    Args:
      piece_trials: m, the trials of each piece.
      pieces: the K ≥ 1 to evaluate.
      p: 0 < p < 1.

    Returns:
      (bounds of shape (orders, len(pieces)), max of both directions; set-aside masses K·δ_a(piece)).

    Raises:
      ArithmeticError: a piece variance below 10⁴, or a sum that cancels beyond 10⁻⁶ of its
        terms' magnitude (the series would no longer be an upper bound to rounding error).
    """
    if piece_trials * p * (1.0 - p) < 1e4:
        raise ArithmeticError(f"split pieces need variance ≥ 1e4, got {piece_trials * p * (1.0 - p):.3g}")
    pieces = np.asarray(pieces, dtype=np.longdouble)
    bound = np.zeros((ORDERS.size, pieces.size))
    set_aside = np.zeros(pieces.size)
    j = np.arange(_SERIES_LENGTH)
    for step in (1, -1):
        y, outside = _log_moment_series(piece_trials, p, step)
        set_aside = np.maximum(set_aside, np.asarray(pieces, dtype=float) * outside)
        # Cumulants of S̄ − 1 are κ_j(L)/K^(j−1); then E[e^{t(S̄−1)}] = exp(v(t)) = Σ w_j t^j.
        v = y[None, :] / np.power(pieces[:, None], np.maximum(j - 1, 0).astype(np.longdouble)[None, :])
        w = np.zeros_like(v)
        w[:, 0] = 1.0
        for n in range(1, _SERIES_LENGTH):
            w[:, n] = (v[:, 1:n + 1] * j[1:n + 1] * w[:, n - 1::-1]).sum(axis=1) / n
        # E[S̄^α] = Σ_j α!/(α − j)!·w_j; the j ≥ 2 terms are the (small) excess over 1.
        excess = _FALLING[:, 2:] @ w[:, 2:].T
        if np.any(excess < 1e-6 * (_FALLING[:, 2:] @ np.abs(w[:, 2:]).T)):
            raise ArithmeticError("the moment series of a split shift cancels; use larger pieces")
        bound = np.maximum(bound, np.log1p(excess).astype(float) / (np.ceil(ORDERS)[:, None] - 1.0))
    return bound * (1.0 + _RELATIVE_MARGIN) + _ABSOLUTE_MARGIN, np.minimum(1.0, set_aside)


def _ladder(max_shift: int) -> np.ndarray:
    """Bucket tops s_k: every shift s ≤ max_shift lies in some (s_{k−1}, s_k]."""
    tops, top = [], 1
    while top < max_shift:
        tops.append(top)
        top = max(top + 1, math.floor(top * LADDER_RATIO))
    tops.append(max_shift)
    return np.array(tops, dtype=np.int64)


def coordinate_bounds(trials: int, p: float, max_shift: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Step 3: φ_α(s) ≤ s·r_k on each bucket (s_{k−1}, s_k] of shifts.

    Args:
      trials: N, the noise trials of one coordinate (n·b_noise).
      p: the noise bits' probability.
      max_shift: g, the largest shift of one coordinate.

    Returns:
      (bucket lows, bucket tops, r of shape (orders, buckets), δ_a per unit of shift).
    """
    tops = _ladder(max_shift)
    lows = np.concatenate([[1], tops[:-1] + 1])
    per_unit = np.empty((ORDERS.size, tops.size))
    worst_outside = 0.0
    piece = max(1, math.floor(MAX_PIECE_VARIANCE / (p * (1.0 - p))))
    unit_trials = [trials // int(top) for top in tops]  # Python ints: N may exceed int64
    # Split only into ≥ 64 pieces (dropping < 1/64 of the trials); evaluate smaller ones directly.
    split = np.array([unit >= 64 * piece for unit in unit_trials])
    for k in np.flatnonzero(~split):
        per_unit[:, k], outside = shift_by_one(unit_trials[k], p)
        worst_outside = max(worst_outside, outside)
    if split.any():
        pieces = np.array([float(unit // piece) for unit, cut in zip(unit_trials, split) if cut])
        per_unit[:, split], outside = split_shift_by_one(piece, pieces, p)
        worst_outside = max(worst_outside, float(outside.max()))
    return lows, tops, per_unit, worst_outside


def _vector_bound(dim: int, g: int, lows: np.ndarray, tops: np.ndarray, per_unit: np.ndarray) -> np.ndarray:
    """Step 5: min over λ of λg² + d·max_s (s·r(s) − λ(s − 1)₊²)₊, for every order."""
    scale = per_unit[:, -1:] * tops[-1] / float(g) ** 2  # φ(g)/g², the Gaussian-like multiplier
    lambdas = scale[:, :, None] * _LAMBDAS[None, None, :]  # (orders, 1, λ)
    r = per_unit[:, :, None]
    # s·r − λ(s−1)² is concave in s: its integer maximum on a bucket is next to 1 + r/(2λ), clipped.
    vertex = np.clip(1.0 + r / (2.0 * lambdas), lows[None, :, None], tops[None, :, None])
    best = np.full(lambdas.shape[:1] + lambdas.shape[2:], 0.0)
    for s in (np.floor(vertex), np.ceil(vertex)):
        s = np.clip(s, lows[None, :, None], tops[None, :, None])
        value = s * r - lambdas * (s - 1.0) ** 2
        best = np.maximum(best, value.max(axis=1))
    totals = lambdas[:, 0, :] * float(g) ** 2 + dim * best
    return totals.min(axis=1)


def pvec_rdp(users: int, dim: int, g: int, b_noise: int, p: float) -> PvecRdp:
    """The δ-approximate RDP bound of one P_vec call (module docstring, steps 1–5).

    Args:
      users: n.
      dim: d.
      g: precision; inputs are scaled to [0, g].
      b_noise, p: noise bits per user and coordinate, and their probability.

    Returns:
      The bound at ORDERS.

    Raises:
      ValueError: parameters outside their ranges.
    """
    if users < 1 or dim < 1 or g < 1 or b_noise < 1 or not 0.0 < p < 1.0:
        raise ValueError(f"P_vec parameters out of range: users={users}, dim={dim}, g={g}, b_noise={b_noise}, p={p}")
    trials = users * b_noise
    if trials < g:
        raise ValueError(f"N = n·b_noise = {trials} noise trials cannot cover shifts up to g = {g}")
    lows, tops, per_unit, outside = coordinate_bounds(trials, p, g)
    rdp = _vector_bound(dim, g, lows, tops, per_unit)
    # Σ_j |s_j| ≤ Σ_j (|a_j| + 1) ≤ √d·g + d pieces of shift one, each setting aside ≤ `outside`.
    pieces = min(dim * g, math.sqrt(dim) * g + dim)
    return PvecRdp(ORDERS, rdp, min(1.0, pieces * outside))


def composed_epsilon(bound: PvecRdp, folds: int, delta: float) -> tuple[float, float, float]:
    """(ε, δ, order) of `folds` adaptive calls with this bound, composed by adding RDP curves.

    Args:
      bound: one call's bound.
      folds: how many calls see the same users.
      delta: the total δ; δ_a of every call is taken out of it first.

    Returns:
      (ε, δ, α) with δ = the requested total; ε = inf when the set-aside mass exceeds δ.
    """
    set_aside = folds * bound.delta_approx
    if set_aside >= delta:
        return math.inf, delta, math.nan
    conversion = rdp_to_dp(bound.orders, folds * bound.rdp, delta - set_aside)
    return conversion.epsilon, delta, conversion.order


@functools.lru_cache(maxsize=1024)
def gaussian_rdp_multiplier(epsilon: float, delta: float, folds: int) -> float:
    """σ/Δ of a Gaussian whose `folds`-fold RDP composition converts to (ε, δ) at ORDERS.

    The starting point of the calibration: Gaussian noise of scale σ with
    sensitivity Δ has RDP αΔ²/(2σ²) (Mironov 2017, Prop. 7).
    """
    lo, hi = 1e-3, 1e6
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        if rdp_to_dp(ORDERS, folds * ORDERS / (2.0 * mid * mid), delta).epsilon > epsilon:
            lo = mid
        else:
            hi = mid
    return hi


def noise_bits(users: int, variance: float) -> tuple[int, float]:
    """(b_noise, p) with n·b_noise·p(1 − p) ≥ variance and p ≤ 1/2, as few bits as possible.

    Args:
      users: n.
      variance: the count variance wanted per coordinate.

    Returns:
      (b_noise, p), p rounded up (more noise is always safe).
    """
    b_noise = max(1, math.ceil(4.0 * variance / users))
    trials = users * b_noise
    share = min(0.25, variance / trials)
    p = min(0.5, math.nextafter(0.5 * (1.0 - math.sqrt(1.0 - 4.0 * share)), 1.0))
    while trials * p * (1.0 - p) < variance and p < 0.5:  # float error only
        p = min(0.5, math.nextafter(p, 1.0) * (1.0 + 1e-12))
    return b_noise, p


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Tight P_vec parameters and what they guarantee.

    Attributes:
      g, b_noise, p: the protocol's parameters.
      epsilon, delta: the guarantee of `folds` calls (≤ the target).
      order: the Rényi order that attains it.
      folds: the calls composed.
    """

    g: int
    b_noise: int
    p: float
    epsilon: float
    delta: float
    order: float
    folds: int


@functools.lru_cache(maxsize=1024)
def calibrate_pvec(users: int, dim: int, epsilon: float, delta: float, folds: int = 1,
                   max_precision: int = 2**24 - 1) -> Calibration:
    """Binomial noise whose proven bound meets (ε, δ) over `folds` calls, within 1 % of the least.

    g = max(⌈20√d⌉, ⌈2√n/σ_G⌉, 16), with σ_G the Gaussian multiplier at the same
    target: the rounding shift adds at most √d to g (≤ 5 %), and the rounding
    variance ≤ n/4 stays under 1/16 of the noise variance g²σ_G². The count
    variance starts at the Gaussian's (g + √d)²σ_G² and moves by secant steps
    on ε ∝ variance^(−1/2) (exact for Gaussian noise) until the bound holds
    with at most 1 % to spare.

    Args:
      users: n.
      dim: d.
      epsilon, delta: the target of all `folds` calls together.
      folds: calls that see the same users (1 for sequential rounds, T for P_GD).
      max_precision: the largest g the sampler supports.

    Returns:
      The calibration.

    Raises:
      ValueError: no calibration meets the target (for example δ too small for the windows).
    """
    if not (epsilon > 0.0 and 0.0 < delta < 1.0 and folds >= 1 and users >= 1 and dim >= 1):
        raise ValueError(f"cannot calibrate P_vec at n={users}, d={dim}, ε={epsilon}, δ={delta}, folds={folds}")
    floor = rdp_to_dp(ORDERS, np.zeros(ORDERS.size), delta).epsilon
    if epsilon <= floor:
        raise ValueError(f"ε = {epsilon} is below {floor:.3g}, the least the orders up to {ORDERS.max():g} "
                         f"can certify at δ = {delta}")
    sigma_g = gaussian_rdp_multiplier(epsilon, delta, folds)
    g = min(max_precision, max(math.ceil(20.0 * math.sqrt(dim)), math.ceil(2.0 * math.sqrt(users) / sigma_g), 16))
    variance = ((g + math.sqrt(dim)) * sigma_g) ** 2
    best = None
    for _ in range(30):
        b_noise, p = noise_bits(users, variance)
        spent, _, order = composed_epsilon(pvec_rdp(users, dim, g, b_noise, p), folds, delta)
        if spent <= epsilon:
            best = Calibration(g, b_noise, p, spent, delta, order, folds)
            if spent >= 0.99 * epsilon:
                return best
        # Aim 0.5 % under the target; an infinite ε (windows' δ_a too large) doubles the variance.
        ratio = spent / (0.995 * epsilon) if math.isfinite(spent) else 1.414
        variance *= min(4.0, max(0.25, ratio)) ** 2
    if best is None:
        raise ValueError(f"no binomial noise meets ε={epsilon}, δ={delta} for n={users}, d={dim}")
    return best


@functools.lru_cache(maxsize=1024)
def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """σ of the analytic Gaussian mechanism (Balle & Wang 2018, Thm 8) at (ε, δ).

    The least σ with Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) ≤ δ.
    """
    def excess(sigma: float) -> float:
        a, b = sensitivity / (2.0 * sigma), epsilon * sigma / sensitivity
        return scipy.stats.norm.cdf(a - b) - math.exp(epsilon) * scipy.stats.norm.cdf(-a - b) - delta

    lo, hi = 1e-6 * sensitivity, 1e6 * sensitivity
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if excess(mid) > 0.0 else (lo, mid)
    return hi
