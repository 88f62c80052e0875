"""CJMP summation protocols: P_1D (Algorithm 1) and P_vec (Algorithm 2) of seed 000.

Each user of P_1D with input x ∈ [0, Δ] sends exactly g + b_noise one-bit
messages: x̂ ones for the randomized rounding x̂ = ⌊xg/Δ⌋ + Bernoulli(frac)
and Binomial(b_noise, p) noise ones. The analyzer sees only the shuffled
multiset, whose sufficient statistic is the count of ones (Lemma A.2 proof);
it returns (Δ/g)(#ones − p·b_noise·n). P_vec runs P_1D on every coordinate of
x + Δ₂ with range Δ = 2Δ₂ and labels each message with its coordinate.

Users' vectors come as arrays of shape (d, users): users along the last axis.

Two encodings with the same distribution of what the analyzer sees:
  exact:   per block of users, Σ x̂ (exact randomized rounding from one random
           byte per user and coordinate, see rounded_chunk) plus one binomial
           per coordinate for the block's noise bits, kept as exact integers
           (PartialCounts) so that blocks and shards add up in any order;
  literal: every labelled bit materialized, to be permuted by a real shuffle.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Iterable, NamedTuple

import attr
import numpy as np

from pipeline import accounting as privacy  # submodules load on first use: shards never import dp_accounting
from pipeline import draws
from pipeline.accounting import pvec_tight
from pipeline.numerics import column_norms
from pipeline.protocols.base import PlanError, Protocol
from pipeline.protocols.sampling import MAX_TRIALS_PER_DRAW, binomial_above_floor, noise_sampler, split_mean
from pipeline.twins import keeps_twin

# The exact sampler keeps 256·g in 32 bits (see rounded_chunk).
MAX_PRECISION = 2**24 - 1
# Literal mode materializes labels (int32) and bits (uint8) for every message,
# plus the uniform draws that make them; refuse runs that could not fit.
LITERAL_MAX_MESSAGES = 20_000_000


@dataclasses.dataclass(frozen=True)
class PvecParams:
    """The parameters of one P_vec call (Theorem 3.2 / A.6 of seed 000).

    Attributes:
      users: n, the users in this call (the round's batch; notes T4).
      dim: d.
      epsilon, delta: the call's privacy target (ε, δ).
      norm_bound: Δ₂, the ℓ2 bound on every input.
      g: fixed-point precision of each P_1D.
      b_noise: noise bits per user and coordinate.
      p: Bernoulli probability of each noise bit.
      epsilon_hat, delta_hat: the per-coordinate P_1D privacy parameters
        (paper calibration only; the tight one bounds the vector as a whole).
      calibration: the rule that chose g, b_noise and p: "paper" (Theorem 3.2)
        or "tight" (pipeline.accounting.pvec_tight).
      honest_users: robust mode (seed 000 Appendix A.3): how many of the `users`
        actually send (the others drop out); None when all do.
    """

    users: int
    dim: int
    epsilon: float
    delta: float
    norm_bound: float
    g: int
    b_noise: int
    p: float
    epsilon_hat: float | None
    delta_hat: float | None
    calibration: str = "paper"
    honest_users: int | None = None

    @property
    def value_range(self) -> float:
        """Δ = 2Δ₂, the range of the shifted coordinates (notes T6)."""
        return 2.0 * self.norm_bound

    @property
    def messages_per_user(self) -> int:
        """d·(g + b_noise) one-bit messages, independent of the data."""
        return self.dim * (self.g + self.b_noise)

    def noise_sampler(self, block_users: int) -> str:
        """The noise sampler used for a block of `block_users` users."""
        return noise_sampler(min(block_users, self.users) * self.b_noise)


def p1d_noise(g: int, users: int, epsilon: float, delta: float) -> tuple[int, float]:
    """Noise parameters of P_1D by the rule of Lemma 3.1 / A.2 (ε ≤ 15, δ < 1/2).

    b_noise is the smallest integer with b_noise > 180 g² ln(2/δ)/(ε² n), and
    p = 90 g² ln(2/δ)/(b_noise ε² n), so p < 1/2 and b_noise·p·n is the value
    the proof needs.

    Args:
      g: the precision, g ≥ Δ√n.
      users: n.
      epsilon, delta: the P_1D privacy parameters.

    Returns:
      (b_noise, p).

    Raises:
      PlanError: infinitely many noise bits (ε² underflowing, g² overflowing).
    """
    try:
        threshold = 180.0 * g * g * math.log(2.0 / delta) / (epsilon**2 * users)
    except (ZeroDivisionError, OverflowError):  # ε² underflows to 0, or g² beyond a float
        threshold = math.inf
    if not math.isfinite(threshold):
        raise PlanError("privacy.epsilon", f"P_1D would need 180·g²·ln(2/δ)/(ε²n) = {threshold} noise bits per user "
                                           "and coordinate: raise privacy.epsilon or privacy.delta, or lower "
                                           "problem.radius")
    b_noise = math.floor(threshold) + 1
    # Round p up by one ulp: more noise is always safe, float error never less.
    p = math.nextafter(threshold / (2.0 * b_noise), 1.0)
    while p >= 0.5:  # only through float error in `threshold`, or beyond 2⁵³ where b_noise + 1 rounds to b_noise
        b_noise = max(b_noise + 1, math.ceil(b_noise * (1.0 + 2.0**-50)))
        p = math.nextafter(threshold / (2.0 * b_noise), 1.0)
    return b_noise, p


def plan_p1d(users: int, value_range: float, epsilon: float, delta: float) -> PvecParams:
    """P_1D's parameters by Lemma 3.1 / A.2 of seed 000, for inputs in [0, Δ].

    g = ⌈Δ√n⌉ (at least 1); (b_noise, p) by `p1d_noise` at (ε, δ). Expressed as
    a one-coordinate PvecParams with Δ₂ = Δ/2, so P_1D on x is P_vec's
    machinery on x − Δ/2: the shift by Δ₂ gives back x·g/Δ exactly.

    Args:
      users: n ≥ 1.
      value_range: Δ > 0.
      epsilon: 0 < ε ≤ 15.
      delta: 0 < δ < 1/2.

    Returns:
      The parameters (epsilon_hat, delta_hat = ε, δ).
    """
    g = max(1, math.ceil(value_range * math.sqrt(users)))
    b_noise, p = p1d_noise(g, users, epsilon, delta)
    return PvecParams(users, 1, epsilon, delta, value_range / 2.0, g, b_noise, p, epsilon, delta)


@functools.lru_cache(maxsize=4096)
def plan_pvec(users: int, dim: int, epsilon: float, delta: float, norm_bound: float) -> PvecParams:
    """P_vec's parameters by the proof of Theorem 3.2 / A.6 of seed 000.

    γ = δ̂ = δ/(d+1); ε̂ = ε/(18√ln(1/γ)); g = ⌈max(2Δ₂√n, √d, 4)⌉ (the ceiling
    keeps g an integer; g ≥ √d and g ≥ 4 are needed for privacy, notes T5);
    (b_noise, p) by Lemma 3.1 for P_1D with range 2Δ₂ at (ε̂, δ̂).

    Args:
      users: n ≥ 1, the users in this call.
      dim: d ≥ 1.
      epsilon: 0 < ε ≤ 15.
      delta: 0 < δ < 1/2.
      norm_bound: Δ₂ > 0.

    Returns:
      The parameters.

    Raises:
      ValueError: an argument outside the theorem's range.
    """
    if not 0.0 < epsilon <= 15.0:
        raise ValueError(f"P_vec epsilon = {epsilon}: must be in (0, 15] (Theorem 3.2)")
    if not 0.0 < delta < 0.5:
        raise ValueError(f"P_vec delta = {delta}: must be in (0, 1/2) (Theorem 3.2)")
    if users < 1 or dim < 1 or not norm_bound > 0.0:
        raise ValueError(f"P_vec needs users ≥ 1, dim ≥ 1, norm_bound > 0; got {users}, {dim}, {norm_bound}")
    delta_hat = delta / (dim + 1)
    epsilon_hat = epsilon / (18.0 * math.sqrt(math.log(1.0 / delta_hat)))
    g = math.ceil(max(2.0 * norm_bound * math.sqrt(users), math.sqrt(dim), 4.0))
    b_noise, p = p1d_noise(g, users, epsilon_hat, delta_hat)
    return PvecParams(users, dim, epsilon, delta, norm_bound, g, b_noise, p, epsilon_hat, delta_hat)


@functools.lru_cache(maxsize=4096)
def plan_pvec_tight(users: int, dim: int, epsilon: float, delta: float, norm_bound: float,
                    folds: int = 1) -> PvecParams:
    """P_vec's parameters calibrated with the proven RDP bound of pipeline.accounting.pvec_tight.

    Args:
      users: n ≥ 1, the users in this call.
      dim: d ≥ 1.
      epsilon, delta: the target of `folds` calls together (ε > 0, 0 < δ < 1).
      norm_bound: Δ₂ > 0 (the scaling trick makes the noise independent of it).
      folds: calls over the same users that share the target (T for P_GD).

    Returns:
      The parameters; `epsilon`, `delta` are the target they were calibrated for.

    Raises:
      ValueError: an argument out of range, or no noise meets the target.
    """
    if users < 1 or dim < 1 or not norm_bound > 0.0:
        raise ValueError(f"P_vec needs users ≥ 1, dim ≥ 1, norm_bound > 0; got {users}, {dim}, {norm_bound}")
    calibration = pvec_tight.calibrate_pvec(users, dim, epsilon, delta, folds, MAX_PRECISION)
    return PvecParams(users, dim, epsilon, delta, norm_bound, calibration.g, calibration.b_noise, calibration.p,
                      None, None, "tight")


def plan(accounting: str, users: int, dim: int, epsilon: float, delta: float, norm_bound: float,
         folds: int = 1) -> PvecParams:
    """P_vec's parameters under an accounting mode: "paper" (Theorem 3.2) or "tight".

    Raises:
      ValueError: paper mode with folds ≠ 1 (the paper splits budgets itself), or
        the planners' own errors.
    """
    if accounting == "paper":
        if folds != 1:
            raise ValueError(f"paper-mode P_vec plans one call per budget, got folds={folds}")
        return plan_pvec(users, dim, epsilon, delta, norm_bound)
    if accounting == "tight":
        return plan_pvec_tight(users, dim, epsilon, delta, norm_bound, folds)
    raise ValueError(f"accounting {accounting!r}: must be paper or tight")


@dataclasses.dataclass(frozen=True)
class PartialCounts:
    """Some users' share of the shuffled-message statistic, in exact integers.

    Adding partials is exact integer addition, so the total does not depend
    on how users were split into blocks or shards. Only the total of a call
    goes to the analyzer (see `merge`).

    Attributes:
      users: how many users.
      ones_above_floor: per coordinate, their number of ones minus
        `floor_total` (int64).
      floor_total: a public, data-independent integer near their noise
        bits' mean (see sampling.binomial_above_floor).
    """

    users: int
    ones_above_floor: np.ndarray
    floor_total: int


@dataclasses.dataclass(frozen=True)
class ShuffledCounts:
    """All the analyzer receives: per coordinate label, the number of ones
    among the shuffled messages, minus the public constant n·b_noise·p.

    Attributes:
      users: n, the users of the call.
      centred_ones: float64 array of shape (d,).
    """

    users: int
    centred_ones: np.ndarray


def _shift_and_scale(params: PvecParams, vectors: np.ndarray, resolution: int = 1) -> np.ndarray:
    """In place: clip every user to ‖x‖₂ ≤ Δ₂, then x ↦ (x + Δ₂)·g/Δ·resolution,
    clamped to [0, g·resolution] against float error (notes T6, T8).

    Privacy needs ‖x‖₂ ≤ Δ₂ for every user; Lipschitzness gives it up to float
    error, so the randomizer enforces it. Clipping and scaling are one
    multiplication by the per-user factor (g/Δ)·Δ₂/max(‖x‖₂, Δ₂).

    Args:
      params: the call's parameters.
      vectors: users' inputs, shape (d, users).
      resolution: an extra power-of-two factor (fixed-point rounding).

    Returns:
      `vectors`, overwritten.
    """
    norms = column_norms(vectors)
    scale = params.g / params.value_range * resolution
    vectors *= (scale * params.norm_bound) / np.maximum(norms, params.norm_bound, out=norms)
    vectors += scale * params.norm_bound
    return np.clip(vectors, 0.0, float(params.g * resolution), out=vectors)


def _randomized_rounding(params: PvecParams, vectors: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """x̂ = ⌊s⌋ + Bernoulli(s − ⌊s⌋) per user and coordinate (Algorithm 1, notes T9)."""
    scaled = _shift_and_scale(params, vectors.copy())
    floor = np.floor(scaled)
    up = rng.random(scaled.shape) < (scaled - floor)
    return floor.astype(np.int64) + up


# Exact-mode rounding draws one random byte per user and coordinate instead
# of one float64 uniform (see rounded_chunk); the scaled value keeps 8 more bits.
_BYTE = 256


def rounding_constants(params: PvecParams) -> tuple[float, float, float]:
    """What a call's exact randomized rounding (rounded_chunk) reads: (g/Δ·256)·Δ₂, the
    clip-and-scale numerator and the shift, as _shift_and_scale(params, vectors, 256) computes it;
    Δ₂; and 256·g, the clamp."""
    scale = params.g / params.value_range * _BYTE
    return scale * params.norm_bound, params.norm_bound, float(params.g * _BYTE)


def encode_block(params: PvecParams, chunks: Iterable[np.ndarray], rng: np.random.Generator,
                 work: tuple | None = None) -> PartialCounts:
    """Exact-mode encoding of one block of users: their count of ones per
    coordinate, the sufficient statistic of their shuffled messages.

    Each chunk's rounded sum is rounded_chunk, compiled (the compiled rounds inline the same
    function), drawing from `rng`'s stream; the sum over the block's users of independent
    Binomial(b_noise, p) noise counts is then one Binomial(users·b_noise, p) per coordinate
    (DESIGN §4), on the same stream: the compiled twin's finish_block (the fused rounds' draw),
    or beyond one draw's trials binomial_above_floor's exact chunks in numpy.

    Args:
      params: the call's parameters.
      chunks: the users' inputs in consecutive C-contiguous float64 chunks of shape
        (d, users), clipped to ‖x‖₂ ≤ Δ₂ (they are not changed).
      rng: the generator keyed by (round, block), drawn in chunk order.
      work: buffers for chunks of up to `chunk` users (rounding_work(d, chunk)).

    Returns:
      The block's counts.
    """
    from pipeline import compiled  # numba loads at a block's first encoding, not at import

    if params.g > MAX_PRECISION:
        raise ValueError(f"g = {params.g} is too large for 32-bit fixed-point rounding")
    rounded_sum = compiled.compiled_function(rounded_chunk)
    constants = rounding_constants(params)
    work, users = rounding_work(params.dim, 0) if work is None else work, 0
    with draws.drawn_in_compiled_code(rng) as state:
        for chunk in chunks:
            dim, count = chunk.shape
            if work[2].size < dim * count:  # buffers for a larger chunk; the block's ones kept
                work = (*rounding_work(dim, count)[:3], work[3])
            rounded_sum(*constants, work, np.ascontiguousarray(chunk, np.float64).reshape(-1), column_norms(chunk),
                        dim, count, state)
            users += count
        one_draw = users * params.b_noise <= MAX_TRIALS_PER_DRAW
        if one_draw:
            encoding = twin(params)
            compiled.compiled_function(FusedEncoding.finish_block)(encoding, work, users, state)
    ones = work[3].copy()
    work[3][:] = 0
    if one_draw:
        return encoding.block_partial(users, ones)
    noise, floor_total = binomial_above_floor(rng, users * params.b_noise, params.p, params.dim)
    return PartialCounts(users, ones + noise, floor_total)


def finish(params: PvecParams, total: PartialCounts) -> ShuffledCounts:
    """The analyzer's statistic from a call's total: #ones − n·b_noise·p per
    coordinate, with the public centre subtracted exactly.

    Args:
      params: the call's parameters.
      total: the merged partial of all the call's users.

    Returns:
      The analyzer's statistic.
    """
    whole, fraction = split_mean(total.users * params.b_noise, params.p)
    return ShuffledCounts(total.users, centred_ones(total.ones_above_floor, whole - total.floor_total, fraction))


def encode_messages(params: PvecParams, vectors: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Literal-mode randomizer R_vec: every user's labelled one-bit messages.

    Each user sends, for each coordinate j, g value bits (x̂_j ones) and
    b_noise Bernoulli(p) noise bits, all labelled j. The output carries no
    user identity: it is what enters the shuffler.

    Args:
      params: the call's parameters.
      vectors: the users' inputs, shape (d, users).
      rng: the generator keyed by (round, block).

    Returns:
      (labels int32, bits uint8), each of length users·d·(g + b_noise).
    """
    dim, users = vectors.shape
    rounded = _randomized_rounding(params, vectors, rng)
    value_bits = np.arange(params.g) < rounded[..., None]
    noise_bits = rng.random((dim, users, params.b_noise)) < params.p
    bits = np.concatenate([value_bits, noise_bits], axis=2).astype(np.uint8)
    labels = np.broadcast_to(np.arange(dim, dtype=np.int32)[:, None, None], bits.shape)
    return labels.reshape(-1).copy(), bits.reshape(-1)


