"""Companion protocols, sampling and accountants (issue #5): each checked against
exact formulas, published or independently computed numbers, and the sampling
its accountant assumes. Statistical tolerances are 5 standard errors of the
exact variance."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import special, stats

from pipeline import engine
from pipeline.accounting import mechanisms, shuffle_ldp
from pipeline.accounting.events import GaussianSumDpEvent, PoissonGaussianDpEvent, ShuffleLdpDpEvent
from pipeline.accounting.ledger import FULLY_INTERACTIVE, PrivacyLedger
from pipeline.accounting.pvec_tight import analytic_gaussian_sigma
from pipeline.engine.layout import BlockLayout, Streams, sampled_users
from pipeline.optimizers import DssSGD
from pipeline.problems import Quadratic
from pipeline.protocols import build_protocol
from pipeline.protocols.base import GRADIENTS, RoundPlan
from pipeline.protocols.sums import duchi_report_norm

DIM = 4


def _plan(users=200, population=None, sampling="all", rate=0.0, epsilon=1.0, delta=1e-6, norm=1.0, folds=1):
    return RoundPlan(0, 0, population or users, epsilon, delta, norm, GRADIENTS, folds, sampling,
                     sample_size=users if sampling == "uniform" else 0, rate=rate)


def _inputs(rng, users, norm=1.0):
    x = rng.standard_normal((DIM, users))
    return x * (norm * rng.random(users) / np.linalg.norm(x, axis=0))  # inside the ball


def _released(protocol, params, inputs, seed):
    rng = np.random.default_rng(seed)
    total = protocol.encode_block(params, [inputs.copy()], rng)
    return protocol.decode(params, protocol.finish(params, total, rng))


@pytest.mark.parametrize("name", ["central_gaussian", "shuffle_gaussian"])
def test_gaussian_protocols_are_unbiased_with_their_exact_mse(name):
    protocol = build_protocol(name, "tight")
    params = protocol.plan(_plan(), DIM)
    inputs = _inputs(np.random.default_rng(0), 200)
    truth = inputs.sum(axis=1)
    trials = 2000
    errors = np.array([_released(protocol, params, inputs, seed) - truth for seed in range(trials)])
    per_coordinate = protocol.sum_mse(params) / DIM  # σ² (central) or n·σ² (shuffle): Gaussian noise only
    assert np.all(np.abs(errors.mean(axis=0)) < 5 * math.sqrt(per_coordinate / trials))
    squared = (errors**2).sum(axis=1)
    # ‖e‖² is σ²χ²_d: variance 2dσ⁴.
    assert abs(squared.mean() - protocol.sum_mse(params)) < 5 * math.sqrt(2 * DIM * per_coordinate**2 / trials)


def test_duchi_randomizer_is_unbiased_with_norm_b_and_the_closed_form_constant():
    protocol = build_protocol("local_l2", "paper")
    params = protocol.plan(_plan(users=1), DIM)
    assert params.epsilon0 == pytest.approx(1.0, rel=1e-12)
    # B = r coth(ε/2) √π Γ((d+1)/2)/Γ(d/2): E|⟨U, e⟩| = Γ(d/2)/(√π Γ((d+1)/2)) for U uniform on the sphere.
    expected = math.sqrt(math.pi) * math.exp(special.gammaln((DIM + 1) / 2) - special.gammaln(DIM / 2)) / math.tanh(0.5)
    assert params.report_norm == pytest.approx(expected, rel=1e-12)
    assert duchi_report_norm(DIM, 2.0, 1.0) == pytest.approx(2 * expected, rel=1e-12)
    x = np.array([0.6, -0.3, 0.2, 0.0])[:, None]
    trials = 40_000
    reports = _released(protocol, protocol.plan(_plan(users=trials), DIM), np.repeat(x, trials, axis=1), 1)
    # The report's coordinates have E = x and E Z_j² = B²/d (uniform on the sphere, symmetric in j).
    standard_error = math.sqrt(params.report_norm**2 / DIM / trials)
    assert np.all(np.abs(reports / trials - x[:, 0]) < 5 * standard_error)


def test_duchi_reports_all_have_norm_b_and_density_ratio_e_eps():
    protocol = build_protocol("local_l2", "paper")
    params = protocol.plan(_plan(users=1000, epsilon=2.0), DIM)
    from pipeline import compiled, draws
    from pipeline.protocols.sums import _duchi_in_place, duchi_agreement

    users = 20_000
    x = np.zeros((DIM, users))
    x[0] = 1.0
    reports, work = x.copy(), (np.empty(users), np.empty(users), np.empty(DIM * users))
    with draws.drawn_in_compiled_code(np.random.default_rng(3)) as state:  # the reports the package sends
        compiled.compiled_function(_duchi_in_place)(reports.reshape(-1), DIM, users, state, params.norm_bound,
                                                    duchi_agreement(params.epsilon0), params.report_norm,
                                                    np.empty(users), work)
    np.testing.assert_allclose(np.linalg.norm(reports, axis=0), params.report_norm, rtol=1e-12)
    # P(⟨Z, e1⟩ > 0) = e^ε/(e^ε + 1) for x = e1 (the sign is +1 surely at ‖x‖ = r).
    p = math.exp(2.0) / (math.exp(2.0) + 1)
    share = np.mean(reports[0] > 0)
    assert abs(share - p) < 5 * math.sqrt(p * (1 - p) / x.shape[1])


def test_exact_sum_is_exact_up_to_the_fixed_point_unit():
    protocol = build_protocol("none")
    params = protocol.plan(_plan(users=1000), DIM)
    inputs = _inputs(np.random.default_rng(5), 1000)
    released = _released(protocol, params, inputs, 0)
    assert np.all(np.abs(released - inputs.sum(axis=1)) <= params.quantum)


@pytest.mark.parametrize("name", ["none", "central_gaussian", "shuffle_gaussian", "local_l2", "girgis_l2"])
def test_partials_add_to_the_same_bits_in_any_grouping(name):
    protocol = build_protocol(name, "tight")
    params = protocol.plan(_plan(users=300), DIM)
    inputs = _inputs(np.random.default_rng(6), 300)
    blocks = [protocol.encode_block(params, [inputs[:, i:i + 30].copy()], np.random.default_rng(i)) for i in
              range(0, 300, 30)]
    one = protocol.merge(blocks)
    grouped = protocol.merge([protocol.merge(blocks[:4]), protocol.merge(blocks[4:7]), protocol.merge(blocks[7:])])
    shuffled = protocol.merge(blocks[::-1])
    first = protocol.decode(params, protocol.finish(params, one, np.random.default_rng(9)))
    for other in (grouped, shuffled):
        again = protocol.decode(params, protocol.finish(params, other, np.random.default_rng(9)))
        assert first.tobytes() == again.tobytes()


def _union(layout, plan, partition):
    chosen = {}
    for blocks in partition:
        chosen.update(sampled_users(layout, Streams(11), plan, blocks))  # a shard's own streams
    return np.concatenate([chosen[b] for b in sorted(chosen)]) if chosen else np.zeros(0, int)


def test_uniform_sampling_takes_exactly_k_uniformly_whatever_the_sharding():
    layout = BlockLayout(1000, 64)
    rounds, k = 3000, 50
    hits = np.zeros(1000)
    for r in range(rounds):
        plan = RoundPlan(r, 0, 1000, 1.0, 1e-6, 1.0, GRADIENTS, sampling="uniform", sample_size=k)
        users = _union(layout, plan, [range(0, 16)])
        if r < 20:
            assert np.array_equal(users, _union(layout, plan, [range(0, 5), range(5, 11), range(11, 16)]))
        assert users.size == k and np.unique(users).size == k
        hits[users] += 1
    # Each user is in a round with probability k/n: Binomial(rounds, k/n) hits.
    q = k / 1000
    assert np.all(np.abs(hits - rounds * q) < 5 * math.sqrt(rounds * q * (1 - q)))
    assert stats.chisquare(hits).pvalue > 1e-6


def test_poisson_sampling_has_binomial_sizes_and_independent_memberships():
    layout = BlockLayout(500, 64)
    rounds, q = 4000, 0.03
    sizes, pair = [], 0
    for r in range(rounds):
        plan = RoundPlan(r, 0, 500, 1.0, 1e-6, 1.0, GRADIENTS, sampling="poisson", rate=q)
        users = _union(layout, plan, [range(0, 8)])
        if r < 20:
            assert np.array_equal(users, _union(layout, plan, [range(0, 3), range(3, 8)]))
        sizes.append(users.size)
        pair += (0 in users) and (499 in users)  # users in different blocks: independent
    sizes = np.array(sizes)
    assert abs(sizes.mean() - 500 * q) < 5 * math.sqrt(500 * q * (1 - q) / rounds)
    # The sample variance of Bin(n, q): its own SE ≈ σ²·√(2/rounds).
    assert abs(sizes.var() - 500 * q * (1 - q)) < 5 * 500 * q * (1 - q) * math.sqrt(2 / rounds)
    assert abs(pair - rounds * q * q) < 5 * math.sqrt(rounds * q * q * (1 - q * q))  # Binomial(rounds, q²)


def test_dss_sgd_skips_empty_rounds_and_counts_the_clock():
    problem = Quadratic(dim=DIM, radius=1.0)
    protocol = build_protocol("shuffle_gaussian", "tight")
    optimizer = DssSGD.from_config(problem, 60, 2.0, 1e-5, batch_size=1, rounds=40, accounting="tight",
                                   protocol=protocol)
    state = optimizer.init()
    moved = optimizer.update(state, None)
    assert np.array_equal(moved.theta, state.theta) and moved.steps == 1
    job = engine.RunJob(problem, optimizer, protocol, 3, 60, 16)
    _, records = engine.execute(job, "local", 2)
    users = np.array([r.users for r in records])
    # K_t ~ Bin(60, 1/60): P(K = 0) ≈ 0.364 per round.
    assert 0 < (users == 0).sum() < 40
    losses = np.array([r.excess_loss for r in records])
    empty = np.flatnonzero(users == 0)
    empty = empty[empty > 0]
    assert np.array_equal(losses[empty], losses[empty - 1])  # no step: the released θ is unchanged


def test_composed_gaussians_are_exact_gdp():
    # Two independent implementations: the analytic Gaussian (Balle–Wang) σ for (ε, δ),
    # and the μ-GDP conversion at μ = Δ/σ, must agree.
    sigma = analytic_gaussian_sigma(1.0, 1e-6, 2.0)
    assert mechanisms.gaussian_epsilon(2.0 / sigma, 1e-6) == pytest.approx(1.0, rel=1e-3)
    event = GaussianSumDpEvent(100, 100, DIM, 2.0, sigma * math.sqrt(10))
    ledger = PrivacyLedger(FULLY_INTERACTIVE, 1.0, 1e-6, accounting="tight")
    for r in range(10):
        ledger.record(r, 0, 100, event)
    assert ledger.total()[0] == pytest.approx(1.0, rel=1e-3)  # √10 calls at √10 σ: μ unchanged
    assert ledger.total("paper")[0] > ledger.total()[0]  # RDP is an upper bound on the exact


def test_poisson_gaussian_pld_matches_gdp_at_rate_one_and_amplifies_below():
    # At q = 1 the replace-one pair is N(±C, σ²): the Gaussian with Δ = 2C, exactly μ-GDP.
    full = mechanisms.composed_epsilon(PoissonGaussianDpEvent(1000, 1.0, DIM, 2.0, 4.0), 5, 1e-6, "tight")
    exact = mechanisms.gaussian_epsilon(math.sqrt(5) * 2.0 / 4.0, 1e-6)
    assert exact <= full <= exact + 0.01
    sampled = PoissonGaussianDpEvent(1000, 0.01, DIM, 2.0, 4.0)
    assert mechanisms.composed_epsilon(sampled, 5, 1e-6, "tight") < 0.1 * full
    assert mechanisms.composed_epsilon(sampled, 5, 1e-6, "paper") >= mechanisms.composed_epsilon(sampled, 5, 1e-6,
                                                                                                 "tight")


def test_joint_convexity_bound_is_the_unsampled_curve_at_rate_one_and_monotone():
    curve = mechanisms._gaussian_curve(2.0, 3.0)
    np.testing.assert_allclose(mechanisms._mixture(1.0, [(1.0, curve)]), curve, rtol=1e-12)
    rates = [0.01, 0.1, 0.5, 1.0]
    mixed = [mechanisms._mixture(q, [(q, curve)]) for q in rates]
    assert all(np.all(a <= b + 1e-15) for a, b in zip(mixed, mixed[1:]))


@pytest.mark.parametrize("sampling", ["all", "uniform", "poisson"])
def test_shuffle_ldp_ledger_is_never_below_the_exact_shuffled_rr_lower_bound(sampling):
    eps0, n = 1.0, 2000
    event = ShuffleLdpDpEvent(n if sampling != "uniform" else 500, n, sampling, 0.25 if sampling == "poisson" else 0.0,
                              (eps0,), "girgis_linf", 2)
    for mode in ("paper", "tight"):
        spent = mechanisms.composed_epsilon(event, 1, 1e-6, mode)
        assert spent <= eps0 + 1e-12  # never above the pure local ε0 curve's conversion... at worst ε0
        if sampling == "all":  # a real pair of the mechanism: shuffled binary randomized response
            assert spent >= shuffle_ldp.shuffle_ldp_lower_epsilon(n, eps0, 1e-6)["epsilon"]


@pytest.mark.parametrize("name", ["central_gaussian", "shuffle_gaussian", "girgis_l2", "girgis_linf", "local_l2"])
@pytest.mark.parametrize("accounting", ["paper", "tight"])
def test_calibrated_protocols_meet_the_budget_without_waste(name, accounting):
    protocol = build_protocol(name, accounting)
    plan = _plan(users=2000, epsilon=1.0, delta=1e-6, folds=1)
    params = protocol.plan(plan, DIM)
    spent = mechanisms.composed_epsilon(protocol.event(params, 64), 1, 1e-6, accounting)
    assert 0.99 <= spent <= 1.0


def test_sampled_calibration_meets_the_composed_budget():
    protocol = build_protocol("girgis_l2", "tight")
    plan = _plan(users=100, population=5000, sampling="uniform", folds=50)
    call = protocol.plan(plan, DIM)
    assert 0.99 <= mechanisms.composed_epsilon(protocol.event(call, 64), 50, 1e-6, "tight") <= 1.0


def _final_losses(settings: dict, seeds: range) -> np.ndarray:
    """Final excess losses of one config over seeds, run in process."""
    from pipeline.config import expand
    from pipeline.planning import plan_run

    tree = {"experiment": "companion", "n_users": 2000, "problem": {"name": "quadratic", "dim": 3, "radius": 1.0},
            "privacy": {"accounting": "tight", "delta": 1e-6}, "seeds": list(seeds), "tracking": {"out": "unused"}}
    for dotted, value in settings.items():
        node = tree
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    runs = expand(tree)
    # The runs differ in their seed only, and planning (calibration, ledger) does not read
    # it: plan the first, and run its job under each seed.
    assert all(dataclasses.replace(run, seed=runs[0].seed) == runs[0] for run in runs)
    job = plan_run(runs[0]).job
    return np.array([engine.execute(dataclasses.replace(job, seed=run.seed), "local", 1)[1][-1].excess_loss
                     for run in runs])


PAIRS = [
    {"optimizer.name": "seq_sgd", "privacy.protocol": "central_gaussian", "optimizer.batch_size": 40},
    {"optimizer.name": "seq_sgd", "privacy.protocol": "shuffle_gaussian", "optimizer.batch_size": 40},
    {"optimizer.name": "seq_sgd", "privacy.protocol": "local_l2", "optimizer.batch_size": 40},
    {"optimizer.name": "seq_sgd", "privacy.protocol": "girgis_l2", "optimizer.batch_size": 40},
    {"optimizer.name": "cldp_sgd", "privacy.protocol": "girgis_linf", "optimizer.batch_size": 100},
    {"optimizer.name": "dss_sgd", "privacy.protocol": "shuffle_gaussian", "optimizer.batch_size": 100},
    {"optimizer.name": "dp_sgd", "privacy.protocol": "central_gaussian", "optimizer.batch_size": 40},
    {"optimizer.name": "mirror_descent_l1", "privacy.protocol": "central_gaussian", "problem.name": "l1_least_squares",
     "optimizer.batch_size": 20},
    # PNSGD and Frank–Wolfe have no noiseless twin here: their gap is to θ* itself.
    # n = 500 (one round per user): the gap falls by 12 SE, against the 5 asked.
    {"optimizer.name": "pnsgd", "privacy.protocol": "central_gaussian", "n_users": 500},
    {"optimizer.name": "frank_wolfe_l1", "privacy.protocol": "report_noisy_max", "problem.name": "l1_least_squares",
     "n_users": 20000},
]


@pytest.mark.parametrize("settings", PAIRS, ids=lambda s: f"{s['optimizer.name']}-{s['privacy.protocol']}")
def test_every_private_optimizer_approaches_its_non_private_run_as_epsilon_grows(settings):
    """The gap to the same algorithm on exact sums shrinks from ε = 0.1 to ε = 15,
    by more than 5 standard errors of the difference (40 seeds each)."""
    seeds = range(40)
    exact = dict(settings, **{"privacy.protocol": "none"})
    if settings["optimizer.name"] == "dp_sgd":
        exact["optimizer.name"] = "seq_sgd"  # the same averaged SGD over the same batches, noiseless
        exact["optimizer.step_size"] = None
    baseline = 0.0 if settings["optimizer.name"] in ("pnsgd", "frank_wolfe_l1") else _final_losses(
        {k: v for k, v in exact.items() if v is not None}, seeds)
    low = _final_losses({**settings, "privacy.epsilon": 0.1}, seeds) - baseline
    high = _final_losses({**settings, "privacy.epsilon": 15.0}, seeds) - baseline
    difference = low - high
    assert difference.mean() > 5 * difference.std(ddof=1) / math.sqrt(len(seeds)), (low, high)


def test_frank_wolfe_tree_matches_the_notes_counts_and_theorem_6a_at_the_root():
    from pipeline.optimizers.frank_wolfe import FrankWolfeL1, tree_nodes
    from pipeline.problems import L1LeastSquares

    for phases, batch in ((1, 64), (3, 64), (5, 256)):
        nodes = tree_nodes(phases, batch)
        # Notes seed-003 §2.3: T·b + b·T(T+1)/4 samples and 2^{T+1} − 2 leaves.
        assert sum(n.users for n in nodes) == phases * batch + batch * phases * (phases + 1) // 4
        assert sum(n.leaf for n in nodes) == 2 ** (phases + 1) - 2
    problem = L1LeastSquares(8, 1.0)
    optimizer = FrankWolfeL1.from_config(problem, 30000, 1.0, 1e-6)
    b, lip, diameter = optimizer.batch, problem.lipschitz_inf, problem.diameter
    # At Theorem 6a's λ_t = 2LD·2^t/(bε) a root spends exactly ε: 2^t selections of 2Δ/λ, Δ = R·2L/b.
    roots = [e for e in optimizer._events(2 * lip * diameter / b) if e.users == b]
    assert all(mechanisms.composed_epsilon(e, 1, 1e-6, "paper") == pytest.approx(1.0, rel=1e-12) for e in roots)
    assert optimizer._spent(optimizer.scale) <= 1.0 < optimizer._spent(optimizer.scale * 0.999)
    tight = FrankWolfeL1.from_config(problem, 30000, 1.0, 1e-6, accounting="tight")
    assert tight.scale <= optimizer.scale


def test_frank_wolfe_selection_meets_lemma_4_1():
    """Seed 003 Lemma 4.1, the notes' explicit form: E⟨v, w⟩ − min_i ⟨v, c_i⟩ ≤ 2λ·H_m."""
    from pipeline.optimizers.frank_wolfe import FrankWolfeL1
    from pipeline.problems import L1LeastSquares

    problem = L1LeastSquares(10, 1.5)
    optimizer = FrankWolfeL1.from_config(problem, 30000, 1.0, 1e-6)
    v = np.random.default_rng(1).standard_normal(10)  # scores spread well beyond the noise: a wrong pick shows
    rng = np.random.default_rng(2)
    phase, trials = 2, 20000
    # With k = 1 the step is η = 1: the new iterate is the chosen vertex itself.
    gaps = np.array([optimizer._step(np.zeros(10), v, phase, 0, rng)[0] @ v for _ in range(trials)])
    gaps -= -problem.radius * np.abs(v).max()
    scale, m = optimizer.scale * 2**phase, 20
    assert gaps.mean() - 5 * gaps.std(ddof=1) / math.sqrt(trials) <= 2 * scale * sum(1 / i for i in range(1, m + 1))
    assert gaps.min() >= -1e-15


