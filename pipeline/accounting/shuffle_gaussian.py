"""Rényi DP of the shuffle Gaussian mechanism and its subsampled and check-in variants (seed 004).

Liew & Takahashi, "Shuffle Gaussian Mechanism for Differential Privacy": n users each add
N(0, σ² I) to their record and a trusted shuffler releases a uniformly random permutation of
the n reports. Thm 1 gives the exact RDP of one such round, Thm 2 its subsampled (m of n,
without replacement) version, Thm 3 the shuffled check-in (each user joins with probability γ).

Sensitivity convention (notes seed-004 §2.1, trap T1): every `sigma` here is the *noise
multiplier* σ = (local Gaussian standard deviation) / Δ₂, where Δ₂ is the largest L2 distance
between a user's record and its replacement (the domain diameter under replacement adjacency,
e.g. 2C for gradients clipped to norm C). Thm 1 is stated for Δ₂ = 1: the neighbouring pair is
D = (0, …, 0), D′ = (1, 0, …, 0). Without shuffling the same round is the Gaussian mechanism,
whose RDP is λ/(2σ²) (Cor. 1).

Curves are numpy arrays over the integer orders 2..lambda_max (`rdp_orders(lambda_max)`);
orders must be integers (trap T3). Rounds compose by adding curves; (ε, δ) comes from
`pipeline.accounting.rdp.rdp_to_dp`.

Numerics: Thm 1 is evaluated as E_n(λ) = λ! n^{−λ} [z^λ] A(z)^n with
A(z) = Σ_k e^{k(k−1)/(2σ²)} z^k/k! (notes §3.2), by Miller's power-series recurrence for A^n
(notes §3.5b) in O(λ_max²) for all orders at once, or, when n + 1 < λ_max, by binary powering
(O(λ_max² log n)). Both are run on u_λ = E_n(λ) − 1 as a sum of non-negative terms in log
space, so ε(λ) = log1p(u_λ)/(λ − 1) keeps full relative precision even at ε ≈ 1e−7.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from fractions import Fraction

import numpy as np
import scipy  # submodules load on first use (scipy.stats alone costs 0.5 s per process)

from pipeline.accounting import arguments
from pipeline.accounting.rdp import rdp_to_dp

VARIANTS = ("shuffle", "subsampled", "checkin")

# λ_max above this makes the O(λ_max²) tables (and the binary-powering matrices) large.
MAX_LAMBDA = 4096

_CONVERSION = "converted by seed 004 eq. (4) (Canonne–Kamath–Steinke 2020 Prop. 12), minimized over integer orders"


# ---------------------------------------------------------------- validation


def _integer(name: str, value, minimum: int, maximum: int | None = None) -> int:
    return arguments.integer(name, value, minimum, maximum)


def _is_real(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _sigma(sigma) -> float:
    return arguments.real("sigma", sigma, 0.0)


def _open_unit(name: str, value, closed_right: bool = False) -> float:
    """A number in (0, 1), or (0, 1] when closed_right."""
    return arguments.real(name, value, 0.0, 1.0, high_open=not closed_right)


def _lambda_max(lambda_max) -> int:
    return _integer("lambda_max", lambda_max, 2, MAX_LAMBDA)


# ---------------------------------------------------------------- log-space helpers


def _log_factorials(k_max: int) -> np.ndarray:
    """log k! for k = 0..k_max."""
    return scipy.special.gammaln(np.arange(k_max + 1) + 1.0)


def _log_expm1(x: np.ndarray) -> np.ndarray:
    """log(e^x − 1) for x ≥ 0, precise for tiny and huge x; −inf at x = 0."""
    with np.errstate(divide="ignore"):
        return x + np.log(-np.expm1(-x))


def _logsumexp_rows(x: np.ndarray) -> np.ndarray:
    """logsumexp along the last axis; −inf for rows that are all −inf."""
    top = np.max(x, axis=-1, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(x - safe), axis=-1)) + safe[..., 0]


def _logsumexp(x: np.ndarray) -> float:
    """logsumexp of a 1-D array; −inf if it is all −inf."""
    top = float(np.max(x))
    if top == -math.inf:
        return -math.inf
    return top + math.log(float(np.sum(np.exp(x - top))))


def rdp_orders(lambda_max: int) -> np.ndarray:
    """The integer Rényi orders 2..lambda_max that every curve of this module is indexed by.

    Args:
      lambda_max: the largest order, 2 ≤ lambda_max ≤ MAX_LAMBDA.

    Returns:
      float array [2, 3, …, lambda_max] (entry i is order i + 2).

    Raises:
      ValueError: lambda_max is not an integer in [2, MAX_LAMBDA].
    """
    return np.arange(2, _lambda_max(lambda_max) + 1, dtype=float)


# ---------------------------------------------------------------- Thm 1


def _log_moments_miller(n: int, t: np.ndarray, k_max: int) -> np.ndarray:
    """ℓ_k = log E_n(k), k = 0..k_max, by Miller's recurrence; needs n + 1 ≥ k_max.

    With h_k = E_n(k) = k! n^{−k} g_k and g the coefficients of A(z)^n, the recurrence
    g_k = (1/k) Σ_j ((n+1)j − k) a_j g_{k−j} becomes h_k = Σ_{j=1}^k c_{kj} e^{t_j} h_{k−j} with
    c_{kj} = C(k−1, j−1)((n+1)j − k)/(j n^j) ≥ 0 and Σ_j c_{kj} = 1 (σ = ∞ gives h ≡ 1). Hence
    h_k − 1 = Σ_j c_{kj} expm1(t_j + ℓ_{k−j}): non-negative terms, no cancellation.
    """
    log_fact = _log_factorials(k_max)
    ell = np.zeros(k_max + 1)
    j_all = np.arange(1, k_max + 1)
    log_j = np.log(j_all)
    j_log_n = j_all * math.log(n)
    n_plus_1 = float(n) + 1.0
    for k in range(2, k_max + 1):
        j = j_all[:k]
        with np.errstate(divide="ignore"):
            log_c = (log_fact[k - 1] - log_fact[j - 1] - log_fact[k - j] + np.log(n_plus_1 * j - k)
                     - log_j[:k] - j_log_n[:k])
        log_u = _logsumexp(log_c + _log_expm1(t[j] + ell[k - j]))
        ell[k] = np.logaddexp(0.0, log_u)
    return ell


def _combine(ell_a: np.ndarray, a: int, ell_b: np.ndarray, b: int, log_fact: np.ndarray) -> np.ndarray:
    """log E_{a+b}(k) from log E_a and log E_b (the EGF product A^a · A^b).

    E_{a+b}(k) = Σ_i C(k,i) p^i (1−p)^{k−i} E_a(i) E_b(k−i) with p = a/(a+b); the weights sum
    to 1, so E_{a+b}(k) − 1 = Σ_i w_ki expm1(ℓ_a(i) + ℓ_b(k−i)), all terms ≥ 0.
    """
    k_max = ell_a.size - 1
    p = a / (a + b)
    out = np.empty(k_max + 1)
    block = 512  # rows per step: bounds the temporaries at λ_max = MAX_LAMBDA
    for start in range(0, k_max + 1, block):
        k = np.arange(start, min(start + block, k_max + 1))[:, None]
        i = np.arange(k[-1, 0] + 1)[None, :]
        valid = i <= k
        rest = np.where(valid, k - i, 0)
        log_w = log_fact[k] - log_fact[i] - log_fact[rest] + i * math.log(p) + rest * math.log1p(-p)
        x = np.where(valid, log_w + _log_expm1(ell_a[i] + ell_b[rest]), -np.inf)
        out[start: start + k.shape[0]] = np.logaddexp(0.0, _logsumexp_rows(x))
    return out


def _log_moments_powering(n: int, t: np.ndarray, k_max: int) -> np.ndarray:
    """ℓ_k = log E_n(k), k = 0..k_max, by binary powering of A(z) (any n ≥ 1)."""
    log_fact = _log_factorials(k_max)
    base, base_count = t[: k_max + 1].copy(), 1  # E_1(k) = e^{k(k−1)/(2σ²)}
    result, count = None, 0
    remaining = n
    while remaining:
        if remaining & 1:
            if result is None:
                result, count = base.copy(), base_count
            else:
                result, count = _combine(result, count, base, base_count, log_fact), count + base_count
        remaining >>= 1
        if remaining:
            base, base_count = _combine(base, base_count, base, base_count, log_fact), 2 * base_count
    return result


def _log_moments(n: int, sigma: float, k_max: int) -> np.ndarray:
    """log E_n(k) of Thm 1 for k = 0..k_max (E_n(0) = E_n(1) = 1)."""
    k = np.arange(k_max + 1, dtype=float)
    t = k * (k - 1.0) / (2.0 * sigma * sigma)
    if n == 1:
        return t
    if n + 1 >= k_max:
        return _log_moments_miller(n, t, k_max)
    return _log_moments_powering(n, t, k_max)


def shuffle_gaussian_rdp(n: int, sigma: float, lambda_max: int) -> np.ndarray:
    """Exact RDP ε_SG,n(λ) of one shuffle Gaussian round (seed 004 Thm 1) at orders 2..lambda_max.

    ε(λ) = log E_n(λ)/(λ−1), E_n(λ) = e^{−λ/(2σ²)} n^{−λ} Σ_{k_1+…+k_n=λ} multinom(λ; k)
    e^{Σ k_i²/(2σ²)}, computed by the power-series recurrence in O(lambda_max²) (binary powering,
    O(lambda_max² log n), when n + 1 < lambda_max), never by enumerating partitions. Replacement
    adjacency with unit L2 sensitivity: sigma is the noise std divided by the domain diameter
    Δ₂ (module docstring, trap T1). n = 1 gives the plain Gaussian λ/(2σ²).

    Args:
      n: the number of reports shuffled together (the anonymity set; trap T8), ≥ 1.
      sigma: noise multiplier σ = std/Δ₂ > 0.
      lambda_max: the largest order, 2 ≤ lambda_max ≤ MAX_LAMBDA.

    Returns:
      float array of length lambda_max − 1; entry i is ε(i + 2) (see `rdp_orders`).

    Raises:
      ValueError: n not an integer ≥ 1, sigma not finite > 0, lambda_max out of range.
    """
    n = _integer("n", n, 1)
    sigma = _sigma(sigma)
    lambda_max = _lambda_max(lambda_max)
    ell = _log_moments(n, sigma, lambda_max)
    return np.maximum(ell[2:], 0.0) / np.arange(1.0, lambda_max)


def gaussian_rdp(sigma: float, lambda_max: int) -> np.ndarray:
    """RDP λ/(2σ²) of the Gaussian mechanism without shuffling: seed 004 Cor. 1's upper bound on Thm 1.

    Args:
      sigma: noise multiplier σ = std/Δ₂ > 0.
      lambda_max: the largest order, 2 ≤ lambda_max ≤ MAX_LAMBDA.

    Returns:
      float array over orders 2..lambda_max.

    Raises:
      ValueError: sigma not finite > 0, lambda_max out of range.
    """
    sigma = _sigma(sigma)
    return rdp_orders(lambda_max) / (2.0 * sigma * sigma)


def _partitions(total: int) -> Iterator[list[int]]:
    """The integer partitions of `total` as ascending lists (Kelleher's accel_asc)."""
    a = [0] * (total + 1)
    k = 1
    y = total - 1
    while k != 0:
        x = a[k - 1] + 1
        k -= 1
        while 2 * x <= y:
            a[k] = x
            y -= x
            k += 1
        last = k + 1
        while x <= y:
            a[k] = x
            a[last] = y
            yield a[: k + 2]
            x += 1
            y -= 1
        a[k] = x + y
        y = x + y - 1
        yield a[: k + 1]


def partition_enumeration_rdp(n: int, sigma: float, order: int) -> float:
    """ε_SG,n(order) of seed 004 Thm 1 by the paper's method: enumerating the partitions of the order.

    Reference implementation of §3.1 / Alg. 1 / App. B with its typos fixed (notes §3.5a, T5):
    each partition ρ = (k_1 ≥ … ≥ k_p) with p ≤ n is a class of bin-count vectors of
    probability P(ρ) = [λ!/Π k_j!]·[n!/((n−p)! Π_v mult_v!)]·n^{−λ}; partitions with p > n
    contribute 0. To keep tiny ε precise the sum is accumulated as
    E − 1 = Σ_ρ P(ρ)·expm1((Σ k_j² − λ)/(2σ²)) (non-negative terms) rather than as log Σ of
    the raw terms. Cost O(p(λ)·λ): for tests and benchmarks at small orders only.

    Args:
      n: shuffle size ≥ 1.
      sigma: noise multiplier σ = std/Δ₂ > 0.
      order: the integer Rényi order λ, 2 ≤ order ≤ 80 (p(80) ≈ 1.6e7 partitions).

    Returns:
      ε(order).

    Raises:
      ValueError: n not an integer ≥ 1, sigma not finite > 0, order not an integer in [2, 80].
    """
    n = _integer("n", n, 1)
    sigma = _sigma(sigma)
    lam = _integer("order", order, 2, 80)
    log_fact = [math.lgamma(i + 1.0) for i in range(lam + 1)]
    log_n = math.log(n)
    # log(n!/(n−p)!) − p log n = Σ_{i<p} log1p(−i/n), exact to rounding even for huge n.
    falling = [0.0]
    for i in range(lam):
        falling.append(falling[-1] + (math.log1p(-i / n) if i < n else -math.inf))
    two_s2 = 2.0 * sigma * sigma
    log_terms = []
    for parts in _partitions(lam):
        p = len(parts)
        if p > n:
            continue
        squares = 0
        log_p = log_fact[lam] + falling[p] - (lam - p) * log_n
        run = 1
        for index, part in enumerate(parts):
            squares += part * part
            log_p -= log_fact[part]
            if index + 1 < p and parts[index + 1] == part:
                run += 1
            else:
                log_p -= log_fact[run]
                run = 1
        exponent = (squares - lam) / two_s2
        if exponent > 0.0:
            log_terms.append(log_p + exponent + math.log(-math.expm1(-exponent)))
    log_u = _logsumexp(np.array(log_terms)) if log_terms else -math.inf
    return float(np.logaddexp(0.0, log_u)) / (lam - 1)


# ---------------------------------------------------------------- Thm 2


def wbk_subsampled_rdp(gamma: float, rdp: np.ndarray) -> np.ndarray:
    """Seed 004 eq. (16) (Thm 2 = Wang–Balle–Kasiviswanathan 2019 Thm 9 with ε(∞) = ∞) applied to a curve.

    ε'(λ) = 1/(λ−1) log(1 + γ² C(λ,2) min{4(e^{ε(2)} − 1), 2e^{ε(2)}}
                        + Σ_{j=3}^λ 2 γ^j C(λ,j) e^{(j−1) ε(j)}),
    for subsampling without replacement at rate γ of a mechanism with RDP curve ε. All orders
    at once, O(λ_max²). Keeps the σ-independent floor 2γ^j C(λ,j) (trap T6).

    Args:
      gamma: sampling rate in (0, 1].
      rdp: ε(j) at orders 2..lambda_max (as from `shuffle_gaussian_rdp`), finite and ≥ 0.

    Returns:
      ε'(λ) over the same orders.

    Raises:
      ValueError: gamma outside (0, 1]; rdp not a 1-D array of ≥ 1 finite non-negative values.
    """
    gamma = _open_unit("gamma", gamma, closed_right=True)
    rdp = np.asarray(rdp, dtype=float)
    if rdp.ndim != 1 or rdp.size < 1 or rdp.size > MAX_LAMBDA - 1:
        raise ValueError(f"rdp: must be a 1-D curve over orders 2..lambda_max, got shape {rdp.shape}")
    if not np.all(np.isfinite(rdp)) or np.any(rdp < 0.0):
        raise ValueError("rdp: values must be finite and ≥ 0")
    lambda_max = rdp.size + 1
    log_fact = _log_factorials(lambda_max)
    log_gamma = math.log(gamma)
    j = np.arange(2, lambda_max + 1)
    # Coefficient of C(λ, j) in the sum, per j: the j = 2 term carries the min{...}.
    with np.errstate(divide="ignore"):
        second = min(math.log(4.0) + float(_log_expm1(np.array(rdp[0]))), math.log(2.0) + float(rdp[0]))
    log_coeff = math.log(2.0) + j * log_gamma + (j - 1) * rdp
    log_coeff[0] = 2.0 * log_gamma + second
    out = np.empty(lambda_max - 1)
    block = 256
    for start in range(2, lambda_max + 1, block):
        lam = np.arange(start, min(start + block, lambda_max + 1))[:, None]
        valid = j[None, :] <= lam
        rest = np.where(valid, lam - j[None, :], 0)
        x = np.where(valid, log_fact[lam] - log_fact[j][None, :] - log_fact[rest] + log_coeff[None, :], -np.inf)
        out[start - 2: start - 2 + lam.shape[0]] = np.logaddexp(0.0, _logsumexp_rows(x)) / (lam[:, 0] - 1.0)
    return out


def subsampled_shuffle_gaussian_rdp(n: int, m: int, sigma: float, lambda_max: int) -> np.ndarray:
    """RDP ε_SSG,γ,m(λ) of the subsampled shuffle Gaussian round (seed 004 Thm 2) at orders 2..lambda_max.

    m of the n users are sampled without replacement (γ = m/n), add N(0, σ²Δ₂²) locally and are
    shuffled together; eq. (16) applied to Thm 1 at shuffle size m. O(lambda_max²).

    Args:
      n: population size ≥ 1.
      m: users sampled per round, 1 ≤ m ≤ n.
      sigma: noise multiplier σ = std/Δ₂ > 0.
      lambda_max: the largest order, 2 ≤ lambda_max ≤ MAX_LAMBDA.

    Returns:
      float array over orders 2..lambda_max.

    Raises:
      ValueError: n or m not integers with 1 ≤ m ≤ n, sigma not finite > 0, lambda_max out of range.
    """
    n = _integer("n", n, 1)
    m = _integer("m", m, 1, n)
    return wbk_subsampled_rdp(m / n, shuffle_gaussian_rdp(m, sigma, lambda_max))


# ---------------------------------------------------------------- Thm 3


def _slack_values(slack) -> tuple[float, ...]:
    values = tuple(slack) if isinstance(slack, (Sequence, np.ndarray)) else (slack,)
    if not values:
        raise ValueError("slack=(): must be a number in (0, 1) or a non-empty sequence of them")
    return tuple(_open_unit("slack", value) for value in values)


def _chernoff_split(n: int, gamma: float, slack: float) -> tuple[int, float]:
    """K = ⌊(1−Δ)nγ⌋ and the Δ' = 1 − K/(nγ) ≥ Δ at which K is exactly (1−Δ')nγ.

    Thm 3 holds for every Δ' ∈ (0, 1] with (1−Δ')nγ an integer; using Δ' (not Δ) in the
    Chernoff term keeps the bound valid even if float rounding lands K one above ⌊(1−Δ)nγ⌋.
    """
    mean = Fraction(n) * Fraction(gamma)
    split = (1 - Fraction(slack)) * mean
    nearest = round(split)
    k = nearest if abs(split - nearest) <= Fraction(1, 10**9) * max(1, nearest) else math.floor(split)
    k = max(int(k), 0)
    if not k < mean:
        raise ValueError(f"slack={slack}: leaves no Chernoff margin at n·gamma={float(mean)}")
    return k, float(1 - Fraction(k) / mean)


def checkin_shuffle_gaussian_rdp(n: int, gamma: float, sigma: float, lambda_max: int,
                                 slack: float | Sequence[float] = 0.5) -> np.ndarray:
    """RDP of the shuffled check-in Gaussian round by seed 004 Thm 3 (Chernoff split), orders 2..lambda_max.

    Each of n users checks in independently with probability γ; the K ~ Bin(n, γ) reports are
    shuffled. With K = ⌊(1−Δ)nγ⌋ and Δ' = 1 − K/(nγ) ≥ Δ,
      ε(λ) = 1/(λ−1) log(e^{(λ−1) ε_SSG,γ,1(λ) − Δ'² nγ/2} + e^{(λ−1) ε_SSG,γ,K+1(λ)}),
    where ε_SSG,γ,k is eq. (16) at rate γ on Thm 1 with shuffle size k (ε_1(j) = j/(2σ²)).
    The Chernoff term is always included (the reference code's ApproxSCIGaussRDPtoDP drops it:
    notes §6.3 B1). Thm 3 rests on Conjecture 1 (E_n(λ) non-increasing in n), proven in the
    notes §3.4. With several slack values the bound is minimized per order (each is valid).

    Args:
      n: population size ≥ 1.
      gamma: check-in probability in (0, 1].
      sigma: noise multiplier σ = std/Δ₂ > 0.
      lambda_max: the largest order, 2 ≤ lambda_max ≤ MAX_LAMBDA.
      slack: the Chernoff slack Δ ∈ (0, 1), or a sequence of them to minimize over.

    Returns:
      float array over orders 2..lambda_max.

    Raises:
      ValueError: n not an integer ≥ 1, gamma outside (0, 1], sigma not finite > 0, lambda_max
        out of range, a slack outside (0, 1) or with ⌊(1−Δ)nγ⌋ ≥ nγ.
    """
    n = _integer("n", n, 1)
    gamma = _open_unit("gamma", gamma, closed_right=True)
    sigma = _sigma(sigma)
    lambda_max = _lambda_max(lambda_max)
    slacks = _slack_values(slack)
    scale = np.arange(1.0, lambda_max)  # λ − 1
    mean = n * gamma
    lone = scale * wbk_subsampled_rdp(gamma, gaussian_rdp(sigma, lambda_max))
    best = np.full(lambda_max - 1, np.inf)
    bulk_cache: dict[int, np.ndarray] = {}
    for value in slacks:
        k, effective = _chernoff_split(n, gamma, value)
        if k not in bulk_cache:
            bulk_cache[k] = scale * wbk_subsampled_rdp(gamma, shuffle_gaussian_rdp(k + 1, sigma, lambda_max))
        bound = np.logaddexp(lone - effective**2 * mean / 2.0, bulk_cache[k]) / scale
        best = np.minimum(best, bound)
    return best


# ---------------------------------------------------------------- (ε, δ)


def shuffle_gaussian_epsilon(n: int, sigma: float, delta: float, rounds: int = 1, lambda_max: int = 256,
                             variant: str = "shuffle", *, m: int | None = None, gamma: float | None = None,
                             slack: float | Sequence[float] | None = None) -> dict:
    """(ε, δ) of `rounds` identical shuffle Gaussian rounds (seed 004 Thm 1, 2 or 3), composed in RDP.

    The per-round curve over integer orders 2..lambda_max is multiplied by `rounds` (Lemma 1,
    adaptive composition) and converted once by `rdp_to_dp` (seed 004 eq. (4)). If the best
    order is lambda_max the result is flagged: a wider scan may give less (trap T4).

    Variants:
      "shuffle": Thm 1, all n users every round (n = shuffle size).
      "subsampled": Thm 2, m of n users sampled without replacement per round; needs m.
      "checkin": Thm 3, each user joins with probability gamma; needs gamma, optional slack
        (default 0.5, the reference code's; a sequence is minimized over per order).

    Args:
      n: users (population size), ≥ 1.
      sigma: noise multiplier σ = std/Δ₂ > 0 (Δ₂ the L2 replacement sensitivity; trap T1).
      delta: target δ in (0, 1).
      rounds: identical rounds composed, ≥ 1.
      lambda_max: the largest order scanned, 2 ≤ lambda_max ≤ MAX_LAMBDA.
      variant: "shuffle", "subsampled" or "checkin".
      m: subsample size, 1 ≤ m ≤ n ("subsampled" only).
      gamma: check-in probability in (0, 1] ("checkin" only).
      slack: Chernoff slack Δ ∈ (0, 1) or a sequence of them ("checkin" only).

    Returns:
      JSON-serializable dict: epsilon, delta, order (best λ), at_cap, warning (str or None),
      method (theorem and conversion), rdp_at_order (composed RDP at the best order), variant,
      n, sigma, rounds, lambda_max and the variant's parameters.

    Raises:
      ValueError: an unknown variant, a parameter out of its range, or a variant parameter
        given to a variant that does not use it (or missing from one that needs it).
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r}: must be one of {VARIANTS}")
    n = _integer("n", n, 1)
    sigma = _sigma(sigma)
    delta = _open_unit("delta", delta)
    rounds = _integer("rounds", rounds, 1)
    lambda_max = _lambda_max(lambda_max)
    needs = {"shuffle": (), "subsampled": ("m",), "checkin": ("gamma",)}[variant]
    given = {"m": m, "gamma": gamma, "slack": slack}
    for name, value in given.items():
        allowed = needs + (("slack",) if variant == "checkin" else ())
        if value is not None and name not in allowed:
            raise ValueError(f"{name}={value!r}: only applies to variant "
                             f"{'subsampled' if name == 'm' else 'checkin'}, not {variant!r}")
        if value is None and name in needs:
            raise ValueError(f"{name}=None: variant {variant!r} needs it")
    extra: dict = {}
    if variant == "shuffle":
        curve = shuffle_gaussian_rdp(n, sigma, lambda_max)
        theorem = "seed 004 Thm 1 (exact shuffle Gaussian RDP, power-series recurrence)"
    elif variant == "subsampled":
        m = _integer("m", m, 1, n)
        curve = subsampled_shuffle_gaussian_rdp(n, m, sigma, lambda_max)
        theorem = (f"seed 004 Thm 2 (Wang–Balle–Kasiviswanathan 2019 Thm 9 subsampling without replacement, "
                   f"rate m/n = {m}/{n}, on Thm 1 at shuffle size m)")
        extra = {"m": m, "gamma": m / n}
    else:
        gamma = _open_unit("gamma", gamma, closed_right=True)
        slacks = _slack_values(0.5 if slack is None else slack)
        curve = checkin_shuffle_gaussian_rdp(n, gamma, sigma, lambda_max, slacks)
        theorem = (f"seed 004 Thm 3 (shuffled check-in at rate {gamma}, Chernoff split with slack "
                   f"{slacks[0] if len(slacks) == 1 else 'minimized over ' + str(list(slacks))}, "
                   "Conjecture 1 as proven in notes §3.4)")
        extra = {"gamma": gamma, "slack": slacks[0] if len(slacks) == 1 else list(slacks)}
    orders = rdp_orders(lambda_max)
    composed = rounds * curve
    conversion = rdp_to_dp(orders, composed, delta)
    best = int(conversion.order)
    warning = None
    if conversion.at_cap:
        warning = (f"best order λ*={best} is lambda_max: a larger lambda_max may give a smaller epsilon "
                   "(seed 004 trap T4)")
    return {
        "epsilon": float(conversion.epsilon),
        "delta": float(conversion.delta),
        "order": best,
        "at_cap": bool(conversion.at_cap),
        "warning": warning,
        "method": f"{theorem}; {rounds} round(s) composed by adding RDP; {_CONVERSION} 2..{lambda_max}",
        "rdp_at_order": float(composed[best - 2]),
        "variant": variant,
        "n": n,
        "sigma": sigma,
        "rounds": rounds,
        "lambda_max": lambda_max,
        **extra,
    }