def count_messages(params: PvecParams, labels: np.ndarray, bits: np.ndarray) -> ShuffledCounts:
    """The analyzer's count of ones per label among shuffled literal messages.

    Args:
      params: the call's parameters.
      labels, bits: the shuffled messages.

    Returns:
      The analyzer's statistic.
    """
    ones = np.bincount(labels, weights=bits, minlength=params.dim).astype(np.int64)
    whole, fraction = split_mean(params.users * params.b_noise, params.p)
    return ShuffledCounts(params.users, centred_ones(ones, whole, fraction))


def decode(params: PvecParams, counts: ShuffledCounts) -> np.ndarray:
    """Analyzer A_vec: the unbiased estimate of Σ_i x_i (Algorithm 2).

    z_j = (Δ/g)·(#ones_j − p·b_noise·n), then o_j = z_j − n·Δ₂ undoes the shift.

    Args:
      params: the call's parameters.
      counts: the shuffled-message statistic.

    Returns:
      float64 array of shape (d,).

    Raises:
      ValueError: the statistic is for a different number of users (notes T4).
    """
    if counts.users != params.users:
        raise ValueError(f"statistic of {counts.users} users for a call planned for {params.users}")
    return estimate_of_sum(counts.centred_ones, params.value_range / params.g, params.users * params.norm_bound)