def test_mirror_descent_without_noise_meets_lemma_3_1():
    """Seed 003 Lemma 3.1 (exact): E F(x̄_T) − F* ≤ D_h(w*, w_1)/(Tη) + η G²/2 with the
    entropy on the 2d vertices (D_h ≤ ln 2d) and G = R·L∞ bounding ‖∇_w‖∞."""
    from pipeline.optimizers import MirrorDescentL1
    from pipeline.problems import L1LeastSquares

    problem = L1LeastSquares(6, 1.0)
    protocol = build_protocol("none")
    optimizer = MirrorDescentL1.from_config(problem, 3000, 1.0, 1e-6, batch_size=10, protocol=protocol)
    losses = np.array([engine.execute(engine.RunJob(problem, optimizer, protocol, seed, 3000, 256), "local", 1)[1][-1]
                       .excess_loss for seed in range(12)])
    g = problem.radius * problem.lipschitz_inf
    bound = math.log(12) / (optimizer.rounds * optimizer.step) + optimizer.step * g**2 / 2
    assert losses.mean() - 5 * losses.std(ddof=1) / math.sqrt(len(losses)) <= bound


@pytest.mark.parametrize("epsilon", [0.2, 0.5, 0.9])
def test_pan_agd_noise_draw_alone_meets_lemma_c5_and_the_ledger_counts_both(epsilon):
    """One draw of ζ (2Δ² ln(2/δ)/ε², Δ = 2L/B) is (ε, δ)-DP by the exact Gaussian
    hockey stick (Balle–Wang) — what Lemma C.4's intruder sees; the released output
    carries two draws, and the run's ledger says less than ε."""
    from pipeline.config import expand
    from pipeline.optimizers.pan_agd import pan_noise
    from pipeline.planning import plan_run

    problem = Quadratic(dim=DIM, radius=1.0)
    batch, delta = 50, 1e-6
    zeta = pan_noise(problem.lipschitz, batch, epsilon, delta)
    assert analytic_gaussian_sigma(epsilon, delta, 2 * problem.lipschitz / batch) <= zeta
    run = expand({"experiment": "pan", "n_users": 5000, "optimizer": {"name": "pan_agd"},
                  "problem": {"name": "quadratic", "dim": DIM},
                  "privacy": {"protocol": "central_gaussian", "epsilon": epsilon, "delta": delta},
                  "tracking": {"out": "unused"}})[0]
    planned = plan_run(run)
    assert planned.ledger.total()[0] < epsilon
    event = planned.ledger.to_dict()["events"][0]
    assert event["sigma"] == pytest.approx(planned.job.optimizer.batch_size * math.sqrt(2) * planned.job.optimizer.zeta)
