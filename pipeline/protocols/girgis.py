"""Unbiased multi-message LDP randomizers of seed 001, chapter 3 (Girgis thesis).

Four kinds, all ε0-LDP per user with ε0 = `budget` by basic composition over
their message streams, all unbiased:
  binary: R^Bin_{v,s} (Alg. 3.3.1 / 3.3.2): one coordinate per block of width
          a = ⌈d/s⌉, sent through 2RR with per-message budget v/s;
  l1:     R^{ℓ1} (Alg. 3.4.1, Lemma 3.4.1): one Hadamard coefficient, one bit;
  linf:   R^{ℓ∞}_{v,m,s} (Alg. 3.5.1 / 3.5.2): m−1 bit planes and one unbiased
          rounding plane of z = (x + r)/(2r), each through R^Bin with the
          water-filling budgets v_k ∝ 4^{−k/3};
  l2:     R^{ℓ2}_{v,m,s} (Alg. 3.6.1 / 3.6.2): the public rotation U = H·D/√d
          and clipping to r∞, then linf.

Users' vectors come as arrays of shape (d, users): users along the last axis.
The analyzer sees only each stream's shuffled multiset of messages, whose
sufficient statistic is a histogram (notes §2.6): per level and per coordinate
index j, the number of messages carrying index j and how many of them carry
the bit 1 (for l1: σ = +1). `encode_block` returns that histogram as int64, so
partial statistics of user blocks add exactly, in any grouping, and `decode`
turns the total into the unbiased estimate of the users' SUM.

The randomizers are written once, in numba's subset (encode_compiled), and run compiled; the
rest (planning, the exact MSE, the numpy analyzer) is numpy. No Ray, no I/O.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import operator
from typing import NamedTuple

import numpy as np

from pipeline import draws
from pipeline.numerics import column_norms, column_sums

KINDS = ("binary", "l1", "linf", "l2")
# Beyond 32 levels the plane weights 4^{−k} are below float resolution, and the
# integer bit planes must fit int64 (see _bit_planes).
MAX_LEVELS = 32
# exact_mse's ℓ2 projection term works on this many users at a time.
_ORACLE_CHUNK = 4096


def _next_power_of_two(value: int) -> int:
    """The smallest power of 2 that is ≥ value (value ≥ 1)."""
    return 1 << (value - 1).bit_length()


def flip_probability(per_message_budget: float) -> float:
    """2RR's flip probability p(v) = ½(1 − √(v²/(v²+4))) (Lemma 2.4.1).

    Written as 2/((√(v²+4) + v)·√(v²+4)), which avoids the cancellation of
    1 − √(...) for large v. Then log((1−p)/p) = 2·asinh(v/2) ≤ v and the
    debiased bit has variance p(1−p)/(1−2p)² = 1/v² exactly (notes §2.1).

    Args:
      per_message_budget: v > 0.

    Returns:
      p ∈ (0, 1/2).
    """
    root = math.sqrt(per_message_budget * per_message_budget + 4.0)
    return 2.0 / ((root + per_message_budget) * root)


@functools.lru_cache(maxsize=4096)
def _level_budgets(budget: float, levels: int, messages: int) -> tuple[float, ...]:
    """Water-filling budgets v_k (see GirgisParams.level_budgets), shrunk by a few
    ulps where float rounding would make the streams' ε0 sum exceed `budget`."""
    shares = [4.0 ** (-k / 3.0) for k in range(1, levels)] + [4.0 ** (-(levels - 1) / 3.0)]
    total = math.fsum(shares)
    shrink = 0
    while True:
        factor = 1.0 - shrink * 2.0**-52
        budgets = tuple(budget * factor * share / total for share in shares)
        epsilons = [2.0 * math.asinh(v / (2.0 * messages)) for v in budgets for _ in range(messages)]
        if sum(epsilons) <= budget and math.fsum(epsilons) <= budget:
            return budgets
        shrink = 2 * shrink + 1


def _rr_variance(p: float) -> float:
    """Variance of one debiased 2RR output, p(1−p)/(1−2p)² (Thm 2.4.1)."""
    return p * (1.0 - p) / (1.0 - 2.0 * p) ** 2