def centred_ones(ones, whole: int, fraction: float):
    """#ones − n·b_noise·p per coordinate, the mean split exactly (split_mean: whole + fraction):
    the integers subtracted exactly, then the fraction in float64. What finish, count_messages and
    the compiled twin's analyze compute (numpy arrays, or numba's scalars).

    Args:
      ones: the counts of ones (int64), or their parts above a public floor.
      whole: the integer to subtract (whole minus that floor).
      fraction: the mean's fraction, in [0, 1).
    """
    return (ones - whole) - fraction


def estimate_of_sum(centred, scale: float, shift: float):
    """Analyzer A_vec's estimate of Σ_i x_i from the centred ones: (Δ/g)·centred − n·Δ₂ (decode
    and the compiled twin's analyze; numpy arrays, or numba's scalars).

    Args:
      centred: centred_ones.
      scale: Δ/g.
      shift: n·Δ₂, the users' shift undone.
    """
    return scale * centred - shift


def exact_variance(params: PvecParams, vectors: np.ndarray) -> np.ndarray:
    """Exact per-coordinate variance of decode(...) for these inputs (notes §4.2).

    Var_j = (Δ/g)² [Σ_i f_ij(1 − f_ij) + n·b_noise·p(1 − p)], f_ij the
    fractional part of the scaled input.

    Args:
      params: the call's parameters.
      vectors: the inputs, shape (d, n).

    Returns:
      float64 array of shape (d,).
    """
    scaled = _shift_and_scale(params, vectors.copy())
    frac = scaled - np.floor(scaled)
    rounding = (frac * (1.0 - frac)).sum(axis=1)
    noise = params.users * params.b_noise * params.p * (1.0 - params.p)
    return (params.value_range / params.g) ** 2 * (rounding + noise)


