"""The protocols' exact-mode encode_block, which runs the compiled functions the fused rounds inline
(P_vec's cjmp.rounded_chunk), gives the bits of the numpy oracle (tests/oracles/protocols.py) on the
engine's Philox streams: inputs inside and outside the ball, at its edges, ties of the byte
rounding, several chunks, a reused workspace; and leaves the stream where numpy's would be."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from oracles import protocols as oracle
from pipeline.engine.layout import stream
from pipeline.protocols import build_protocol, cjmp
from pipeline.protocols.base import GRADIENTS, RoundPlan
from pipeline.protocols.sums import SumProtocol


def _inputs(dim: int, users: int, norm_bound: float, seed: int) -> np.ndarray:
    """Users inside and outside the ball (clipped), one at +Δ₂ and one at −Δ₂ on the first axis (the
    clamp's edges), a zero user."""
    rng = np.random.default_rng(seed)
    inputs = rng.standard_normal((dim, users)) * norm_bound * rng.choice([0.2, 0.9, 3.0], users)
    inputs[:, 0] = 0.0
    inputs[:, 1], inputs[0, 1] = 0.0, norm_bound
    inputs[:, 2], inputs[0, 2] = 0.0, -norm_bound
    return np.ascontiguousarray(inputs)


def _same(partial, want) -> bool:
    return (partial.users, partial.floor_total) == (want.users, want.floor_total) \
        and np.array_equal(partial.ones_above_floor, want.ones_above_floor)


@pytest.mark.parametrize("accounting, users, dim, chunk", [
    ("paper", 600, 3, 256), ("tight", 600, 3, 600), ("tight", 5000, 1, 1024), ("paper", 40, 17, 7),
    ("tight", 2000, 64, 100)])
def test_pvec_blocks_are_the_oracles(accounting, users, dim, chunk):
    protocol = build_protocol("cjmp_vec", accounting)
    params = cjmp.plan(accounting, users, dim, 1.0, 1e-6, 1.5)
    inputs = _inputs(dim, users, params.norm_bound, users + dim)
    chunks = [np.ascontiguousarray(inputs[:, low: low + chunk]) for low in range(0, users, chunk)]
    work = protocol.workspace(chunk, dim)
    for block in range(3):  # one workspace across blocks, as a shard reuses it
        ours, theirs = stream(0, 2, 7, block), stream(0, 2, 7, block)
        partial = protocol.encode_block(params, [part.copy() for part in chunks], ours, work)
        assert _same(partial, oracle.pvec_encode_block(params, chunks, theirs)), (accounting, users, dim, block)
        assert ours.random() == theirs.random()  # the stream moved past the same draws
    # chunks of growing sizes and no workspace: buffers grow, the block's ones kept
    parts = [np.ascontiguousarray(inputs[:, low: high]) for low, high in ((0, 3), (3, 40), (40, 41), (41, 200))]
    ours, theirs = stream(0, 2, 8, 0), stream(0, 2, 8, 0)
    assert _same(protocol.encode_block(params, parts, ours), oracle.pvec_encode_block(params, parts, theirs))


def test_pvec_ties_are_drawn_as_the_oracle_draws_them():
    """Inputs whose byte-rounded values tie often: every user at one scaled value, so a tie is a
    random byte of 255 minus the value's low byte (1/256 of the user-coordinates)."""
    params = cjmp.plan_pvec(4096, 2, 1.0, 1e-6, 1.0)
    inputs = np.full((2, 4096), 0.123456789)
    ours, theirs = stream(1, 2, 0, 0), stream(1, 2, 0, 0)
    scaled = oracle.shift_and_scale(params, inputs.copy(), 256)
    assert np.all(scaled != np.floor(scaled))  # a fraction for V to decide
    partial = cjmp.encode_block(params, [inputs.copy()], ours)
    assert _same(partial, oracle.pvec_encode_block(params, [inputs], theirs))
    assert ours.random() == theirs.random()


def test_pvec_encodes_from_any_generator_with_the_same_law():
    """A generator other than Philox (a notebook's default_rng) seeds a Philox stream of its own and
    moves on: the rounded sum of one repeated input has the mean of the exact rounding."""
    params = dataclasses.replace(cjmp.plan_pvec(1000, 1, 1.0, 1e-6, 1.0), b_noise=0)
    users, fraction = 1 << 16, 0.3
    value = (3.0 + fraction) * params.value_range / params.g - params.norm_bound
    rng = np.random.default_rng(3)
    before = rng.bit_generator.state
    ones = cjmp.encode_block(params, [np.full((1, users), value)], rng).ones_above_floor[0]
    assert rng.bit_generator.state != before
    scaled = oracle.shift_and_scale(params, np.full((1, 1), value))[0, 0]
    mean, variance = users * scaled, users * (scaled % 1) * (1 - scaled % 1)
    assert abs(ones - mean) <= 5 * np.sqrt(variance)


@pytest.mark.parametrize("name", ["none", "central_gaussian", "shuffle_gaussian", "local_l2", "report_noisy_max"])
@pytest.mark.parametrize("sampling", ["all", "poisson"])
def test_sum_blocks_are_the_oracles(name, sampling):
    """Each sum protocol's block (its noise: none, the curator's (added in finish), each user's,
    Duchi et al.'s reports, the optimizer's (report_noisy_max: none here)), sampled calls too."""
    protocol = build_protocol(name, "tight")
    dim, users = 5, 700
    population = 2 * users if sampling == "poisson" else users  # a Poisson sample of about `users`
    plan = RoundPlan(0, 0, population, 1.0, 1e-6, 1.5, GRADIENTS, sampling=sampling,
                     rate=0.5 if sampling == "poisson" else 0.0, noise_std=0.7 if name == "report_noisy_max" else 0.0)
    params = protocol.plan(plan, dim)
    inputs = _inputs(dim, users, params.norm_bound, 11)
    chunks = [np.ascontiguousarray(inputs[:, low: low + 256]) for low in range(0, users, 256)]
    for block in range(2):
        ours, theirs = stream(0, 2, 3, block), stream(0, 2, 3, block)
        partial = protocol.encode_block(params, [part.copy() for part in chunks], ours)
        want = oracle.sum_encode_block(protocol.noise, params, chunks, theirs)
        assert partial.users == want.users and np.array_equal(partial.units, want.units), (name, block)
        assert ours.random() == theirs.random()


@pytest.mark.parametrize("accounting, users, dim", [("paper", 600, 3), ("tight", 5000, 1), ("tight", 77, 17)])
def test_the_pvec_analyzer_is_the_oracles_on_both_paths(accounting, users, dim):
    """finish then decode (the Python rounds), and the compiled twin's analyze (the fused rounds),
    give the oracle's estimate bit for bit, on partials far below, at and far above the noise's
    mean; literal mode's count_messages centres as finish does."""
    from pipeline import compiled

    protocol = build_protocol("cjmp_vec", accounting)
    params = cjmp.plan(accounting, users, dim, 1.0, 1e-6, 1.5)
    encoding = protocol.fused_encoding(params)
    analyze = compiled.compiled_function(type(encoding).analyze)
    rng = np.random.default_rng(users)
    for floor_total in (0, encoding.whole, 3 * encoding.whole + 5):
        ones_above_floor = rng.integers(-users * params.g, users * params.g, dim) + (encoding.whole - floor_total)
        total = cjmp.PartialCounts(users, ones_above_floor, floor_total)
        want = oracle.pvec_analyze(params, total).view(np.uint64)
        assert np.array_equal(protocol.decode(params, protocol.finish(params, total)).view(np.uint64), want)
        work, estimate = encoding.work(dim, 1), np.empty(dim)
        work[3][:] = ones_above_floor + floor_total
        assert analyze(encoding, work, 0, np.zeros(compiled.STATE_WORDS, np.uint64), estimate)
        assert np.array_equal(estimate.view(np.uint64), want) and not work[3].any()
    counts = rng.integers(0, 50, dim)  # literal messages carrying so many ones, and as many zeros
    labels = np.repeat(np.arange(dim, dtype=np.int32), 2 * counts)
    bits = np.concatenate([np.repeat([1, 0], (count, count)) for count in counts]).astype(np.uint8)
    order = rng.permutation(labels.size)
    assert np.array_equal(protocol.decode(params, protocol.count_messages(params, labels[order], bits[order])),
                          oracle.pvec_analyze(params, cjmp.PartialCounts(users, counts, 0)))


@pytest.mark.parametrize("name", ["none", "central_gaussian", "shuffle_gaussian", "local_l2", "report_noisy_max"])
def test_sum_finish_is_the_oracles(name):
    """Each sum protocol's finish (the compiled twin's analyze, what the fused rounds inline) gives
    the oracle's released total, the curator's noise drawn as numpy draws it on the same stream;
    a protocol without it leaves the stream untouched."""
    protocol = build_protocol(name, "tight")
    plan = RoundPlan(0, 0, 700, 1.0, 1e-6, 1.5, GRADIENTS, noise_std=0.7 if name == "report_noisy_max" else 0.0)
    params = protocol.plan(plan, 5)
    units = np.random.default_rng(1).integers(-2**61, 2**61, 5)
    total = oracle.FixedPointSum(700, units)
    for round_index in range(3):
        ours, theirs = stream(0, 5, round_index), stream(0, 5, round_index)
        released = protocol.finish(params, total, ours)
        want = oracle.sum_finish(protocol.noise, params, total, theirs)
        assert released.users == 700 and np.array_equal(released.total.view(np.uint64), want.view(np.uint64)), name
        assert ours.random() == theirs.random()
        assert np.array_equal(total.units, units)  # the partial is not changed
    assert (protocol.noise == "central") == (name == "central_gaussian")
    # The base's finish is the exact total, whatever the subclass's noise: what a plug-in that adds
    # noise of its own calls (experiments/plugins/under_noised.py).
    exact = SumProtocol.finish(protocol, params, total, stream(0, 5, 9))
    assert np.array_equal(exact.total.view(np.uint64), oracle.sum_finish(None, params, total, None).view(np.uint64))


def test_a_sum_outside_the_fixed_point_range_is_refused():
    protocol = build_protocol("none")
    params = dataclasses.replace(protocol.plan(RoundPlan(0, 0, 4, 1.0, 1e-6, 1.0, GRADIENTS), 2), quantum=1e-300)
    with pytest.raises(OverflowError, match="fixed-point range"):
        protocol.encode_block(params, [np.ones((2, 4))], stream(0, 2, 0, 0))


@pytest.mark.parametrize("kind, dim, messages, levels, users", [
    ("linf", 10, 3, 3, 40), ("l2", 10, 10, 1, 40), ("l2", 5, 5, 4, 1), ("linf", 7, 2, 2, 300), ("l2", 3, 2, 2, 17),
    ("l1", 10, 1, 1, 40), ("l1", 9, 1, 1, 1), ("l1", 33, 1, 1, 1), ("l1", 100, 1, 1, 1), ("l1", 1, 1, 1, 5),
    ("binary", 10, 3, 1, 40), ("binary", 7, 7, 1, 300)])
def test_girgis_blocks_are_the_oracles(kind, dim, messages, levels, users):
    """girgis.encode_block (its compiled randomizer, what the rounds inline) gives the oracle's
    histograms, and girgis.decode the oracle's estimate, padding indices included (the estimate drops them, so rounds alone would not see
    them), for inputs in and outside the ball; the stream moves past the same draws."""
    from pipeline.protocols import girgis

    params = girgis.plan_girgis(kind, users, dim, 1.0, 2.0, levels=levels, messages=messages, rotation_seed=3)
    rng = np.random.default_rng(users)
    inputs = (rng.random((dim, users)) < 0.4).astype(np.float64) if kind == "binary" \
        else rng.standard_normal((dim, users)) * 0.8
    ours, theirs = stream(0, 2, users, 1), stream(0, 2, users, 1)
    statistic = girgis.encode_block(params, inputs, ours)
    assert np.array_equal(statistic, oracle.girgis_encode_block(params, inputs, theirs))
    assert params.padded_dim > params.coded_dim or kind not in ("linf", "binary") or messages == dim
    assert ours.random() == theirs.random()
    # the analyzer (decode_compiled, what the rounds inline) on it, and on three blocks' sum
    total = statistic + sum(girgis.encode_block(params, inputs, stream(0, 2, users, block)) for block in (2, 3))
    for histograms in (statistic, total):
        assert np.array_equal(girgis.decode(params, histograms).view(np.uint64),
                              oracle.girgis_decode(params, histograms).view(np.uint64))
