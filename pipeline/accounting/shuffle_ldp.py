"""Accountants for n shuffled ε0-LDP reports: FMT22 amplification and Girgis's RDP bounds.

Seed 001 (Girgis, UCLA dissertation 2023), chapter 5, as the notes (seed-001.md §3) state
it, plus Feldman, McMillan, Talwar, "Hiding Among the Clones" (FOCS 2021; "FMT22" in the
thesis). Everything is a pure function of (n, ε0, ...); curves are numpy vectors over Rényi
orders, computed in log space. Composition is done on the curve (RDP: add curves) or on the
privacy loss distribution (PLD: self-compose), never by converting each round to (ε, δ)
first; the per-round (ε, δ) routes (KOV15 / DRV10) are exposed only as baselines.

Neighbouring datasets differ in one user's data point (replace-one). Every randomizer is
discrete and ε0-LDP; RDP curves may be +inf where no bound applies.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
import scipy  # submodules load on first use (scipy.stats alone costs 0.5 s per process)

from pipeline.accounting import arguments
from pipeline.accounting.paper import advanced_composition
from pipeline.accounting.rdp import DEFAULT_ORDERS, rdp_to_dp
from pipeline.numerics import logsumexp

BOUNDS = ("fmt", "fmt-closed", "rdp", "best")

# Probability mass left out of a dominating pair's support (per round, bounded by Hoeffding
# or by exact binomial tails); it goes to the PLD's infinity mass, so it only adds to δ.
_TAIL_MASS = 1e-18
# Largest dense composed PLD the default discretization aims for (float64 entries).
_MAX_COMPOSED_BINS = 2**23


# ---------------------------------------------------------------------------------------
# Parameter checks
# ---------------------------------------------------------------------------------------

def _integer(name: str, value, minimum: int) -> int:
    return arguments.integer(name, value, minimum)


def _eps0(eps0) -> float:
    return arguments.real("eps0", eps0, 0.0)


def _positive(name: str, value) -> float:
    return arguments.real(name, value, 0.0)


def _delta(delta, name: str = "delta") -> float:
    return arguments.real(name, delta, 0.0, 1.0)


def _orders(orders) -> np.ndarray:
    """Rényi orders as a 1-D float array, refusing empty, non-finite or ≤ 1 entries."""
    array = np.asarray(orders, dtype=float)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"orders must be a non-empty 1-D array, got shape {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array <= 1.0):
        bad = array[~(np.isfinite(array) & (array > 1.0))][0]
        raise ValueError(f"orders must be finite Rényi orders > 1, got {bad}")
    return array


def _log_expm1(x: float) -> float:
    """log(e^x − 1) for x > 0 without overflow."""
    return x + math.log1p(-math.exp(-x))


def _log_binom_coef(a, b):
    """log C(a, b), elementwise, through gammaln."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    gammaln = scipy.special.gammaln
    return gammaln(a + 1) - gammaln(b + 1) - gammaln(a - b + 1)


def _binomial_logpmf(trials: int, log_p: float, log_1mp: float, k: np.ndarray) -> np.ndarray:
    """log Bin(trials, p)(k) through gammaln (~1e-8 absolute error at 1e7 trials: windows only)."""
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        head = np.where(k > 0, k * log_p, 0.0)
        tail = np.where(trials - k > 0, (trials - k) * log_1mp, 0.0)
    return _log_binom_coef(trials, k) + head + tail


def _binomial_log_weights(trials: int, p: float, lo: int, hi: int) -> np.ndarray:
    """log Bin(trials, p) over [lo, hi], normalized to sum to 1 there, to ~1e-13 relative.

    Built from the ratios pmf(j+1)/pmf(j) = 1 + ((trials+1)p − 1 − j)/((j+1)(1−p)), summed from
    lo: gammaln differences at 1e7 trials carry ~1e-8 absolute error, more than the ~1e-10
    Rényi divergences computed from these weights.
    """
    j = np.arange(lo, hi, dtype=float)
    steps = np.log1p(((trials + 1) * p - 1.0 - j) / ((j + 1.0) * (1.0 - p)))
    log_w = np.concatenate([[0.0], np.cumsum(steps)])
    return log_w - logsumexp(log_w)


def _binomial_window(trials: int, p: float, drop: float) -> tuple[int, int]:
    """[lo, hi] ∋ mode such that the Bin(trials, p) log-pmf is ≥ its maximum − drop inside.

    The log-pmf is unimodal in k, so each end is found by bisection.
    """
    if trials == 0:
        return 0, 0
    log_p, log_1mp = math.log(p), math.log1p(-p)
    mode = min(trials, math.floor((trials + 1) * p))
    floor = float(_binomial_logpmf(trials, log_p, log_1mp, np.array([mode]))[0]) - drop

    def inside(k: int) -> bool:
        return float(_binomial_logpmf(trials, log_p, log_1mp, np.array([k]))[0]) >= floor

    lo_out, lo_in = -1, mode  # invariant: lo_out outside (or −1), lo_in inside
    while lo_in - lo_out > 1:
        mid = (lo_in + lo_out) // 2
        lo_in, lo_out = (mid, lo_out) if inside(mid) else (lo_in, mid)
    hi_in, hi_out = mode, trials + 1
    while hi_out - hi_in > 1:
        mid = (hi_in + hi_out) // 2
        hi_in, hi_out = (mid, hi_out) if inside(mid) else (hi_in, mid)
    return lo_in, hi_in


# ---------------------------------------------------------------------------------------
# FMT22: closed form and numerical (PLD) bound
# ---------------------------------------------------------------------------------------

def fmt22_closed_form_domain(n, eps0, delta) -> bool:
    """Whether (n, ε0, δ) satisfies FMT22 Thm 3.1's condition ε0 ≤ log(n / (16 log(2/δ))).

    Args:
      n: number of shuffled reports (integer ≥ 1).
      eps0: the local randomizer's ε0 > 0.
      delta: δ ∈ (0, 1).

    Returns:
      True inside the theorem's domain.

    Raises:
      ValueError: a parameter outside its range.
    """
    n, eps0, delta = _integer("n", n, 1), _eps0(eps0), _delta(delta)
    return eps0 <= math.log(n / (16.0 * math.log(2.0 / delta)))