def mse_bound(params: PvecParams) -> float:
    """E‖P_vec(X) − Σ x_i‖² for any inputs (notes seed-000 §4.2, exact up to the rounding term):
    d·(Δ/g)²·(n/4 + n·b_noise·p(1 − p)), rounding variance bounded by 1/4 per user and coordinate."""
    noise = params.users * params.b_noise * params.p * (1.0 - params.p)
    return params.dim * (params.value_range / params.g) ** 2 * (params.users / 4.0 + noise)


def mean_mse(accounting: str, users: int, dim: int, epsilon: float, delta: float, norm_bound: float,
             folds: int = 1) -> float:
    """E‖P_vec(X)/n − mean(X)‖² of the call `plan` makes: the noise a round's mean
    estimate adds, which calibrated optimizer parameters use (notes T7)."""
    return mse_bound(plan(accounting, users, dim, epsilon, delta, norm_bound, folds)) / users**2


def literal_messages(params: PvecParams) -> int:
    """Messages a literal-mode call materializes: n·d·(g + b_noise)."""
    return params.users * params.messages_per_user


# --- The compiled twin of a call (FusedEncoding), in numba's subset --------------------------------

_ONES_BYTES = np.uint64(0x0101010101010101)
_HIGH_BITS = np.uint64(0x8080808080808080)
_LOW_BYTE = np.uint64(0xFF)