@dataclasses.dataclass(frozen=True)
class GirgisParams:
    """The public parameters of one Girgis randomizer (seed 001, ch. 3).

    Attributes:
      kind: one of KINDS.
      dim: d, the input dimension.
      radius: r: the ℓ1 (l1), ℓ∞ (linf) or ℓ2 (l2) radius of the inputs; 1 for binary.
      budget: v, the user's total local budget: ε0 by basic composition of its
        streams (the actual ε0 of each stream is `stream_epsilons`, trap 2).
      levels: m, bit planes (linf, l2); 1 for binary and l1.
      messages: s, messages per level (binary, linf, l2); 1 for l1.
      rotation_seed: l2's public shared randomness for D (ignored otherwise).
      clip_radius: r∞, the ℓ∞ radius the bit planes encode: for l2 the clipping
        radius of the rotated vector (see plan_girgis), otherwise `radius`.

    Raises:
      ValueError: a field out of range, naming it.
    """

    kind: str
    dim: int
    radius: float
    budget: float
    levels: int
    messages: int
    rotation_seed: int
    clip_radius: float

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind = {self.kind!r}: must be one of {KINDS}")
        if self.dim < 1:
            raise ValueError(f"dim = {self.dim}: must be ≥ 1")
        for name in ("radius", "budget", "clip_radius"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0.0):
                raise ValueError(f"{name} = {value}: must be finite and > 0")
        if self.kind in ("binary", "l1") and self.levels != 1:
            raise ValueError(f"levels = {self.levels}: {self.kind} has exactly 1 level")
        if not 1 <= self.levels <= MAX_LEVELS:
            raise ValueError(f"levels = {self.levels}: must be in [1, {MAX_LEVELS}]")
        if self.kind == "l1" and self.messages != 1:
            raise ValueError(f"messages = {self.messages}: l1 sends exactly 1 message")
        if self.kind != "l2" and self.clip_radius != self.radius:
            raise ValueError(f"clip_radius = {self.clip_radius}: must equal radius = {self.radius} "
                             f"for {self.kind} (only l2 clips in a rotated space)")
        if not 1 <= self.messages <= self.coded_dim:
            raise ValueError(f"messages = {self.messages}: must be in [1, {self.coded_dim}] "
                             f"(one coordinate per block, Alg. 3.3.1)")

    @property
    def coded_dim(self) -> int:
        """The dimension the code works in: d (binary, linf), or d padded to a
        power of 2 for the Hadamard transforms (l1, l2; trap 26)."""
        if self.kind in ("l1", "l2"):
            return _next_power_of_two(self.dim)
        return self.dim

    @property
    def block_width(self) -> int:
        """a = ⌈coded_dim/s⌉, the width of each message's block (trap 3); 1 for l1."""
        if self.kind == "l1":
            return 1
        return -(-self.coded_dim // self.messages)

    @property
    def padded_dim(self) -> int:
        """s·a for the bit-vector kinds (coded_dim padded with zero bits), d_pad for l1."""
        if self.kind == "l1":
            return self.coded_dim
        return self.messages * self.block_width

    @property
    def level_budgets(self) -> tuple[float, ...]:
        """v_k, the budget of each level (private water-filling, Alg. 3.5.1, trap 5).

        v_k = 4^{−k/3}·v/S for k < m, v_m = 4^{−(m−1)/3}·v/S, with
        S = Σ_{l<m} 4^{−l/3} + 4^{−(m−1)/3}, so Σ v_k = v; (v,) when m = 1.
        """
        return _level_budgets(self.budget, self.levels, self.messages)

    @property
    def level_weights(self) -> tuple[float, ...]:
        """The weight of each level in ẑ: 2^{−k} for plane k < m, and 2^{−(m−1)}
        for the rounding plane (the same as plane m−1, trap 4); (1,) when m = 1."""
        m = self.levels
        return tuple(2.0 ** -k for k in range(1, m)) + (2.0 ** -(m - 1),)

    @property
    def flip_probabilities(self) -> tuple[float, ...]:
        """p_k = p(v_k/s), each level's 2RR flip probability (trap 2); () for l1."""
        if self.kind == "l1":
            return ()
        return tuple(flip_probability(v / self.messages) for v in self.level_budgets)

    @property
    def hadamard_constant(self) -> float:
        """l1's c = (e^{ε0}+1)/(e^{ε0}−1) = coth(ε0/2) (Alg. 3.4.1), ε0 = budget."""
        return 1.0 / math.tanh(self.budget / 2.0)


def plan_girgis(kind: str, users: int, dim: int, radius: float, budget: float, levels: int = 1,
                messages: int | None = None, rotation_seed: int = 0, beta: float = 1e-3) -> GirgisParams:
    """The parameters of one Girgis randomizer (seed 001, Thm 3.3.1, 3.4.1, 3.5.1, 3.6.1).

    s defaults to ⌈v⌉ capped at the coded dimension, Thm 3.3.1's best choice
    (d for binary and linf, the power of 2 ≥ d for l2; 1 for l1).

    For l2 the clipping radius is r∞ = 10·r2·√(log(n·d_pad/β)/d_pad) (Alg. 3.6.1,
    Thm 3.6.5, trap 6), capped at r2: every coordinate of U·x has |·| ≤ ‖x‖₂ ≤ r2,
    so the cap never clips and only narrows the range the planes encode. The
    thesis's radius exceeds r2 whenever d_pad < 100·log(n·d_pad/β), i.e. for
    most practical d.

    Args:
      kind: one of KINDS.
      users: n ≥ 1, the users of the call (enters only l2's clipping radius).
      dim: d ≥ 1.
      radius: r > 0 (ignored, set to 1, for binary).
      budget: v > 0, the user's total local budget.
      levels: m ≥ 1 (must be 1 for binary and l1).
      messages: s ∈ [1, coded dim] (must be 1 for l1); None for the default.
      rotation_seed: any int, the public seed of l2's diagonal D.
      beta: β ∈ (0, 1), l2's clipping failure probability.

    Returns:
      The parameters.

    Raises:
      ValueError: an argument out of range, naming it.
    """
    if kind not in KINDS:
        raise ValueError(f"kind = {kind!r}: must be one of {KINDS}")
    users = _as_int("users", users, 1)
    dim = _as_int("dim", dim, 1)
    levels = _as_int("levels", levels, 1)
    rotation_seed = _as_int("rotation_seed", rotation_seed, None)
    budget = _as_positive("budget", budget)
    radius = 1.0 if kind == "binary" else _as_positive("radius", radius)
    if not (isinstance(beta, (int, float, np.floating)) and 0.0 < beta < 1.0):
        raise ValueError(f"beta = {beta!r}: must be in (0, 1)")
    coded_dim = _next_power_of_two(dim) if kind in ("l1", "l2") else dim
    if messages is None:
        messages = 1 if kind == "l1" else min(max(1, math.ceil(budget)), coded_dim)
    messages = _as_int("messages", messages, 1)
    clip_radius = radius
    if kind == "l2":
        clip_radius = min(radius, 10.0 * radius * math.sqrt(math.log(users * coded_dim / beta) / coded_dim))
    return GirgisParams(kind, dim, radius, budget, levels, messages, rotation_seed, clip_radius)


def _as_int(name: str, value, minimum: int | None) -> int:
    """value as a Python int (bool refused), at least `minimum`, else ValueError naming it."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} = {value!r}: must be an integer")
    try:
        result = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} = {value!r}: must be an integer") from None
    if minimum is not None and result < minimum:
        raise ValueError(f"{name} = {value!r}: must be ≥ {minimum}")
    return result


def _as_positive(name: str, value) -> float:
    """value as a finite float > 0, else ValueError naming it."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} = {value!r}: must be a finite number > 0")
    result = float(value)
    if not (math.isfinite(result) and result > 0.0):
        raise ValueError(f"{name} = {value!r}: must be a finite number > 0")
    return result