def fmt22_closed_form_epsilon(n, eps0, delta) -> float:
    """ε of one shuffle of n ε0-LDP reports by the FMT22 closed form (Thm 3.1; thesis eq. 6.10).

    ε = log(1 + (e^ε0 − 1)/(e^ε0 + 1) · (8·sqrt(e^ε0·log(4/δ))/sqrt(n) + 8·e^ε0/n)), valid when
    ε0 ≤ log(n / (16·log(2/δ))) (Feldman, McMillan, Talwar 2021, Thm 3.1; notes §3.2 item 3).
    The authors' reference code (apple/ml-shuffling-amplification, `closedformanalysis`)
    uses the slightly larger factor (1 − e^−ε0)/(1 + e^(−ε0−ε')) in place of
    (e^ε0 − 1)/(e^ε0 + 1); this function follows the theorem as the notes state it.

    Args:
      n: number of shuffled reports (integer ≥ 1).
      eps0: the local randomizer's ε0 > 0.
      delta: δ ∈ (0, 1).

    Returns:
      ε such that the shuffled output is (ε, δ)-DP.

    Raises:
      ValueError: a parameter outside its range, or (n, ε0, δ) outside the theorem's domain.
    """
    n, eps0, delta = _integer("n", n, 1), _eps0(eps0), _delta(delta)
    if not fmt22_closed_form_domain(n, eps0, delta):
        limit = 16.0 * math.log(2.0 / delta)
        rule = (f"= {math.log(n / limit):.6g}" if n > limit else f"< 0, since n ≤ 16 log(2/delta) = {limit:.6g}")
        raise ValueError(f"eps0={eps0} is outside FMT22 Thm 3.1's domain: needs eps0 ≤ log(n/(16 log(2/delta))) "
                         f"{rule} for n={n}, delta={delta}")
    e = math.exp(eps0)
    return math.log1p(math.tanh(eps0 / 2.0) * (8.0 * math.sqrt(e * math.log(4.0 / delta) / n) + 8.0 * e / n))