def _scaled(gradient, factor, scale_bound, top):
    """One user-coordinate's 256·s: its gradient clipped and scaled, shifted, clamped to [0, top]
    (_shift_and_scale's multiply, add and clip, rounded as numpy rounds them)."""
    return min(max(gradient * factor + scale_bound, 0.0), top)


def _note_ties(lows, size, ties):
    """The indices below `size` whose byte in `lows` (uint64 words read as little-endian bytes)
    is 255, in order, into `ties`; returns how many. Eight bytes a test: a word holds a 255
    exactly when its complement holds a zero byte, (v − 0x01…01) & ~v & 0x80…80 ≠ 0."""
    count = 0
    for word in range(lows.size):
        complement = ~lows[word]
        if (complement - _ONES_BYTES) & ~complement & _HIGH_BITS:
            for byte in range(8):
                index = 8 * word + byte
                if index < size and (lows[word] >> np.uint64(8 * byte)) & _LOW_BYTE == _LOW_BYTE:
                    ties[count] = index
                    count += 1
    return count


def rounding_work(dim, chunk):
    """rounded_chunk's buffers for chunks of up to `chunk` users: the raw outputs, the low bytes,
    the ties, and the ones of a block (then of a round)."""
    words = -(-dim * chunk // 8)
    return np.empty(words, np.uint64), np.empty(words, np.uint64), np.empty(dim * chunk, np.int64), np.zeros(dim, np.int64)


def rounded_chunk(scale_bound, bound, top, work, gradients, factors, dim, users, state):
    """Σ_i x̂_ij of a chunk of gradients ((coordinate, user) order; their norms in `factors`, which
    become the clip-and-scale factors (g/Δ·256)·Δ₂/max(‖x‖, Δ₂)), added to the ones (work[3]),
    with x̂ = ⌊s⌋ + Bernoulli(s − ⌊s⌋) exactly, from one random byte per user and coordinate.

    Why it is exact: write 256·s = T + r with T = ⌊256·s⌋ and r ∈ [0, 1), and draw U uniform on
    {0..255} and V uniform on [0, 1). U + V is uniform on [0, 256), so Bernoulli(s − ⌊s⌋) =
    [U + V ≥ 256 − (T mod 256) − r]. That event holds when (T mod 256) + U ≥ 256, fails when
    (T mod 256) + U ≤ 254, and when (T mod 256) + U = 255 (probability 1/256) it is [V ≥ 1 − r].
    Hence x̂ = ⌊(T + U)/256⌋ + [(T + U) mod 256 = 255 and V ≥ 1 − r], and V is drawn only for
    those ties.

    The bytes U come in (coordinate, user) order from ⌈size/8⌉ raw outputs, read as little-endian
    bytes (numpy's `view(np.uint8)`); the low bytes of T + U are kept to find the ties after the
    loop (noting them inside it kept the loop from being vectorized: twice as slow); then one
    uniform V per tie, in order. encode_block runs it compiled alone, the rounds inline it."""
    raws, lows, ties, rounded = work
    for user in range(users):
        factors[user] = scale_bound / max(factors[user], bound)
    size = dim * users
    words = (size + 7) // 8
    draws.raw_outputs(state, raws, words)
    random_bytes, low_bytes = raws.view(np.uint8), lows.view(np.uint8)
    for coordinate in range(dim):
        first = coordinate * users
        row = gradients[first: first + users]
        row_bytes, row_lows = random_bytes[first: first + users], low_bytes[first: first + users]
        whole = 0
        for user in range(users):
            fixed = np.uint32(_scaled(row[user], factors[user], scale_bound, top)) + np.uint32(row_bytes[user])
            row_lows[user] = np.uint8(fixed & 0xFF)
            whole += np.int64(fixed >> 8)
        rounded[coordinate] += whole
    for tie in range(_note_ties(lows[:words], size, ties)):
        value = _scaled(gradients[ties[tie]], factors[ties[tie] % users], scale_bound, top)
        if draws.uniform(state) >= 1.0 - (value - np.floor(value)):
            rounded[ties[tie] // users] += 1


class FusedEncoding(NamedTuple):
    """The constants of a P_vec call as its compiled twin uses them (pipeline.compiled),
    each computed as the Python path computes it, and the twin's functions (the kernels' protocol
    contract: work, encode, finish_block, analyze, counts), encode_block's and finish and decode's
    operations in their order.

    Attributes:
      scale_bound: (g/Δ·256)·Δ₂, the clip-and-scale numerator and the shift (_shift_and_scale).
      bound: Δ₂.
      top: 256·g, the clamp.
      b_noise, p: the noise bits per user and coordinate and their probability.
      whole, fraction: n·b_noise·p split exactly (finish).
      decode_scale: Δ/g (decode).
      shift: n·Δ₂ (decode).
    """

    scale_bound: float
    bound: float
    top: float
    b_noise: int
    p: float
    whole: int
    fraction: float
    decode_scale: float
    shift: float

    def work(self, dim, chunk):
        return rounding_work(dim, chunk)

    def encode(self, work, gradients, factors, dim, users, state):
        rounded_chunk(self.scale_bound, self.bound, self.top, work, gradients, factors, dim, users, state)

    def finish_block(self, work, users, state):
        """One Binomial(users·b_noise, p) per coordinate, added to the ones (encode_block's noise)."""
        ones = work[3]
        for coordinate in range(ones.size):
            ones[coordinate] += draws.binomial(state, users * self.b_noise, self.p)
        return True

    def analyze(self, work, batch, state, estimate):
        """finish and decode: (Δ/g)·(ones − n·b_noise·p) − n·Δ₂, the mean split exactly; the ones cleared."""
        ones = work[3]
        for coordinate in range(estimate.size):
            centred = centred_ones(ones[coordinate], self.whole, self.fraction)
            estimate[coordinate] = estimate_of_sum(centred, self.decode_scale, self.shift)
        ones[:] = 0
        return True

    def counts(self, work):
        """A block's ones (a fully interactive round's partial, block_partial)."""
        return work[3]

    def block_partial(self, users: int, ones: np.ndarray) -> PartialCounts:
        """A block's partial from its users' rounded sum plus one Binomial(users·b_noise, p)
        draw per coordinate, `ones` (encode_block's, whenever one draw takes its trials)."""
        whole, _ = split_mean(users * self.b_noise, self.p)
        return PartialCounts(users, ones - whole, whole)


def twin(params: PvecParams) -> FusedEncoding:
    """The call's compiled twin, without the fused rounds' refusals (CjmpVec.fused_encoding)."""
    whole, fraction = split_mean(params.users * params.b_noise, params.p)
    return FusedEncoding(*rounding_constants(params), params.b_noise, params.p, whole, fraction,
                         params.value_range / params.g, params.users * params.norm_bound)


# What the compiled twin reproduces: a subclass overriding one of these keeps the Python path.
_TWINNED = ("plan", "planned", "encode_block", "finish", "decode", "released_count")


class CjmpVec(Protocol):
    """P_vec of seed 000 (Algorithm 2, Theorem 3.2) as the engine drives it.

    Args:
      accounting: "paper" plans by Theorem 3.2; "tight" calibrates the noise
        with the proven bound of pipeline.accounting.pvec_tight.
    """

    name = "cjmp_vec"
    model = "shuffle"
    supports_literal = True
    supports_robust = True

    def plan(self, round_plan, dim: int) -> PvecParams:
        """The parameters of one round's call.

        Args:
          round_plan: the round (users, ε, δ, Δ₂, folds; see protocols.base.RoundPlan).
          dim: d.

        Returns:
          The parameters.
        """
        if round_plan.honest_fraction < 1.0:
            return self._robust_plan(round_plan, dim)
        return plan(self.accounting, round_plan.users, dim, round_plan.epsilon, round_plan.delta,
                    round_plan.norm_bound, round_plan.folds)

    def _robust_plan(self, round_plan, dim: int) -> PvecParams:
        """Robust mode (seed 000 Appendix A.3): the round's population is planned for, its
        sample of honest users sends. Paper: Theorem 3.2 at γε, which Corollary A.9 makes
        (ε, δ) with a γ fraction honest. Tight: the noise calibrated for the honest users
        alone, each of the population sending that many noise bits."""
        population, honest = round_plan.population, round_plan.users
        if self.accounting == "paper":
            fraction = honest / population
            params = plan("paper", population, dim, round_plan.epsilon * fraction, round_plan.delta,
                          round_plan.norm_bound, round_plan.folds)
        else:
            params = dataclasses.replace(plan("tight", honest, dim, round_plan.epsilon, round_plan.delta,
                                              round_plan.norm_bound, round_plan.folds), users=population)
        return dataclasses.replace(params, honest_users=honest)

    @staticmethod
    def event(params: PvecParams, block_size: int) -> privacy.events.PvecDpEvent:
        """The privacy event of one call (the noise sampler depends on the block size)."""
        copied = {field.name: getattr(params, field.name)
                  for field in attr.fields(privacy.events.PvecDpEvent) if field.name != "noise_sampler"}
        return privacy.events.PvecDpEvent(**copied, noise_sampler=params.noise_sampler(block_size))

    def encode_block(self, params: PvecParams, chunks, rng: np.random.Generator, work=None) -> PartialCounts:
        return encode_block(params, chunks, rng, work)

    def finish(self, params: PvecParams, total: PartialCounts, rng=None) -> ShuffledCounts:
        """The analyzer's statistic (no central noise: `rng` is unused)."""
        return finish(params, total)

    def decode(self, params: PvecParams, counts: ShuffledCounts) -> np.ndarray:
        """Analyzer A_vec; with dropouts it decodes the users whose messages arrived (their count is public)."""
        if params.honest_users is not None:
            params = dataclasses.replace(params, users=counts.users)
        return decode(params, counts)

    def sum_mse(self, params: PvecParams) -> float:
        return mse_bound(params)

    def workspace(self, users: int, dim: int) -> tuple:
        return rounding_work(dim, users)

    def plans_per_budget(self) -> bool:
        return keeps_twin(self, "plans_per_budget", ("plan", "planned"))

    def fused_encoding(self, params: PvecParams) -> FusedEncoding | None:
        """The call's constants for the compiled twin; None for a subclass that changes what it
        reproduces, robust mode, or a call outside its integer range (one exact binomial draw)."""
        if not keeps_twin(self, "fused_encoding", _TWINNED):
            return None
        trials = params.users * params.b_noise
        if params.g > MAX_PRECISION or params.honest_users is not None or trials > MAX_TRIALS_PER_DRAW:
            return None
        return twin(params)

    def check_call(self, params: PvecParams, literal: bool) -> None:
        """Refuses a precision beyond the exact sampler and literal calls too large to materialize."""
        if params.g > MAX_PRECISION:
            raise PlanError("problem.radius", f"needs P_vec precision g = ⌈2Δ₂√n⌉ = {params.g} above {MAX_PRECISION} "
                            "(the exact sampler's limit); lower the radius or the users per round")
        if literal and literal_messages(params) > LITERAL_MAX_MESSAGES:
            raise PlanError("execution.simulation",
                            f"would materialize {literal_messages(params):.3g} messages (limit "
                            f"{LITERAL_MAX_MESSAGES:.0e}); use exact, or fewer users, smaller dim or larger epsilon")

    def encode_messages(self, params: PvecParams, vectors: np.ndarray, rng: np.random.Generator):
        return encode_messages(params, vectors, rng)

    def count_messages(self, params: PvecParams, labels: np.ndarray, bits: np.ndarray) -> ShuffledCounts:
        return count_messages(params, labels, bits)