def stream_epsilons(params: GirgisParams) -> tuple[float, ...]:
    """The actual local ε0 of each message stream, for the ledger (traps 2, 15).

    binary/linf/l2: one stream per (level k, message j), level-major, each
    log((1−p_k)/p_k) = 2·asinh(v_k/(2s)) ≤ v_k/s computed from the p_k the
    randomizer uses; their sum is ≤ Σ_k v_k = v. l1: one stream of ε0 = v
    (Lemma 3.4.1: the two σ probabilities differ by a factor ≤ e^{ε0}).

    Args:
      params: the randomizer.

    Returns:
      levels·messages floats.
    """
    if params.kind == "l1":
        return (params.budget,)
    # 2·asinh(x/2) is log((1−p)/p) without the cancellation that evaluating
    # the log at p ≈ 1/2 suffers for small budgets.
    return tuple(2.0 * math.asinh(v / (2.0 * params.messages))
                 for v in params.level_budgets for _ in range(params.messages))


def bits_per_user(params: GirgisParams) -> int:
    """Bits one user sends: m·s·(⌈log2 a⌉ + 1) with a = ⌈d_c/s⌉ for binary, linf
    and l2 (Alg. 3.3.1, 3.5.1, 3.6.1; d_c the coded dimension), and
    log2(d_pad) + 1 for l1 (index and σ, Alg. 3.4.1; 1 bit with public coins).

    Args:
      params: the randomizer.

    Returns:
      The bit count.
    """
    if params.kind == "l1":
        return (params.coded_dim - 1).bit_length() + 1
    index_bits = (params.block_width - 1).bit_length()  # ⌈log2 a⌉
    return params.levels * params.messages * (index_bits + 1)


def histogram_bits_per_user(params: GirgisParams, records: int) -> int:
    """Bits one user sends for `records` records with the histogram trick (seed 001 Thm 4.3.1):
    per stream, the histogram of its `records` messages over an alphabet of B = 2^b, that is
    ⌈log2 C(records + B − 1, records)⌉ bits, or records·b where that is fewer.

    Args:
      params: the randomizer.
      records: s ≥ 1, the records the user sends (one message per stream each).

    Returns:
      The bit count.
    """
    streams = 1 if params.kind == "l1" else params.levels * params.messages
    message_bits = bits_per_user(params) // streams
    histogram = (math.comb(records + 2**message_bits - 1, records) - 1).bit_length()  # ⌈log2 C⌉, exact
    return streams * min(records * message_bits, histogram)


def statistic_shape(params: GirgisParams) -> tuple[int, int, int]:
    """Shape of the int64 histogram: (levels, padded_dim, 2).

    [k, j, 0] counts level k's messages with index j; [k, j, 1] counts those
    whose bit is 1 (for l1, whose σ is +1). The s streams of a level use
    disjoint index blocks, so this holds every stream's histogram at once.
    """
    return (params.levels, params.padded_dim, 2)


@functools.lru_cache(maxsize=64)
def _rotation_signs(seed: int, size: int) -> np.ndarray:
    """The public ±1 diagonal of D (read-only), the same for every user (trap 6)."""
    # "l2" tag: keeps this stream apart from any other use of the same seed;
    # the modulus makes negative seeds acceptable entropy.
    rng = np.random.default_rng([0x6C32, seed % 2**128])
    signs = 1.0 - 2.0 * rng.integers(0, 2, size=size)
    signs.flags.writeable = False
    return signs


def rotation_signs(params: GirgisParams) -> np.ndarray:
    """l2's public diagonal D (±1, length d_pad): U = H·D/√d_pad (Alg. 3.6.1).

    Args:
      params: an l2 randomizer.

    Returns:
      Read-only float64 array.
    """
    return _rotation_signs(params.rotation_seed, params.coded_dim)