def _fmt22_binned_pair(n: int, eps0: float, interval: float, c_blocks: int):
    """Masses of the FMT22 dominating pair per loss bin, and the infinity mass.

    Returns (first, P, Q, infinity): P[i] and Q[i] are the masses of P and Q over the
    outcomes whose loss lies in ((k−1)Δ, kΔ], k = first + i; infinity is P's mass that was
    left out (loss treated as +∞).
    """
    m = n - 1
    p = math.exp(-eps0)
    log_q = -math.log1p(math.exp(-eps0))          # q = e^ε0/(e^ε0 + 1)
    log_1mq = -eps0 - math.log1p(math.exp(-eps0))  # 1 − q
    infinity = 0.0
    if m == 0:
        lo = hi = 0
        log_w = np.array([0.0])
    else:
        lo, hi = _binomial_window(m, p, drop=50.0)
        below = float(scipy.stats.binom.cdf(lo - 1, m, p)) if lo > 0 else 0.0
        above = float(scipy.stats.binom.sf(hi, m, p)) if hi < m else 0.0
        infinity += below  # c < lo: dropped (loss +∞)
        log_w = _binomial_log_weights(m, p, lo, hi) + math.log1p(-(below + above))
    weights = np.exp(log_w)
    if m > 0 and hi < m:
        weights[-1] += above  # c > hi: dominated by c = hi
    # Blocks of consecutive c, each represented by its smallest c (dominance, see fmt22_pld).
    size = max(1, -(-(hi - lo + 1) // c_blocks))
    starts = np.arange(lo, hi + 1, size)
    block_mass = np.add.reduceat(weights, starts - lo)
    log_tau = math.log(_TAIL_MASS)
    pieces = []
    for c, w in zip(starts, block_mass):
        if w <= 0.0:
            continue
        trials = int(c) + 1  # x ∈ {0, …, c+1}
        half = math.sqrt(trials * (math.log(4.0) - log_tau) / 2.0)
        x_lo = max(0, math.ceil(trials / 2.0 - half))
        x_hi = min(trials, math.floor(trials / 2.0 + half))
        if x_lo > 0 or x_hi < trials:
            # Hoeffding: P(|X − (c+1)/2| > half) ≤ 2 exp(−2 half²/(c+1)) = τ/2, and P_c ≤ 2·B_{c+1}.
            infinity += w * _TAIL_MASS
        x = np.arange(x_lo, x_hi + 1, dtype=float)
        with np.errstate(divide="ignore"):
            log_s, log_1ms = np.log(x / trials), np.log1p(-x / trials)
        log_num = np.logaddexp(log_q + log_s, log_1mq + log_1ms)
        log_den = np.logaddexp(log_1mq + log_s, log_q + log_1ms)
        # Bin(c+1, ½) renormalized on the window: the left-out tail (≤ τ, counted as +∞ above)
        # is spread over the window, which only adds mass.
        log_mass = _binomial_log_weights(trials, 0.5, x_lo, x_hi) + math.log(2.0) + log_num + math.log(w)
        loss = log_num - log_den
        bins = np.ceil(loss / interval + 1e-9).astype(np.int64)  # round up: pessimistic
        first = int(bins.min())
        pieces.append((first, np.bincount(bins - first, weights=np.exp(log_mass)),
                       np.bincount(bins - first, weights=np.exp(log_mass - loss))))
    first = min(start for start, _, _ in pieces)
    last = max(start + len(mass) for start, mass, _ in pieces)
    upper, lower = np.zeros(last - first), np.zeros(last - first)
    for start, mass_p, mass_q in pieces:
        upper[start - first:start - first + len(mass_p)] += mass_p
        lower[start - first:start - first + len(mass_q)] += mass_q
    return first, upper, lower, infinity


def fmt22_pld(n, eps0, value_discretization_interval: float = 1e-4, *, c_blocks: int = 256,
              connect_dots: bool = False):
    """The pessimistic PLD of one shuffle of n ε0-LDP reports, from FMT22's dominating pair.

    Construction (Feldman, McMillan, Talwar 2021, Thm 3.2, the reduction used by Thm 3.1 and
    by their numerical bound): the shuffled outputs on neighbouring datasets are a
    post-processing of the pair P = (A + Δ, C − A + 1 − Δ), Q = (A + 1 − Δ, C − A + Δ) with
    C ~ Bin(n − 1, e^−ε0), A ~ Bin(C, 1/2), Δ ~ Bern(e^ε0/(e^ε0 + 1)) — the "clones" pair;
    it holds for every ε0 and for adaptively chosen randomizers. Given C = c and x = first
    coordinate, P_c(x) = Bin(c+1, 1/2)(x)·2·(q·s + (1 − q)(1 − s)) with s = x/(c+1) and
    q = e^ε0/(e^ε0+1); Q_c(x) = P_c(c + 1 − x), so the pair is symmetric.

    Made computable, only pessimistically: (i) consecutive values of c are grouped into
    `c_blocks` blocks, each replaced by its smallest c (the pair at c+1 is a post-processing
    of the pair at c — add a fair coin to A — so this dominates); the mass of c above the
    binomial window is moved to its largest c (same argument), the mass below it (< e^−40)
    becomes infinite loss; (ii) outcomes x beyond a Hoeffding window (mass ≤ 1e-18 per c)
    become infinite loss; (iii) outcomes are grouped by their loss rounded up to the grid,
    which is exactly what dp_accounting's pessimistic `from_two_probability_mass_functions`
    does with the full pair, and the grouped pair is passed to it. Each step only raises the
    hockey-stick divergence at every ε, so the result dominates (Zhu, Dong, Wang 2022), and
    self-composition of it bounds adaptive composition of rounds.

    connect_dots=True replaces (iii) by dp_accounting's pessimistic Connect-the-Dots PMF
    (Doroshenko et al. 2022) built from the pair's exact hockey-stick divergence at the grid
    points: still an upper bound, but without the up-to-Δ-per-round rounding bias, which
    matters when thousands of rounds are composed.

    Args:
      n: number of shuffled reports (integer ≥ 1).
      eps0: the local randomizer's ε0 > 0.
      value_discretization_interval: PLD grid Δ > 0; each round adds at most Δ to the loss.
      c_blocks: number of blocks of C values (integer ≥ 1); more is tighter and slower.
      connect_dots: discretize by Connect-the-Dots instead of rounding losses up.

    Returns:
      A symmetric dp_accounting PrivacyLossDistribution (pessimistic estimate).

    Raises:
      ValueError: a parameter outside its range.
    """
    n, eps0 = _integer("n", n, 1), _eps0(eps0)
    c_blocks = _integer("c_blocks", c_blocks, 1)
    interval = _positive("value_discretization_interval", value_discretization_interval)
    first, upper_mass, lower_mass, infinity = _fmt22_binned_pair(n, eps0, float(interval), c_blocks)
    if connect_dots:
        # δ(ε) at ε_j = jΔ is exact from the per-bin sums: every outcome of bin i > j has loss > ε_j.
        j = np.arange(first - 1, first + len(upper_mass))
        tail_p = np.concatenate([np.cumsum(upper_mass[::-1])[::-1], [0.0]])
        tail_q = np.concatenate([np.cumsum(lower_mass[::-1])[::-1], [0.0]])
        deltas = np.clip(tail_p - np.exp(j * interval) * tail_q, 0.0, None) + infinity
        deltas = np.minimum(np.maximum.accumulate(deltas[::-1])[::-1], 1.0)  # monotone against rounding
        pmf = pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(float(interval), int(j[0]), int(j[-1]), deltas)
        return pld_lib.PrivacyLossDistribution(pmf)
    # Bin k carries every outcome with loss in ((k−1)Δ, kΔ]; its lower mass is set so that the
    # loss reads (k − ½)Δ, which dp_accounting rounds up to kΔ — the same rounded PMF it would
    # build from the full pair.
    upper = {first + int(i): math.log(upper_mass[i]) for i in np.flatnonzero(upper_mass > 0.0)}
    lower = {k: log_mass - (k - 0.5) * interval for k, log_mass in upper.items()}
    if infinity > 0.0:
        upper["infinity"] = math.log(infinity)
    return pld_lib.from_two_probability_mass_functions(
        lower, upper, pessimistic_estimate=True, value_discretization_interval=float(interval), symmetric=True)


def _loss_scale(n: int, eps0: float) -> float:
    """sqrt(χ²) bound of one shuffle from UB1 at α = 2: the scale of the per-round privacy loss."""
    return math.sqrt(math.expm1(float(shuffle_rdp_ub1(n, eps0, [2.0])[0])))


def default_discretization(n, eps0, delta, rounds=1, connect_dots: bool = False) -> float:
    """A PLD grid Δ for `fmt22_epsilon`, balancing the discretization bias against memory.

    Rounding losses up adds at most Δ per round, so Δ ≈ 1e-3·ε_ref/T keeps that bias near
    0.1% of ε_ref (the RDP estimate of the run's ε); Connect-the-Dots has no first-order
    bias, so 1e-3·ε_ref/sqrt(T) suffices. Δ is raised where the composed loss (mean T·σ²/2,
    spread ±10·sqrt(T)·σ, σ from UB1's χ² at α = 2) would need more than 2^23 bins (2^20
    with Connect-the-Dots), and capped at 1e-4.

    Args:
      n, eps0, delta, rounds: as for `fmt22_epsilon`.
      connect_dots: the discretization the grid is for.

    Returns:
      Δ > 0.

    Raises:
      ValueError: a parameter outside its range.
    """
    n, eps0, delta = _integer("n", n, 1), _eps0(eps0), _delta(delta)
    rounds = _integer("rounds", rounds, 1)
    sigma = min(_loss_scale(n, eps0), eps0)
    reference = rdp_to_dp(DEFAULT_ORDERS, rounds * shuffle_rdp_upper(n, eps0), delta).epsilon
    width = min(2.0 * rounds * eps0, 2.0 * (rounds * sigma**2 / 2.0 + 10.0 * math.sqrt(rounds) * sigma))
    if connect_dots:
        return float(min(1e-4, max(1e-3 * reference / math.sqrt(rounds), width / 2**20)))
    return float(min(1e-4, max(1e-3 * reference / rounds, width / _MAX_COMPOSED_BINS)))


def fmt22_epsilon(n, eps0, delta, rounds=1, value_discretization_interval=None, *, c_blocks: int = 256,
                  connect_dots: bool = False) -> dict:
    """ε of T shuffles of n ε0-LDP reports: FMT22's dominating pair (Thm 3.2), PLD-composed.

    The single-round PLD of `fmt22_pld` is self-composed T times with dp_accounting (FFT),
    and ε is read off at δ; no round is converted to (ε, δ) on its own. For T = 1 this is
    FMT22's numerical bound, computed from the loss distribution rather than by their
    bisection over ε.

    Args:
      n: number of shuffled reports per round (integer ≥ 1).
      eps0: the local randomizer's ε0 > 0.
      delta: total δ ∈ (0, 1).
      rounds: T ≥ 1 adaptively composed rounds.
      value_discretization_interval: PLD grid Δ; None picks `default_discretization`.
      c_blocks, connect_dots: see `fmt22_pld`.

    Returns:
      {"epsilon", "delta", "rounds", "value_discretization_interval", "method"}.

    Raises:
      ValueError: a parameter outside its range.
    """
    n, eps0, delta = _integer("n", n, 1), _eps0(eps0), _delta(delta)
    rounds = _integer("rounds", rounds, 1)
    interval = default_discretization(n, eps0, delta, rounds, connect_dots) if value_discretization_interval is None \
        else value_discretization_interval
    pld = fmt22_pld(n, eps0, interval, c_blocks=c_blocks, connect_dots=connect_dots)
    if rounds > 1:
        pld = pld.self_compose(rounds)
    return {
        "epsilon": float(pld.get_epsilon_for_delta(delta)),
        "delta": delta,
        "rounds": rounds,
        "value_discretization_interval": float(interval),
        "method": ("FMT22 Thm 3.2 dominating pair (clones), pessimistic PLD (dp_accounting, "
                   + ("Connect-the-Dots" if connect_dots else "losses rounded up") + ")"
                   + (f", self-composed {rounds} times" if rounds > 1 else "")),
    }


# ---------------------------------------------------------------------------------------
# Composition of per-round (ε, δ) guarantees (baselines)
# ---------------------------------------------------------------------------------------

def kov_composition_epsilon(epsilon1, delta1, rounds, delta) -> float:
    """ε of T-fold adaptive composition of (ε1, δ1)-DP mechanisms, optimal (KOV15 Thm 3.3).

    The (ε1, δ1) guarantee is dominated by the canonical pair with loss +∞ w.p. δ1 and ±ε1
    otherwise (Kairouz, Oh, Viswanath 2015; Murtagh, Vadhan 2016); its T-fold composition is
    computed exactly by dp_accounting on the grid Δ = ε1 (no rounding), so this is KOV15's
    optimal composition, with the total δ accounting for 1 − (1 − δ1)^T.

    Args:
      epsilon1: per-round ε1 ≥ 0.
      delta1: per-round δ1 ∈ [0, 1).
      rounds: T ≥ 1.
      delta: total δ ∈ (0, 1).

    Returns:
      The smallest total ε at δ (inf if δ is below the composed infinity mass).

    Raises:
      ValueError: a parameter outside its range.
    """
    if isinstance(epsilon1, bool) or not isinstance(epsilon1, numbers.Real) \
            or not (math.isfinite(epsilon1) and epsilon1 >= 0):
        raise ValueError(f"epsilon1 must be a finite number ≥ 0, got {epsilon1!r}")
    if isinstance(delta1, bool) or not isinstance(delta1, numbers.Real) or not 0.0 <= delta1 < 1.0:
        raise ValueError(f"delta1 must lie in [0, 1), got {delta1!r}")
    rounds, delta = _integer("rounds", rounds, 1), _delta(delta)
    if epsilon1 == 0.0:
        return 0.0 if -math.expm1(rounds * math.log1p(-delta1)) <= delta else math.inf
    pld = pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
        {1: (1.0 - delta1) / (1.0 + math.exp(-epsilon1)), -1: (1.0 - delta1) / (1.0 + math.exp(epsilon1))},
        delta1, float(epsilon1), pessimistic_estimate=True)
    if rounds > 1:
        pld = pld.self_compose(rounds)
    return float(pld.get_epsilon_for_delta(delta))


def compose_approximate_dp(per_round_epsilon: Callable[[float], float], rounds, delta, method: str = "kov",
                           grid: int = 24) -> dict:
    """Convert each round to (ε1(δ1), δ1) and compose (KOV15 or DRV10), optimizing the δ split.

    The baseline the thesis compares against (§3.4, §3.10): δ1 = f·δ/T over a log grid of
    f ∈ [1e-5, 0.95], refined around the best point; "kov" composes optimally
    (`kov_composition_epsilon`), "drv" with Dwork–Rothblum–Vadhan strong composition
    (seed 001 Lemma 2.1.2; `paper.advanced_composition`) with slack δ − T·δ1. Every split gives
    a valid bound, so an imperfect search only loses tightness.

    Args:
      per_round_epsilon: δ1 ↦ per-round ε1 (inf where its bound does not apply).
      rounds: T ≥ 1.
      delta: total δ ∈ (0, 1).
      method: "kov" or "drv".
      grid: number of coarse split points (integer ≥ 2).

    Returns:
      {"epsilon", "delta", "per_round_epsilon", "per_round_delta", "method"}.

    Raises:
      ValueError: a parameter outside its range.
    """
    rounds, delta, grid = _integer("rounds", rounds, 1), _delta(delta), _integer("grid", grid, 2)
    if method not in ("kov", "drv"):
        raise ValueError(f"method must be 'kov' or 'drv', got {method!r}")
    if rounds == 1:
        eps1 = float(per_round_epsilon(delta))
        return {"epsilon": eps1, "delta": delta, "per_round_epsilon": eps1, "per_round_delta": delta,
                "method": "single round"}

    def total(log_f: float) -> tuple[float, float, float]:
        delta1 = delta * math.exp(log_f) / rounds
        eps1 = float(per_round_epsilon(delta1))
        if not math.isfinite(eps1):
            return math.inf, eps1, delta1
        if method == "kov":
            return kov_composition_epsilon(eps1, delta1, rounds, delta), eps1, delta1
        slack = (delta - rounds * delta1) * (1.0 - 1e-9)
        eps, spent = advanced_composition(eps1, delta1, rounds, slack)
        return (eps if spent <= delta else math.inf), eps1, delta1

    log_grid = np.linspace(math.log(1e-5), math.log(0.95), grid)
    results = [total(x) for x in log_grid]
    best = int(np.argmin([r[0] for r in results]))
    step = log_grid[1] - log_grid[0]
    lo, hi = log_grid[best] - step, min(log_grid[best] + step, math.log(0.95))
    for x in np.linspace(lo, hi, 9):
        results.append(total(float(x)))
    eps, eps1, delta1 = min(results, key=lambda r: r[0])
    name = "KOV15 optimal composition" if method == "kov" else "DRV10 strong composition (Lemma 2.1.2)"
    return {"epsilon": float(eps), "delta": delta, "per_round_epsilon": float(eps1),
            "per_round_delta": float(delta1), "method": f"per-round (ε, δ), {name}, δ split optimized"}


# ---------------------------------------------------------------------------------------
# Girgis RDP curves (thesis ch. 5)
# ---------------------------------------------------------------------------------------

def _integer_order_curve(orders: np.ndarray, at_integer: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """An integer-order bound at real orders by convexity of (α−1)ε(α) (Remark 5.3.2, eq. 5.6)."""
    lo, hi = np.floor(orders), np.ceil(orders)
    needed = np.unique(np.concatenate([lo[lo >= 2], hi]))
    values = dict(zip(needed.tolist(), at_integer(needed).tolist()))
    result = np.empty_like(orders)
    for i, (alpha, a_lo, a_hi) in enumerate(zip(orders, lo, hi)):
        if a_lo == a_hi:
            result[i] = values[a_lo]
            continue
        weight = a_hi - alpha  # α = weight·⌊α⌋ + (1 − weight)·⌈α⌉
        low_term = 0.0 if a_lo == 1 else weight * (a_lo - 1) * values[a_lo]
        result[i] = (low_term + (1 - weight) * (a_hi - 1) * values[a_hi]) / (alpha - 1)
    return result


def ldp_rdp(eps0, orders=DEFAULT_ORDERS) -> np.ndarray:
    """RDP curve that every ε0-DP mechanism satisfies: that of binary randomized response.

    Any ε0-DP pair is a post-processing of the randomized-response pair (Kairouz, Oh,
    Viswanath 2015, Thm 2.4), so by data processing D_α ≤ (1/(α−1))·log(q^α(1−q)^(1−α) +
    (1−q)^α q^(1−α)), q = e^ε0/(1+e^ε0) (thesis eq. 3.4); the shuffled output is ε0-DP too.

    Args:
      eps0: ε0 > 0.
      orders: Rényi orders α > 1 (real).

    Returns:
      ε(α) at each order (< ε0).

    Raises:
      ValueError: a parameter outside its range.
    """
    eps0, orders = _eps0(eps0), _orders(orders)
    log_q = -math.log1p(math.exp(-eps0))
    log_1mq = -eps0 + log_q
    return np.logaddexp(orders * log_q + (1 - orders) * log_1mq, orders * log_1mq + (1 - orders) * log_q) / (orders - 1)


def _nbar(n: int, eps0: float) -> int:
    """n̄ = ⌊(n−1)/(2e^ε0)⌋ + 1 of Thms 5.3.1/5.3.2 (k̄ of Thm 5.4.1 with n = k)."""
    return math.floor((n - 1) * math.exp(-eps0) / 2.0) + 1


def shuffle_rdp_ub1(n, eps0, orders=DEFAULT_ORDERS) -> np.ndarray:
    """Girgis Thm 5.3.1 (UB1): RDP upper bound of one shuffle of n ε0-LDP reports.

    For integer α ≥ 2, with n̄ = ⌊(n−1)/(2e^ε0)⌋ + 1:
    ε(α) ≤ (1/(α−1))·log(1 + C(α,2)(e^ε0−1)²/(n̄e^ε0)
                          + Σ_{i=3..α} C(α,i)·i·Γ(i/2)·((e^2ε0−1)²/(2n̄e^2ε0))^(i/2)
                          + exp(ε0α − (n−1)/(8e^ε0))),
    summed in log space; real orders by the convex interpolation of Remark 5.3.2.

    Args:
      n: number of shuffled reports (integer ≥ 1).
      eps0: ε0 > 0.
      orders: Rényi orders α > 1.

    Returns:
      The bound at each order (may exceed ε0 where the tail term dominates).

    Raises:
      ValueError: a parameter outside its range.
    """
    n, eps0, orders = _integer("n", n, 1), _eps0(eps0), _orders(orders)
    nbar = _nbar(n, eps0)
    log_a, log_b = _log_expm1(eps0), _log_expm1(2 * eps0)
    log_quad = 2 * log_a - math.log(nbar) - eps0
    log_v = 2 * log_b - math.log(2.0 * nbar) - 2 * eps0
    tail = (n - 1) * math.exp(-eps0) / 8.0

    def at_integer(alphas: np.ndarray) -> np.ndarray:
        out = np.empty_like(alphas)
        for j, alpha in enumerate(alphas):
            i = np.arange(3, int(alpha) + 1, dtype=float)
            terms = np.concatenate([[0.0, _log_binom_coef(alpha, 2.0) + log_quad, eps0 * alpha - tail],
                                    _log_binom_coef(alpha, i) + np.log(i) + scipy.special.gammaln(i / 2)
                                    + i / 2 * log_v])
            out[j] = logsumexp(terms) / (alpha - 1)
        return out

    return _integer_order_curve(orders, at_integer)


def shuffle_rdp_ub2(n, eps0, orders=DEFAULT_ORDERS) -> np.ndarray:
    """Girgis Thm 5.3.2 (UB2): the RDP upper bound that holds at every real α > 1.

    ε(α) ≤ (1/(α−1))·log(exp(α²(e^ε0−1)²/n̄) + exp(ε0α − (n−1)/(8e^ε0))), n̄ = ⌊(n−1)/(2e^ε0)⌋ + 1.

    Args:
      n: number of shuffled reports (integer ≥ 1).
      eps0: ε0 > 0.
      orders: Rényi orders α > 1.

    Returns:
      The bound at each order.

    Raises:
      ValueError: a parameter outside its range.
    """
    n, eps0, orders = _integer("n", n, 1), _eps0(eps0), _orders(orders)
    quad = orders**2 * math.exp(2 * _log_expm1(eps0)) / _nbar(n, eps0)
    return np.logaddexp(quad, eps0 * orders - (n - 1) * math.exp(-eps0) / 8.0) / (orders - 1)


def cor531_domain(n, eps0, orders=DEFAULT_ORDERS) -> np.ndarray:
    """Where Girgis Cor 5.3.1 applies: α⁴·e^(5ε0) ≤ n/9 (per order).

    Args:
      n: number of shuffled reports (integer ≥ 1).
      eps0: ε0 > 0.
      orders: Rényi orders α > 1.

    Returns:
      Boolean mask over the orders.

    Raises:
      ValueError: a parameter outside its range.
    """
    n, eps0, orders = _integer("n", n, 1), _eps0(eps0), _orders(orders)
    return 4 * np.log(orders) + 5 * eps0 <= math.log(n / 9.0)


def shuffle_rdp_cor531(n, eps0, orders=DEFAULT_ORDERS, *, check_domain: bool = True) -> np.ndarray:
    """Girgis Cor 5.3.1 (simplified UB1): ε(α) ≤ (1/(α−1))·log(1 + 4·C(α,2)(e^ε0−1)²/n).

    Holds for integer α ≥ 2 with α⁴e^(5ε0) ≤ n/9; real orders by Remark 5.3.2's
    interpolation (needs both neighbouring integers inside the domain).

    Args:
      n: number of shuffled reports (integer ≥ 1).
      eps0: ε0 > 0.
      orders: Rényi orders α > 1.
      check_domain: True (default): +inf outside the domain; False: the bare formula (for
        comparisons only — it is not a bound there).

    Returns:
      The bound at each order.

    Raises:
      ValueError: a parameter outside its range.
    """
    n, eps0, orders = _integer("n", n, 1), _eps0(eps0), _orders(orders)
    log_a2 = 2 * _log_expm1(eps0)

    def at_integer(alphas: np.ndarray) -> np.ndarray:
        value = np.log1p(4 * np.exp(_log_binom_coef(alphas, 2.0) + log_a2 - math.log(n))) / (alphas - 1)
        if check_domain:
            value = np.where(4 * np.log(alphas) + 5 * eps0 <= math.log(n / 9.0), value, np.inf)
        return value

    return _integer_order_curve(orders, at_integer)


def _shuffled_rr_rdp(m: int, eps0: float, gamma: float, orders: np.ndarray) -> np.ndarray:
    """Exact D_α(M(D') ‖ M(D)) for (γ-subsampled) shuffled 2RR on D = 0…0, D' = 0…01.

    Without subsampling the count of ones is k ~ Bin(m, 1/(e^ε0+1)) under M(D) and the
    likelihood ratio is r(k) = e^−ε0 + (e^2ε0 − 1)k/(m e^ε0); with k-of-n subsampling the
    ratio is 1 − γ + γ·r(k) over the m = k sampled users. Terms more than e^−60 below the
    largest are dropped and the binomial is renormalized on what is kept (relative effect
    < 1e-20, far below float error).
    """
    p = 1.0 / (1.0 + math.exp(eps0))
    log_b = _log_expm1(2 * eps0)
    log_top = math.log1p(-gamma + gamma * math.exp(eps0)) if gamma < 1 else eps0  # log of the largest ratio
    lo, hi = _binomial_window(m, p, drop=float(orders.max()) * log_top + 60.0)
    k = np.arange(lo, hi + 1, dtype=float)
    log_pmf = _binomial_log_weights(m, p, lo, hi)
    with np.errstate(divide="ignore"):
        log_r = -eps0 + np.logaddexp(0.0, log_b + np.log(k) - math.log(m))
    log_ratio = log_r if gamma >= 1 else np.logaddexp(math.log1p(-gamma), math.log(gamma) + log_r)
    peak = log_pmf.max()
    out = np.empty_like(orders)
    for i, alpha in enumerate(orders):
        keep = log_pmf >= peak - alpha * log_top - 60.0
        out[i] = max(0.0, logsumexp(log_pmf[keep] + alpha * log_ratio[keep]) / (alpha - 1))
    return out


def shuffle_rdp_lower(n, eps0, orders=DEFAULT_ORDERS) -> np.ndarray:
    """Girgis Thm 5.3.3: lower bound on the worst-case RDP of shuffling n ε0-LDP reports.

    Computed exactly as the binomial sum for shuffled binary randomized response on
    D = (0,…,0), D' = (0,…,0,1) (valid for real α too), which equals (5.9)'s expansion at
    integer α. It lower-bounds any RDP upper bound valid for every ε0-LDP randomizer; it is
    not a privacy guarantee (notes §6 trap 28), and converting it to (ε, δ) with Lemma 2.1.3
    does not give an (ε, δ) lower bound (that conversion is only an upper bound) — see
    `shuffle_ldp_lower_epsilon` for one that is.

    Args:
      n: number of shuffled reports (integer ≥ 1).
      eps0: ε0 > 0.
      orders: Rényi orders α > 1.

    Returns:
      ε(α) of that pair at each order (≤ ε0).

    Raises:
      ValueError: a parameter outside its range.
    """
    n, eps0, orders = _integer("n", n, 1), _eps0(eps0), _orders(orders)
    return _shuffled_rr_rdp(n, eps0, 1.0, orders)


def shuffle_rdp_upper(n, eps0, orders=DEFAULT_ORDERS) -> np.ndarray:
    """Pointwise minimum of the valid RDP upper bounds of one shuffle (notes §3.10 ledger).

    min{UB1 (Thm 5.3.1), UB2 (Thm 5.3.2), Cor 5.3.1 inside α⁴e^(5ε0) ≤ n/9, the ε0-DP
    (randomized-response) curve}; a minimum of valid bounds is a valid bound.

    Args:
      n: number of shuffled reports (integer ≥ 1).
      eps0: ε0 > 0.
      orders: Rényi orders α > 1.

    Returns:
      ε(α) at each order.

    Raises:
      ValueError: a parameter outside its range.
    """
    return np.minimum.reduce(list(_shuffle_upper_curves(n, eps0, orders).values()))


def _shuffle_upper_curves(n, eps0, orders) -> dict[str, np.ndarray]:
    """Every valid RDP upper bound of one n-shuffle, by name (+inf where one does not apply)."""
    return {"Thm 5.3.1 (UB1)": shuffle_rdp_ub1(n, eps0, orders), "Thm 5.3.2 (UB2)": shuffle_rdp_ub2(n, eps0, orders),
            "Cor 5.3.1": shuffle_rdp_cor531(n, eps0, orders), "eps0-LDP (randomized response)": ldp_rdp(eps0, orders)}


def _kbar_gamma(n, k, eps0):
    """Checked (n, k, ε0) of the subsampled shuffle, with k̄ and γ = k/n."""
    n, eps0 = _integer("n", n, 2), _eps0(eps0)
    k = _integer("k", k, 2)
    if k > n:
        raise ValueError(f"k must satisfy 2 ≤ k ≤ n = {n}, got {k}")
    return n, k, eps0, _nbar(k, eps0), k / n


def subsampled_shuffle_rdp_ub(n, k, eps0, orders=DEFAULT_ORDERS) -> np.ndarray:
    """Girgis Thm 5.4.1: RDP upper bound of sampling k of n users (no replacement), then shuffling.

    For integer α ≥ 2, γ = k/n, k̄ = ⌊(k−1)/(2e^ε0)⌋ + 1:
    ε(α) ≤ (1/(α−1))·log(1 + 4C(α,2)γ²(e^ε0−1)²/(k̄e^ε0)
                          + Σ_{j=3..α} C(α,j)γ^j·j·Γ(j/2)·(2(e^2ε0−1)²/(k̄e^2ε0))^(j/2) + Υ),
    Υ = Σ_{j=2..α} C(α,j)γ^j(e^ε0 − e^−ε0)^j·e^(−(k−1)/(8e^ε0)) — Thm 5.4.4's tail through
    Lemma 5.4.1, i.e. the notes' conservative Υ (the larger of the two readings). Summed in
    log space; real orders by Remark 5.3.2's interpolation. Users hold one data point each
    (notes §6 trap 12; several: `record_subsampled_shuffle_rdp_ub`).

    Args:
      n: population size (integer ≥ 2).
      k: users sampled per round, 2 ≤ k ≤ n.
      eps0: ε0 > 0.
      orders: Rényi orders α > 1.

    Returns:
      The bound at each order.

    Raises:
      ValueError: a parameter outside its range.
    """
    n, k, eps0, _, gamma = _kbar_gamma(n, k, eps0)
    return _thm541(k, gamma, eps0, _orders(orders))


def record_sampling_rate(clients, population, per_client, records_min) -> float:
    """Seed 001 Lemma 4.3.1: the sampling rate that amplifies a record of a client holding m
    records when k of n clients are sampled and each sends s of its records.

    s = 1: q = k/(nm) (both sampling levels); s > 1: q₂ = s/m only — the client-sampling
    factor is lost (notes §6 trap 12). Capped at 1.

    Args:
      clients: k, clients sampled per round (1 ≤ k ≤ n).
      population: n.
      per_client: s ≥ 1.
      records_min: m ≥ 1, the records every client is guaranteed to hold.

    Returns:
      The rate γ to use in Thm 5.4.1.

    Raises:
      ValueError: a parameter outside its range.
    """
    population, clients = _integer("population", population, 1), _integer("clients", clients, 1)
    per_client, records_min = _integer("per_client", per_client, 1), _integer("records_min", records_min, 1)
    if clients > population:
        raise ValueError(f"clients must satisfy 1 ≤ k ≤ n = {population}, got {clients}")
    if per_client == 1:
        return clients / population / records_min
    return min(1.0, per_client / records_min)


def record_subsampled_shuffle_rdp_ub(messages, gamma, eps0, orders=DEFAULT_ORDERS) -> np.ndarray:
    """Girgis Thm 5.4.1 at a record's sampling rate γ (Lemma 4.3.1, `record_sampling_rate`) and
    the shuffle of the round's `messages` reports (k·s): the RDP route of Thm 5.4.3 for clients
    holding several records.

    Args:
      messages: reports shuffled per round (integer ≥ 2).
      gamma: the record's sampling rate, 0 < γ ≤ 1.
      eps0: ε0 > 0.
      orders: Rényi orders α > 1.

    Returns:
      The bound at each order.

    Raises:
      ValueError: a parameter outside its range.
    """
    messages, eps0 = _integer("messages", messages, 2), _eps0(eps0)
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real) or not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must lie in (0, 1], got {gamma!r}")
    return _thm541(messages, float(gamma), eps0, _orders(orders))


def _thm541(k: int, gamma: float, eps0: float, orders: np.ndarray) -> np.ndarray:
    """Thm 5.4.1's curve for a k-report shuffle whose changed report is present with probability γ."""
    kbar = _nbar(k, eps0)
    log_g = math.log(gamma)
    log_a, log_b = _log_expm1(eps0), _log_expm1(2 * eps0)
    log_quad = math.log(4.0) + 2 * log_g + 2 * log_a - math.log(kbar) - eps0
    log_v = math.log(2.0) + 2 * log_b - math.log(kbar) - 2 * eps0
    log_x = log_g + log_b - eps0  # log(γ(e^ε0 − e^−ε0))
    tail = (k - 1) * math.exp(-eps0) / 8.0

    def at_integer(alphas: np.ndarray) -> np.ndarray:
        out = np.empty_like(alphas)
        for i, alpha in enumerate(alphas):
            j3 = np.arange(3, int(alpha) + 1, dtype=float)
            j2 = np.arange(2, int(alpha) + 1, dtype=float)
            terms = np.concatenate([
                [0.0, _log_binom_coef(alpha, 2.0) + log_quad],
                _log_binom_coef(alpha, j3) + j3 * log_g + np.log(j3) + scipy.special.gammaln(j3 / 2) + j3 / 2 * log_v,
                _log_binom_coef(alpha, j2) + j2 * log_x - tail])
            out[i] = logsumexp(terms) / (alpha - 1)
        return out

    return _integer_order_curve(orders, at_integer)


def subsampled_shuffle_rdp_lower(n, k, eps0, orders=DEFAULT_ORDERS) -> np.ndarray:
    """Girgis Thm 5.4.2: lower bound on the worst-case RDP of the k-of-n subsampled shuffle.

    Computed exactly for subsampled shuffled binary randomized response on D = (0,…,0),
    D' = (0,…,0,1): ratio 1 − γ + γ·r(m), m ~ Bin(k, 1/(e^ε0+1)); a sanity band, not a
    guarantee.

    Args:
      n: population size (integer ≥ 2).
      k: users sampled per round, 2 ≤ k ≤ n.
      eps0: ε0 > 0.
      orders: Rényi orders α > 1.

    Returns:
      ε(α) of that pair at each order.

    Raises:
      ValueError: a parameter outside its range.
    """
    n, k, eps0, _, gamma = _kbar_gamma(n, k, eps0)
    return _shuffled_rr_rdp(k, eps0, gamma, _orders(orders))


def _subsampled_upper_curves(n, k, eps0, orders) -> dict[str, np.ndarray]:
    """Every valid RDP upper bound of the k-of-n subsampled shuffle, by name."""
    curves = {"Thm 5.4.1": subsampled_shuffle_rdp_ub(n, k, eps0, orders)}
    # Conditioned on the sample the output is a k-shuffle (or identical when the changed user is
    # not sampled); E_Q[(P/Q)^α] is jointly convex, so the k-shuffle's bounds hold as well.
    curves.update({f"k-shuffle {name}": curve for name, curve in _shuffle_upper_curves(k, eps0, orders).items()})
    return curves


def subsampled_shuffle_rdp_upper(n, k, eps0, orders=DEFAULT_ORDERS) -> np.ndarray:
    """Pointwise minimum of valid RDP upper bounds of the k-of-n subsampled shuffle.

    min{Thm 5.4.1, every bound of `shuffle_rdp_upper` for a shuffle of k reports}: given the
    sample, the output is a k-shuffle (or does not depend on the changed user), and
    exp((α−1)D_α) is jointly convex, so the k-shuffle's bounds carry over.

    Args:
      n: population size (integer ≥ 2).
      k: users sampled per round, 2 ≤ k ≤ n.
      eps0: ε0 > 0.
      orders: Rényi orders α > 1.

    Returns:
      ε(α) at each order.

    Raises:
      ValueError: a parameter outside its range.
    """
    return np.minimum.reduce(list(_subsampled_upper_curves(n, k, eps0, orders).values()))


# ---------------------------------------------------------------------------------------
# Top level
# ---------------------------------------------------------------------------------------

def _rdp_result(curves: dict[str, np.ndarray], orders: np.ndarray, rounds: int, delta: float, what: str) -> dict:
    """Add the pointwise-minimum curve over rounds, convert once, and say which bound binds."""
    names = list(curves)
    stacked = np.vstack([curves[name] for name in names])
    upper = stacked.min(axis=0)
    conversion = rdp_to_dp(orders, rounds * upper, delta)
    at = int(np.flatnonzero(orders == conversion.order)[0])
    return {
        "epsilon": conversion.epsilon,
        "delta": delta,
        "rounds": rounds,
        "order": conversion.order,
        "at_cap": conversion.at_cap,
        "binding_bound": names[int(np.argmin(stacked[:, at]))],
        "method": (f"RDP: pointwise min of {', '.join(names)} ({what}); "
                   f"composed over {rounds} round(s) by adding curves (Mironov 2017 Prop 1); "
                   "converted by Lemma 2.1.3 (CKS20/BBG20)"),
    }


def shuffle_ldp_epsilon(n, eps0, delta, rounds=1, bound="best") -> dict:
    """(ε, δ) of T rounds, each shuffling n ε0-LDP reports, by the named accountant.

    bound: "fmt" — FMT22 Thm 3.2 pair, PLD self-composed (`fmt22_epsilon`);
    "fmt-closed" — FMT22 Thm 3.1 per round, composed optimally (KOV15) with the δ split
    optimized (`compose_approximate_dp`; only inside Thm 3.1's domain);
    "rdp" — Girgis ch. 5 curves (`shuffle_rdp_upper`) added over rounds and converted
    (Lemma 2.1.3); "best" — the smallest of those that apply (each is a valid bound).

    Args:
      n: reports per round (integer ≥ 1).
      eps0: the local randomizer's ε0 > 0.
      delta: total δ ∈ (0, 1).
      rounds: T ≥ 1.
      bound: one of "fmt", "fmt-closed", "rdp", "best".

    Returns:
      JSON-serializable dict with at least "epsilon", "delta", "rounds", "bound", "method";
      "order", "at_cap", "binding_bound" for rdp; "value_discretization_interval" for fmt;
      for "best", "winner" and "candidates" (every bound's result, or its "error").

    Raises:
      ValueError: a parameter outside its range, an unknown bound, or "fmt-closed" outside
        Thm 3.1's domain.
    """
    n, eps0, delta = _integer("n", n, 1), _eps0(eps0), _delta(delta)
    rounds = _integer("rounds", rounds, 1)
    if bound not in BOUNDS:
        raise ValueError(f"bound must be one of {BOUNDS}, got {bound!r}")
    common = {"n": n, "eps0": eps0}
    if bound == "rdp":
        result = _rdp_result(_shuffle_upper_curves(n, eps0, DEFAULT_ORDERS), DEFAULT_ORDERS, rounds, delta,
                             "Girgis Thm 5.3.1/5.3.2/Cor 5.3.1")
    elif bound == "fmt":
        result = fmt22_epsilon(n, eps0, delta, rounds)
    elif bound == "fmt-closed":
        if not fmt22_closed_form_domain(n, eps0, delta / rounds):
            fmt22_closed_form_epsilon(n, eps0, delta / rounds)  # raises, naming the domain
        composed = compose_approximate_dp(
            lambda d1: fmt22_closed_form_epsilon(n, eps0, d1) if fmt22_closed_form_domain(n, eps0, d1) else math.inf,
            rounds, delta, "kov")
        if not math.isfinite(composed["epsilon"]):
            raise ValueError(f"eps0={eps0} is outside FMT22 Thm 3.1's domain at every per-round delta1 ≤ "
                             f"0.95·delta/rounds = {0.95 * delta / rounds:.3g} for n={n}")
        result = {"epsilon": composed["epsilon"], "delta": delta, "rounds": rounds,
                  "per_round_epsilon": composed["per_round_epsilon"], "per_round_delta": composed["per_round_delta"],
                  "method": "FMT22 Thm 3.1 closed form" + ("" if rounds == 1 else "; " + composed["method"])}
    else:
        candidates = {}
        for name in ("fmt", "fmt-closed", "rdp"):
            try:
                candidates[name] = shuffle_ldp_epsilon(n, eps0, delta, rounds, name)
            except ValueError as error:
                candidates[name] = {"error": str(error)}
        valid = {name: c for name, c in candidates.items() if "epsilon" in c}
        winner = min(valid, key=lambda name: valid[name]["epsilon"])
        result = dict(valid[winner])
        result.update(winner=winner, candidates=candidates,
                      method=f"best of {sorted(valid)}: {valid[winner]['method']}")
        return {**result, **common, "bound": "best"}
    return {**result, **common, "bound": bound}


def subsampled_shuffle_epsilon(n, k, eps0, delta, rounds=1) -> dict:
    """(ε, δ) of T rounds, each sampling k of n users without replacement and shuffling their reports.

    RDP route (thesis Thm 5.4.3): per-round curve `subsampled_shuffle_rdp_upper` (Thm 5.4.1
    and the k-shuffle bounds), added over rounds, converted by Lemma 2.1.3. The baseline
    FMT22 Thm 3.1 (k reports) + subsampling Lemma 2.1.1 (ε' = log(1 + γ(e^ε − 1)), γδ) +
    KOV15 composition is reported under "baseline" when Thm 3.1 applies.

    Args:
      n: population size (integer ≥ 2).
      k: users sampled per round, 2 ≤ k ≤ n.
      eps0: the local randomizer's ε0 > 0.
      delta: total δ ∈ (0, 1).
      rounds: T ≥ 1.

    Returns:
      JSON-serializable dict: "epsilon", "delta", "rounds", "order", "at_cap",
      "binding_bound", "method", "n", "k", "eps0", "baseline".

    Raises:
      ValueError: a parameter outside its range.
    """
    n, k, eps0, _, gamma = _kbar_gamma(n, k, eps0)
    delta, rounds = _delta(delta), _integer("rounds", rounds, 1)
    result = _rdp_result(_subsampled_upper_curves(n, k, eps0, DEFAULT_ORDERS), DEFAULT_ORDERS, rounds, delta,
                         "Girgis Thm 5.4.1 and the k-shuffle bounds")

    def per_round(delta1: float) -> float:
        inner = delta1 / gamma  # Lemma 2.1.1: (ε, δ) → (log(1 + γ(e^ε − 1)), γδ)
        if inner >= 1.0 or not fmt22_closed_form_domain(k, eps0, inner):
            return math.inf
        return math.log1p(gamma * math.expm1(fmt22_closed_form_epsilon(k, eps0, inner)))

    composed = compose_approximate_dp(per_round, rounds, delta, "kov")
    baseline = ({"epsilon": composed["epsilon"],
                 "method": "FMT22 Thm 3.1 + Lemma 2.1.1 subsampling + " + composed["method"]}
                if math.isfinite(composed["epsilon"]) else {"error": "FMT22 Thm 3.1 does not apply"})
    return {**result, "n": n, "k": k, "eps0": eps0, "baseline": baseline}


def shuffle_ldp_lower_epsilon(n, eps0, delta, rounds=1, value_discretization_interval: float = 1e-4) -> dict:
    """A valid (ε, δ) lower bound on any ε-accountant for T shuffles of n ε0-LDP reports.

    Not the RDP lower bound converted — Lemma 2.1.3 gives an upper bound on ε from an RDP
    curve, so applied to a lower-bound curve it certifies nothing. Instead: the exact pair
    M(D) = Bin(n, p) and M(D') = Bin(n−1, p) + Bern(1−p), p = 1/(e^ε0+1) (shuffled binary RR
    on D = 0…0, D' = 0…01, the pair behind Thm 5.3.3), both directions, T-fold
    self-composed (non-adaptive), with dp_accounting's OPTIMISTIC rounding and no tail mass
    added. Shuffled 2RR is ε0-LDP, so every bound valid for all ε0-LDP randomizers
    (FMT22, RDP) must be at least this ε (up to the PLD's floating-point error).

    Args:
      n: reports per round (integer ≥ 1).
      eps0: ε0 > 0.
      delta: total δ ∈ (0, 1).
      rounds: T ≥ 1.
      value_discretization_interval: PLD grid Δ > 0 (rounding down: lower estimate).

    Returns:
      {"epsilon", "delta", "rounds", "method", "n", "eps0"}.

    Raises:
      ValueError: a parameter outside its range.
    """
    n, eps0, delta = _integer("n", n, 1), _eps0(eps0), _delta(delta)
    rounds = _integer("rounds", rounds, 1)
    interval = _positive("value_discretization_interval", value_discretization_interval)
    p = 1.0 / (1.0 + math.exp(eps0))
    lo, hi = _binomial_window(n, p, drop=60.0)
    k = np.arange(lo, hi + 1, dtype=float)
    log_d = _binomial_log_weights(n, p, lo, hi)
    with np.errstate(divide="ignore"):
        log_r = -eps0 + np.logaddexp(0.0, _log_expm1(2 * eps0) + np.log(k) - math.log(n))
    log_d_prime = log_d + log_r
    pld = pld_lib.from_two_probability_mass_functions(
        dict(zip(k.astype(int).tolist(), log_d.tolist())), dict(zip(k.astype(int).tolist(), log_d_prime.tolist())),
        pessimistic_estimate=False, value_discretization_interval=float(interval), symmetric=False)
    if rounds > 1:
        pld = pld.self_compose(rounds, tail_mass_truncation=0.0)
    return {"epsilon": float(pld.get_epsilon_for_delta(delta)), "delta": delta, "rounds": rounds, "n": n,
            "eps0": eps0, "method": "exact shuffled-2RR pair (Thm 5.3.3's), optimistic PLD, both directions"}
