"""The built-in protocols' exact-mode randomizers in numpy, as their modules held them before their
compiled functions became their one definition: the tests' independent oracle, checked bit for
bit (tests/test_protocol_oracles.py) against the package's encode_block, which runs the compiled
functions the fused rounds inline, on the same Philox stream."""
from __future__ import annotations

import fractions
import math

import numpy as np

from pipeline.numerics import column_dots, column_norms
from pipeline.protocols import girgis
from pipeline.protocols.cjmp import PartialCounts, PvecParams, _shift_and_scale as shift_and_scale  # literal mode's, numpy
from pipeline.protocols.sampling import binomial_above_floor
from pipeline.protocols.sums import FixedPointSum, SumParams, duchi_agreement

_BYTE = 256


def rounded_sum(params: PvecParams, vectors: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Σ_i x̂_ij of one chunk with x̂ = ⌊s⌋ + Bernoulli(s − ⌊s⌋), from one random byte per user and
    coordinate (the package's cjmp.rounded_chunk states why it is exact), `vectors` overwritten."""
    dim, users = vectors.shape
    scaled = shift_and_scale(params, vectors, _BYTE)
    fixed = scaled.astype(np.uint32)  # T = ⌊256·s⌋ (s ≥ 0 truncates)
    size = dim * users
    fixed += rng.bit_generator.random_raw(-(-size // 8)).view(np.uint8)[:size].reshape(dim, users)
    ties = (fixed.astype(np.uint8) == _BYTE - 1).reshape(-1).nonzero()[0]  # (T + U) mod 256 = 255
    rounded = (fixed >> 8).sum(axis=1, dtype=np.int64)
    if ties.size:
        tied = scaled.reshape(-1)[ties]
        wins = rng.random(ties.size) >= 1.0 - (tied - np.floor(tied))
        rounded += np.bincount(ties[wins] // users, minlength=dim)
    return rounded


def pvec_encode_block(params: PvecParams, chunks, rng: np.random.Generator) -> PartialCounts:
    """P_vec's exact-mode block: the chunks' rounded sums, then one Binomial(users·b_noise, p) per
    coordinate (binomial_above_floor)."""
    users, rounded = 0, np.zeros(params.dim, np.int64)
    for chunk in chunks:
        rounded += rounded_sum(params, chunk.copy(), rng)
        users += chunk.shape[1]
    noise, floor_total = binomial_above_floor(rng, users * params.b_noise, params.p, params.dim)
    return PartialCounts(users, rounded + noise, floor_total)


def pvec_analyze(params: PvecParams, total: PartialCounts) -> np.ndarray:
    """Analyzer A_vec on a call's merged partial (Algorithm 2): #ones − n·b_noise·p per coordinate,
    the mean n·b_noise·p taken exactly as a Fraction (its integer part subtracted in int64, the
    rest in float64), times Δ/g, minus n·Δ₂."""
    exact = fractions.Fraction(params.p) * (total.users * params.b_noise)
    whole = math.floor(exact)
    centred = (total.ones_above_floor + (total.floor_total - whole)).astype(np.float64) - float(exact - whole)
    return (params.value_range / params.g) * centred - params.users * params.norm_bound


def sum_finish(noise: str | None, params: SumParams, total: FixedPointSum, rng: np.random.Generator) -> np.ndarray:
    """A sum protocol's released total: its units times the quantum, plus the curator's N(0, σ²I)
    (noise "central"), numpy's draw."""
    released = total.units.astype(np.float64) * params.quantum
    return released + params.sigma * rng.standard_normal(params.dim) if noise == "central" else released


def clip_l2(inputs: np.ndarray, radius: float) -> np.ndarray:
    """Scales each column into the ℓ2 ball of `radius` (in place; returns it)."""
    norms = column_norms(inputs)
    inputs *= np.minimum(1.0, radius / np.maximum(norms, 1e-300))
    return inputs


def duchi_reports(inputs: np.ndarray, params: SumParams, rng: np.random.Generator) -> np.ndarray:
    """Duchi et al.'s ε0-LDP reports of clipped inputs (d, users): ±r·x/‖x‖ with probabilities
    ½ ± ‖x‖/(2r), then uniform on the sphere of radius B, on the pole's half-space with
    probability e^ε0/(e^ε0 + 1)."""
    dim, users = inputs.shape
    norms = column_norms(inputs)
    direction = np.where(norms > 0, inputs / np.maximum(norms, 1e-300), 0.0)
    direction[0, norms == 0] = 1.0
    sign = np.where(rng.random(users) < 0.5 + norms / (2.0 * params.norm_bound), 1.0, -1.0)
    pole = direction * sign
    sphere = rng.standard_normal((dim, users))
    sphere /= column_norms(sphere)
    agree = rng.random(users) < duchi_agreement(params.epsilon0)
    flip = (column_dots(sphere, pole) >= 0) != agree
    sphere[:, flip] *= -1.0
    return params.report_norm * sphere


def sum_encode_block(noise: str | None, params: SumParams, chunks, rng: np.random.Generator) -> FixedPointSum:
    """A sum protocol's block (SumProtocol.noise `noise`): its users' clipped reports summed row by
    row, chunk after chunk, then rounded to the fixed-point quantum."""
    total, users = np.zeros(params.dim), 0
    for chunk in chunks:
        inputs = clip_l2(chunk.copy(), params.norm_bound)
        if noise == "local":
            inputs = duchi_reports(inputs, params, rng)
        elif noise == "user":
            inputs = inputs + params.sigma * rng.standard_normal(inputs.shape)
        total += inputs.sum(axis=1)
        users += chunk.shape[1]
    units = np.rint(total / params.quantum)
    if np.any(np.abs(units) >= 2.0**62):
        raise OverflowError("a block sum left the fixed-point range")
    return FixedPointSum(users, units.astype(np.int64))


def girgis_encode_block(params: girgis.GirgisParams, inputs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A block's histograms (levels, padded_dim, 2) of Girgis's randomizers (seed 001 ch. 3): l1's
    one Hadamard coefficient and sign (Alg. 3.4.1), else per level one index per block of width a
    and its plane's bit through 2RR (Alg. 3.3.1, 3.5.1, 3.6.1), the unit cube and bit planes from
    the package's numpy helpers (girgis._unit_cube, _bit_planes)."""
    hist = np.zeros(girgis.statistic_shape(params), dtype=np.int64)
    users = inputs.shape[1]
    if params.kind == "l1":
        padded = np.zeros((params.coded_dim, users))
        padded[:params.dim] = girgis._clip(params, inputs)
        coefficients = girgis._fwht(padded)
        index = rng.integers(0, params.coded_dim, size=users)
        t = np.clip(coefficients[index, np.arange(users)] / params.radius, -1.0, 1.0)
        plus = rng.random(users) < 0.5 + 0.5 * t / params.hadamard_constant
        hist[0, :, 0] = np.bincount(index, minlength=params.coded_dim)
        hist[0, :, 1] = np.bincount(index[plus], minlength=params.coded_dim)
        return hist
    z, _ = girgis._unit_cube(params, inputs)
    coded = z.shape[0]
    s, a = params.messages, params.block_width
    starts = (np.arange(s) * a)[:, None]
    for level, p in enumerate(params.flip_probabilities):
        index = starts + rng.integers(0, a, size=(s, users))
        picked = np.take_along_axis(z, np.minimum(index, coded - 1), axis=0)
        picked[index >= coded] = 0.0  # zero padding (trap 3)
        floor, residual = girgis._bit_planes(params, picked)
        uniform = rng.random((s, users))
        if level < params.levels - 1:
            sent = (girgis._plane(params, floor, level) == 1) ^ (uniform < p)
        else:
            sent = uniform < p + (1.0 - 2.0 * p) * residual
        hist[level, :, 0] = np.bincount(index.ravel(), minlength=params.padded_dim)
        hist[level, :, 1] = np.bincount(index[sent], minlength=params.padded_dim)
    return hist


def girgis_decode(params: girgis.GirgisParams, statistic: np.ndarray) -> np.ndarray:
    """The analyzers' unbiased estimate of the users' sum (seed 001: A^Bin's debiased counts
    a·(ones − p·count)/(1 − 2p) per level, weighted into ẑ; linf 2r·ẑ − r·n; l2 that rotated back
    by Uᵀ; l1 r·c·H(plus − minus)), padding dropped."""
    users = girgis.users_in(params, statistic)
    counts, ones = statistic[..., 0].astype(np.float64), statistic[..., 1].astype(np.float64)
    if params.kind == "l1":
        return (params.radius * params.hadamard_constant) * girgis._fwht(2.0 * ones[0] - counts[0])[:params.dim]
    z_sum = np.zeros(params.padded_dim)
    for level, (p, weight) in enumerate(zip(params.flip_probabilities, params.level_weights)):
        z_sum += (weight * params.block_width / (1.0 - 2.0 * p)) * (ones[level] - p * counts[level])
    z_sum = z_sum[:params.coded_dim]
    if params.kind == "binary":
        return z_sum
    r = params.clip_radius
    w_sum = 2.0 * r * z_sum - r * users
    return w_sum if params.kind == "linf" else girgis._unrotate(params, w_sum)