def _fwht(values: np.ndarray) -> np.ndarray:
    """H·values along axis 0 for the unnormalized Sylvester Hadamard matrix
    (H_1 = [1], H_2k = [[H, H], [H, −H]]), in O(d log d) without forming H (trap 26).

    Args:
      values: shape (d, ...) with d a power of 2.

    Returns:
      A new float64 array of the same shape.
    """
    out = np.array(values, dtype=np.float64, copy=True)
    spare = np.empty_like(out)
    size = out.shape[0]
    half = 1
    while half < size:
        # Butterflies between rows c and c + half of each block of 2·half rows,
        # written to the spare buffer (ping-pong: no per-stage copies).
        source = out.reshape(size // (2 * half), 2, half, -1)
        target = spare.reshape(size // (2 * half), 2, half, -1)
        np.add(source[:, 0], source[:, 1], out=target[:, 0])
        np.subtract(source[:, 0], source[:, 1], out=target[:, 1])
        out, spare = spare, out
        half *= 2
    return out


def _hadamard_rows(rows: int, size: int) -> np.ndarray:
    """H[:rows, :size] of the Sylvester Hadamard matrix: H_ic = (−1)^popcount(i & c)."""
    both = np.arange(rows)[:, None] & np.arange(size)[None, :]
    parity = np.zeros_like(both)
    while both.any():
        parity ^= both & 1
        both >>= 1
    return 1.0 - 2.0 * parity


def _check_inputs(params: GirgisParams, inputs: np.ndarray) -> np.ndarray:
    """inputs as float64 of shape (d, users), finite; binary ones in {0, 1}."""
    array = np.asarray(inputs, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] != params.dim:
        raise ValueError(f"inputs shape {array.shape}: must be (dim, users) = ({params.dim}, users)")
    if not np.isfinite(array).all():
        raise ValueError("inputs: must be finite")
    if params.kind == "binary" and not np.isin(array, (0.0, 1.0)).all():
        raise ValueError("inputs: binary inputs must be in {0, 1}")
    return array


def _clip(params: GirgisParams, x: np.ndarray) -> np.ndarray:
    """Each user projected into the kind's ball, as privacy needs (new array):
    linf clips coordinates to [−r, r]; l1 and l2 scale a user down to ‖x‖ ≤ r."""
    r = params.radius
    if params.kind == "linf":
        return np.clip(x, -r, r)
    if params.kind == "l1":
        norms = column_sums(np.abs(x))
    elif params.kind == "l2":
        norms = column_norms(x)
    else:
        return x.copy()
    return x * (r / np.maximum(norms, r))


def _rotate(params: GirgisParams, x: np.ndarray) -> np.ndarray:
    """U·x_pad = H·D·x_pad/√d_pad for l2 (Alg. 3.6.1), shape (d_pad, users)."""
    padded = np.zeros((params.coded_dim, x.shape[1]))
    padded[:params.dim] = x * rotation_signs(params)[:params.dim, None]
    return _fwht(padded) / math.sqrt(params.coded_dim)


def _unrotate(params: GirgisParams, w: np.ndarray) -> np.ndarray:
    """(Uᵀ·w)[:d] = (D·H·w/√d_pad)[:d]: U is orthogonal, Uᵀ = U⁻¹ (trap 6)."""
    back = _fwht(w) / math.sqrt(params.coded_dim)
    signs = rotation_signs(params)[:params.dim]
    return back[:params.dim] * (signs if back.ndim == 1 else signs[:, None])


def _unit_cube(params: GirgisParams, inputs: np.ndarray,
               with_target: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """The vectors the bit planes encode, z ∈ [0, 1]^{d_c}, and (if asked) the
    target every estimate is unbiased for, shape (d, users).

    binary: z = b, target b. linf: z = (x_c + r)/(2r) with x_c the clipped x,
    target x_c. l2: w = clip(U·x_c, ±r∞), z = (w + r∞)/(2r∞), target (Uᵀw)[:d],
    which is x_c unless clipping was active (Alg. 3.6.1).
    """
    x = _clip(params, inputs)
    if params.kind == "binary":
        return x, x
    if params.kind == "linf":
        return (x + params.radius) / (2.0 * params.radius), x
    r = params.clip_radius
    w = np.clip(_rotate(params, x), -r, r)
    return (w + r) / (2.0 * r), _unrotate(params, w) if with_target else None


def _bit_planes(params: GirgisParams, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The m−1 bit planes of z as one integer, and the rounding residual (Alg. 3.5.1).

    F = min(⌊2^{m−1}·z⌋, 2^{m−1} − 1) holds the planes b^(1..m−1) as its bits,
    most significant first, and w = 2^{m−1}·z − F ∈ [0, 1] is the rounding
    plane's probability. This is the thesis's iteration b^(k) = ⌊2^k(z − z^(k−1))⌋
    with the clamp to {0, 1} of trap 4: the iteration only peels off the binary
    digits of z, and z = 1 (x = r) gives all ones and w = 1 in both.

    Args:
      params: the randomizer.
      z: values in [0, 1] (any shape).

    Returns:
      (F as int64, w as float64), the shape of z.
    """
    scale = float(2 ** (params.levels - 1))
    scaled = z * scale
    floor = np.clip(np.floor(scaled), 0.0, scale - 1.0)
    return floor.astype(np.int64), np.clip(scaled - floor, 0.0, 1.0)


def _plane(params: GirgisParams, floor: np.ndarray, level: int) -> np.ndarray:
    """Bit plane k = level + 1 < m of F, as 0/1 int64."""
    return (floor >> (params.levels - 2 - level)) & 1


def encode_block(params: GirgisParams, inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A block of users' messages, as the histogram the analyzer sees after shuffling: the
    randomizer (encode_compiled, which states it) compiled, drawing from `rng`'s stream
    (draws.drawn_in_compiled_code). Inputs are projected into the ball first (linf: coordinates
    clipped to [−r, r]; l1, l2: the vector scaled down), as privacy needs.

    Args:
      params: the randomizer.
      inputs: shape (d, users); binary inputs must be in {0, 1}.
      rng: the block's generator; results are a deterministic function of it.

    Returns:
      int64 array of shape statistic_shape(params).

    Raises:
      ValueError: inputs of the wrong shape, not finite, or not binary for binary.
    """
    from pipeline import compiled  # numba loads at a block's first encoding, not at import

    x = np.ascontiguousarray(_check_inputs(params, inputs))
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng = {rng!r}: must be a numpy.random.Generator")
    dim, users = x.shape
    if users == 0:
        return np.zeros(statistic_shape(params), dtype=np.int64)
    encoding = GirgisEncoding.of(params)
    work = encoding.work(dim, users)
    with draws.drawn_in_compiled_code(rng) as state:
        compiled.compiled_function(encode_compiled)(encoding, work, x.reshape(-1), column_norms(x), dim, users, state)
    return work[3]


def users_in(params: GirgisParams, statistic: np.ndarray) -> int:
    """The number of users behind a statistic: level 0's messages / s.

    Raises:
      ValueError: the statistic's shape, type or counts are inconsistent.
    """
    stat = np.asarray(statistic)
    if stat.shape != statistic_shape(params):
        raise ValueError(f"statistic shape {stat.shape}: must be {statistic_shape(params)}")
    if not np.issubdtype(stat.dtype, np.integer):
        raise ValueError(f"statistic dtype {stat.dtype}: must be an integer histogram")
    counts, ones = stat[..., 0], stat[..., 1]
    if (ones < 0).any() or (ones > counts).any():
        raise ValueError("statistic: needs 0 ≤ ones ≤ messages at every index")
    totals = counts.sum(axis=1)
    if (totals != totals[0]).any() or totals[0] % params.messages:
        raise ValueError(f"statistic: every level needs the same message count, a multiple of "
                         f"s = {params.messages}; got {totals.tolist()}")
    return int(totals[0]) // params.messages


def decode(params: GirgisParams, statistic: np.ndarray) -> np.ndarray:
    """The analyzer: the unbiased estimate of the users' SUM Σ_i x_i (not the mean), by
    decode_compiled, compiled alone (the rounds inline it).

    binary (A^Bin, Alg. 3.3.2): b̂_j = a·(ones_j − p·count_j)/(1 − 2p), the sum
    of the debiased 2RR outputs at j scaled by a (traps 1, 3), padding dropped.
    linf (Alg. 3.5.2): ẑ = Σ_k weight_k·b̂^(k), then x̂ = 2r·ẑ − r·n.
    l2 (Alg. 3.6.2): linf in the rotated space with r∞, then Uᵀ, padding dropped.
    l1 (Alg. 3.4.1): r·c·H·(plus − minus), padding dropped.
    n comes from the statistic (users_in). Linear in the statistic.

    Args:
      params: the randomizer.
      statistic: the sum of the users' encode_block histograms.

    Returns:
      float64 array of shape (d,).

    Raises:
      ValueError: an inconsistent statistic (see users_in).
    """
    from pipeline import compiled  # numba loads at the first decode, not at import

    users = users_in(params, statistic)
    encoding = GirgisEncoding.of(params)
    work, estimate = encoding.work(params.dim, 0), np.empty(params.dim)
    work[3][...] = statistic
    compiled.compiled_function(decode_compiled)(encoding, work, users, estimate)
    return estimate


def exact_mse(params: GirgisParams, inputs: np.ndarray) -> np.ndarray:
    """Exact E‖y_i − x_i‖² of each user's single-user estimate y_i (decode of its
    own messages), for the given (possibly out-of-ball) inputs.

    Derivation (notes §4 items 2–4; checked against brute-force enumeration of
    each message's outcomes and by Monte Carlo in tests/test_girgis.py):

    R^Bin of one level with bits β (or rounding probabilities β) and per-message
    variance σ² = p(1−p)/(1−2p)² = (s/v_k)²: in block B the estimate a·y·e_c
    with c uniform on B has covariance a·Diag(σ² + β_c) − β_B·β_Bᵀ on B and
    none across blocks. For the rounding plane, averaging over u ~ Bern(w)
    adds −Diag(w(1−w)) while the quantizer adds +Diag(w(1−w)) (Lemma 3.5.1):
    the two cancel, so each level ℓ contributes weight_ℓ²·[a·Diag(σ_ℓ² + β_ℓ) −
    blockdiag(β_ℓ β_ℓᵀ)], with β_ℓ = b^(ℓ) for planes and w for the last
    level, independently. Over the d_c real coordinates its trace is
    a·d_c·σ_ℓ² + a·Σβ_ℓ − Σβ_ℓ²; for bits this is the notes' a·d·σ² + (a−1)‖b‖²
    (= s·a²σ² + (a−1)‖b‖² when s | d). The ℓ∞ error is 2r times the z error.
    l2: the estimate is P·Uᵀ of the rotated one (P keeps the first d
    coordinates), so the error is tr(M·Σ) with M = U·P·Uᵀ = H·P·H/d_pad (D
    drops out): the diagonal part scales by d/d_pad and each block's β_Bβ_Bᵀ
    becomes ‖(H·β_B)[:d]‖²/d_pad; with d = d_pad this is the ℓ∞ formula.
    l1 (Lemma 3.4.1): ‖y‖² = r²c²·d for every outcome, so E‖y − x‖² = r²c²d − ‖x‖².
    Finally y is unbiased for the projected (and for l2 clipped) target t, so
    E‖y − x‖² = E‖y − t‖² + ‖t − x‖².

    Args:
      params: the randomizer.
      inputs: shape (d, users).

    Returns:
      float64 array of shape (users,).
    """
    x = _check_inputs(params, inputs)
    if params.kind == "l1":
        target = _clip(params, x)
        c = params.hadamard_constant
        variance = (params.radius * c) ** 2 * params.dim - np.einsum("ij,ij->j", target, target)
    else:
        z, target = _unit_cube(params, x, with_target=True)
        scale = 1.0 if params.kind == "binary" else 2.0 * params.clip_radius
        variance = scale**2 * _levels_error(params, z)
    bias = target - x
    return variance + np.einsum("ij,ij->j", bias, bias)


def _levels_error(params: GirgisParams, z: np.ndarray) -> np.ndarray:
    """Σ_ℓ weight_ℓ²·E‖error of level ℓ‖² in the estimate's coordinates (see exact_mse)."""
    coded, users = z.shape
    a = params.block_width
    floor, residual = _bit_planes(params, z)
    total = np.zeros(users)
    for level, (p, weight) in enumerate(zip(params.flip_probabilities, params.level_weights)):
        beta = residual if level == params.levels - 1 else _plane(params, floor, level).astype(np.float64)
        diagonal = a * (coded * _rr_variance(p) + beta.sum(axis=0))
        if params.kind == "l2":
            diagonal *= params.dim / coded
            blocks = _projected_block_norms(params, beta)
        else:
            blocks = np.einsum("ij,ij->j", beta, beta)
        total += weight**2 * (diagonal - blocks)
    return total


def _projected_block_norms(params: GirgisParams, beta: np.ndarray) -> np.ndarray:
    """Σ_blocks ‖(H·β_B)[:d]‖²/d_pad per user, β_B = β restricted to block B (l2's exact_mse).

    Written as Σ_B β_Bᵀ·M_BB·β_B with M = H·P·H/d_pad: s·a² work per user after
    the blocks M_BB are formed once (d·s·a² work). An oracle, not used by the
    randomizer.
    """
    coded, users = beta.shape
    if params.dim == coded:
        return np.einsum("ij,ij->j", beta, beta)
    s, a = params.messages, params.block_width
    rows = np.zeros((params.dim, params.padded_dim))
    rows[:, :coded] = _hadamard_rows(params.dim, coded)
    rows = rows.reshape(params.dim, s, a)
    blocks = np.einsum("isa,isb->sab", rows, rows) / coded
    out = np.empty(users)
    for start in range(0, users, _ORACLE_CHUNK):
        chunk = np.zeros((params.padded_dim, min(_ORACLE_CHUNK, users - start)))
        chunk[:coded] = beta[:, start:start + _ORACLE_CHUNK]
        chunk = chunk.reshape(s, a, -1)
        out[start:start + chunk.shape[2]] = np.einsum("san,san->n", np.matmul(blocks, chunk), chunk)
    return out


def exact_mse_bound(params: GirgisParams) -> float:
    """The thesis's per-user worst-case MSE (notes §2.14), f_p of CLDP-SGD's G².

    With D = s·a the padded dimension (D = d_c when s divides d_c; the thesis
    pads, and its d² must read d·D when it does not, since its variance term
    is a·d·s²/v² = d·D·s/v²):
      binary (eq. 3.10): d·D·(1/s − 1/D + s/v²), attained at b = 1;
      linf (eq. 3.31, n = 1): 4r²·(4d²/(3s) + 5·d·D·s/v² + d/4^m), d = d_c;
      l2: the linf bound with r = r∞ and d = d_pad (Thm 3.6.1; valid when
        clipping is inactive, probability ≥ 1 − β);
      l1 (Lemma 3.4.1): r²·d·((e^v + 1)/(e^v − 1))².

    Args:
      params: the randomizer.

    Returns:
      The bound.
    """
    v, s, m = params.budget, params.messages, params.levels
    d, padded = params.coded_dim, params.padded_dim
    if params.kind == "l1":
        return params.radius**2 * params.dim * params.hadamard_constant**2
    if params.kind == "binary":
        return d * padded * (1.0 / s - 1.0 / padded + s / v**2)
    r = params.clip_radius
    return 4.0 * r * r * (4.0 * d * d / (3.0 * s) + 5.0 * d * padded * s / v**2 + d / 4.0**m)


__all__ = ["KINDS", "MAX_LEVELS", "GirgisParams", "plan_girgis", "flip_probability", "stream_epsilons",
           "bits_per_user", "statistic_shape", "rotation_signs", "encode_block", "users_in", "decode",
           "exact_mse", "exact_mse_bound", "Histograms", "GirgisEncoding"]


# --- The randomizers and analyzers in numba's subset (GirgisEncoding) ----------------------------
# encode_block runs encode_compiled alone; the kernels call it, and decode_compiled (decode's
# operations in their order), through the encoding's functions. Inputs in (coordinate, user) order.

# The randomizers by their index in the compiled functions (GirgisEncoding.kind).
COMPILED_KINDS = ("linf", "l2", "l1", "binary")
LINF, L2, L1, BINARY = 0, 1, 2, 3


def hadamard_in_place(values, spare, size, columns):
    """_fwht along the first axis of values (size × columns, row-major): the butterflies of each
    stage written to `spare` and back (the same sums and differences in the same order as the
    numpy stages); returns the array holding the result."""
    half = 1
    while half < size:
        for start in range(0, size, 2 * half):
            for row in range(start, start + half):
                for column in range(columns):
                    upper, lower = values[row * columns + column], values[(row + half) * columns + column]
                    spare[row * columns + column] = upper + lower
                    spare[(row + half) * columns + column] = upper - lower
        values, spare = spare, values
        half *= 2
    return values


def _cube_of(inputs, norms, users, kind, coded, ball, clip_radius, signs, units, spare):
    """_unit_cube of a chunk's inputs for binary (z = b), linf or l2: the projection into the ball (linf: each
    coordinate clipped to ±r; l2: scaled by r/max(‖g‖, r), padded, signed by D, rotated by
    H/√d_pad, clipped to ±r∞), then z = (w + r)/(2r); returns the array holding z."""
    dim = inputs.size // users
    if kind == BINARY:  # z = b
        units[: dim * users] = inputs
        return units
    if kind == LINF:
        for index in range(dim * users):
            units[index] = (min(max(inputs[index], -ball), ball) + ball) / (2.0 * ball)
        return units
    units[: coded * users] = 0.0
    for user in range(users):
        factor = ball / max(norms[user], ball)
        for coordinate in range(dim):
            units[coordinate * users + user] = inputs[coordinate * users + user] * factor * signs[coordinate]
    cube, root = hadamard_in_place(units, spare, coded, users), np.sqrt(coded)
    for index in range(coded * users):
        cube[index] = (min(max(cube[index] / root, -clip_radius), clip_radius) + clip_radius) / (2.0 * clip_radius)
    return cube


def _l1_messages(inputs, users, state, coded, ball, hadamard, units, spare, indices, hist):
    """R^{ℓ1} (Alg. 3.4.1) of a chunk's inputs: each scaled into the ℓ1 ball of radius r (its
    |coordinates| summed in order, numerics.column_sums), padded and transformed by H; one index
    j below d_pad per user (`integers`), then one uniform per user for σ = +1 with probability
    ½ + ½·clip((Hx)_j/r, ±1)/c."""
    dim = inputs.size // users
    units[: coded * users] = 0.0
    for user in range(users):
        total = 0.0
        for coordinate in range(dim):
            total += abs(inputs[coordinate * users + user])
        factor = ball / max(total, ball)
        for coordinate in range(dim):
            units[coordinate * users + user] = inputs[coordinate * users + user] * factor
    coefficients = hadamard_in_place(units, spare, coded, users)
    for user in range(users):
        indices[user] = draws.integers(state, coded)
    for user in range(users):
        picked = indices[user]
        t = min(max(coefficients[picked * users + user] / ball, -1.0), 1.0)
        hist[0, picked, 0] += 1
        if draws.uniform(state) < 0.5 + 0.5 * t / hadamard:
            hist[0, picked, 1] += 1


def encode_compiled(call, work, inputs, norms, dim, users, state):
    """encode_block of a chunk's inputs (`call`: a GirgisEncoding) into the
    histograms (levels × s·a × 2). l1: _l1_messages. linf, l2: the unit cube (_cube_of); then per
    level the (s, users) indices (one block of width a per message, `fill_integers` in bulk), the
    (s, users) uniforms, and each message's bit (a plane of F or the rounding plane, through 2RR)
    counted at its index.

    binary/linf/l2 (Alg. 3.3.1, 3.5.1, 3.6.1): for every level independently, each user picks one
    coordinate per block of width a (stratified, trap 3) and sends its index and the level's bit
    there XOR a Bernoulli(p_k) flip (2RR, trap 1). Padding coordinates carry bit 0. The rounding
    plane's bit u ~ Bernoulli(w) is needed only at the picked coordinate, and u XOR flip is
    Bernoulli(p + (1 − 2p)·w): one uniform draw gives it. l1 (Alg. 3.4.1): each user picks j
    uniform in [d_pad] and sends j and σ = +1 w.p. ½ + (H·x)_j/(2·r·c)."""
    units, spare, indices, hist, tape = work[0], work[1], work[2], work[3], work[6]
    inputs = inputs[: dim * users]
    if call.kind == L1:
        _l1_messages(inputs, users, state, call.coded, call.ball, call.hadamard, units, spare, indices, hist)
        return
    cube = _cube_of(inputs, norms, users, call.kind, call.coded, call.ball, call.clip_radius, call.signs, units, spare)
    levels, messages, width, coded = call.levels, call.messages, call.width, call.coded
    scale = 2.0 ** (levels - 1)
    drawn = indices[:messages * users]
    for level in range(levels):
        draws.fill_integers(state, width, drawn, tape)
        for index in range(messages * users):
            indices[index] += (index // users) * width
        for index in range(messages * users):
            picked = indices[index]
            value = cube[picked * users + index % users] if picked < coded else 0.0  # zero padding
            scaled = value * scale
            floor = min(max(np.floor(scaled), 0.0), scale - 1.0)  # _bit_planes
            uniform, p = draws.uniform(state), call.flips[level]
            if level < levels - 1:
                sent = ((np.int64(floor) >> (levels - 2 - level)) & 1 == 1) != (uniform < p)
            else:
                sent = uniform < p + (1.0 - 2.0 * p) * min(max(scaled - floor, 0.0), 1.0)
            hist[level, picked, 0] += 1
            if sent:
                hist[level, picked, 1] += 1


def decode_compiled(call, work, users, estimate):
    """decode of a round's histograms into `estimate` (`call`: a GirgisEncoding; n = `users`), the
    histograms cleared. l1: r·c·H(2·ones − counts). binary, linf, l2: per level the debiased counts
    weight_k·a/(1 − 2p_k)·(ones − p_k·counts) summed into ẑ (binary: b̂ = ẑ), then 2r∞·ẑ − r∞·n, and for l2
    Uᵀ = D·H/√d_pad of it; the first d coordinates."""
    hist, sums, spare = work[3], work[4], work[5]  # the statistic, then scratch
    dim, coded, ball, clip_radius = estimate.size, call.coded, call.ball, call.clip_radius
    padded = hist.shape[1]
    if call.kind == L1:
        for index in range(coded):
            sums[index] = 2.0 * np.float64(hist[0, index, 1]) - np.float64(hist[0, index, 0])
        back = hadamard_in_place(sums[:coded], spare[:coded], coded, 1)
        for coordinate in range(dim):
            estimate[coordinate] = (ball * call.hadamard) * back[coordinate]
        hist[:] = 0
        return
    sums[:padded] = 0.0
    for level in range(call.levels):
        p = call.flips[level]
        coefficient = call.weights[level] * call.width / (1.0 - 2.0 * p)
        for index in range(padded):
            sums[index] += coefficient * (np.float64(hist[level, index, 1]) - p * np.float64(hist[level, index, 0]))
    if call.kind == BINARY:  # b̂ itself
        estimate[:] = sums[:dim]
        hist[:] = 0
        return
    for index in range(coded):
        sums[index] = 2.0 * clip_radius * sums[index] - clip_radius * users
    if call.kind == L2:
        back, root = hadamard_in_place(sums[:coded], spare[:coded], coded, 1), np.sqrt(coded)
        for coordinate in range(dim):
            estimate[coordinate] = back[coordinate] / root * call.signs[coordinate]
    else:
        estimate[:] = sums[:dim]
    hist[:] = 0


@dataclasses.dataclass(frozen=True)
class Histograms:
    """Some users' message histograms (exact integers: partials add in any order)."""

    users: int
    counts: np.ndarray


class GirgisEncoding(NamedTuple):
    """The constants of a randomizer as its compiled functions use them (encode_block runs
    encode_compiled alone; the compiled rounds inline it, and decode_compiled, through these
    functions), each as this module computes it.

    Attributes:
      kind: the randomizer's index in COMPILED_KINDS.
      coded, width, levels, messages: d_c, a, m and s (l1: d_pad, 1, 1, 1).
      ball: r, the ball the inputs are projected into.
      clip_radius: r∞, the ℓ∞ radius the bit planes encode.
      hadamard: l1's c = coth(ε0/2).
      flips, weights: each level's 2RR flip probability and weight in ẑ (l1: none).
      signs: D's diagonal (l2), else ones.
    """

    kind: int
    coded: int
    width: int
    levels: int
    messages: int
    ball: float
    clip_radius: float
    hadamard: float
    flips: np.ndarray
    weights: np.ndarray
    signs: np.ndarray

    @classmethod
    @functools.lru_cache(maxsize=64)  # per randomizer, not per block: the Python rounds ask every block
    def of(cls, params: GirgisParams) -> "GirgisEncoding":
        """The randomizer's constants."""
        rotated = params.kind == "l2"
        return cls(COMPILED_KINDS.index(params.kind), params.coded_dim, params.block_width, params.levels,
                   params.messages, params.radius, params.clip_radius, params.hadamard_constant,
                   np.array(params.flip_probabilities, np.float64), np.array(params.level_weights, np.float64),
                   rotation_signs(params).copy() if rotated else np.ones(params.dim))

    # The kernels' protocol contract: encode_compiled and decode_compiled.

    def work(self, dim, chunk):
        """A chunk's units, spare and indices, the round's histograms, decode's sums and spare,
        and a tape of raw outputs for the indices' bulk draw."""
        rows = max(self.coded, dim)
        padded = self.coded if self.kind == L1 else self.messages * self.width  # girgis.statistic_shape
        drawn = max(self.messages, 1) * chunk
        return (np.empty(rows * chunk), np.empty(rows * chunk), np.empty(drawn, np.int64),
                np.zeros((self.levels, padded, 2), np.int64), np.empty(max(padded, self.coded)),
                np.empty(max(padded, self.coded)), np.empty(max(1, min(2048, (drawn + 1) // 2)), np.uint64))

    def encode(self, work, inputs, norms, dim, users, state):
        encode_compiled(self, work, inputs, norms, dim, users, state)

    def finish_block(self, work, users, state):
        return True

    def analyze(self, work, batch, state, estimate):
        decode_compiled(self, work, batch, estimate)
        return True

    def counts(self, work):
        """The round's histograms (a fully interactive round's block partial, block_partial)."""
        return work[3]

    @staticmethod
    def block_partial(users: int, counts: np.ndarray) -> "Histograms":
        """A block's partial from its histograms (the protocol's encode_block's)."""
        return Histograms(users, counts)
