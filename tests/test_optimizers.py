"""Optimizers against their explicit bounds: AC-SA without noise at Lan's
deterministic rate, P_SGD's Lemma 4.2 bound in expectation over seeds, and the
calibrated parameter mode's choices."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import yaml

from pipeline import cli, config, engine, planning
from pipeline.errors import ConfigError
from pipeline.optimizers import OPTIMIZERS, FullGDSmoothed, FullPhased, SeqAGD, SeqAGDSmoothed, SeqPhased, SeqSGD
from pipeline.optimizers.base import OVERRIDES
from pipeline.optimizers.phased import phase_count
from pipeline.problems import Absolute, Quadratic
from pipeline.problems.smoothed import MoreauSmoothed
from pipeline.protocols import CjmpVec, build_protocol, cjmp


@pytest.mark.parametrize("dim", [1, 5, 20])
@pytest.mark.parametrize("rounds", [2, 5, 10, 50])
def test_acsa_without_noise_meets_lans_deterministic_rate(dim, rounds):
    problem = Quadratic(dim=dim, radius=1.0)
    optimizer = SeqAGD(problem, 10**6, 1.0, 1e-6, 1, rounds, 0.0, parameters="calibrated")
    state = optimizer.init()
    for _ in range(rounds):  # the exact population gradient θ − μ: no sampling, no protocol noise
        state = optimizer.update(state, optimizer.query(state) - problem.optimum)
    # Lan 2012, Corollary 1 with σ = 0 and γ = 1/(4β): F(θ^ag) − F* ≤ 4β·(D²/2)/(T(T+1)).
    assert problem.excess_loss(optimizer.output(state)) <= 2 * problem.smoothness * problem.diameter**2 / (
        rounds * (rounds + 1))


@pytest.mark.parametrize("accounting", ["paper", "tight", "noise off"])
def test_sgd_meets_lemma_4_2_in_expectation(accounting):
    problem, n, epsilon, delta = Quadratic(dim=2, radius=1.0), 4000, 4.0, 1e-5
    protocol = build_protocol("none") if accounting == "noise off" else CjmpVec(accounting)
    optimizer = SeqSGD.from_config(problem, n, epsilon, delta, accounting=protocol.accounting,
                                   parameters="calibrated", batch_size=20 if accounting == "noise off" else None)
    job = engine.RunJob(problem, optimizer, protocol, 0, n, 4096)
    losses = []
    for seed in range(24):
        state, _ = engine.execute(engine.RunJob(problem, optimizer, protocol, seed, n, 4096), "local", 1)
        losses.append(problem.excess_loss(optimizer.output(state)))
    # Lemma 4.2 (Bubeck): E F(θ̄) − F* ≤ D²/(2ηT) + η L_G²/2, with E‖ḡ‖² ≤ L² + MSE/B² = L_G²
    # (MSE = 0 with the noise switched off: the non-private rate).
    noise = 0.0 if accounting == "noise off" else cjmp.mean_mse(accounting, optimizer.batch_size, 2, epsilon, delta,
                                                                problem.lipschitz)
    lipschitz_g2 = problem.lipschitz**2 + noise
    eta, rounds = optimizer.step_size, optimizer.rounds
    bound = problem.diameter**2 / (2 * eta * rounds) + eta * lipschitz_g2 / 2
    mean, standard_error = np.mean(losses), np.std(losses, ddof=1) / math.sqrt(len(losses))
    assert mean - 5 * standard_error <= bound
    assert job.schedule.rounds == rounds


def test_calibrated_batch_minimizes_the_explicit_bound():
    problem, n = Quadratic(dim=5, radius=1.0), 100_000
    chosen = SeqSGD.from_config(problem, n, 1.0, 1e-6, accounting="tight", parameters="calibrated")

    def bound(size):  # Lemma 4.2 at its best η: D·L_G/√T
        noise = cjmp.mean_mse("tight", size, 5, 1.0, 1e-6, problem.lipschitz)
        return problem.diameter * math.sqrt(problem.lipschitz**2 + noise) / math.sqrt(n // size)

    assert all(bound(chosen.batch_size) <= bound(size) for size in (1, 5, 20, 100, 1000, 10_000))
    paper = SeqSGD.from_config(problem, n, 1.0, 1e-6)
    assert bound(chosen.batch_size) < bound(paper.batch_size)


def test_seq_agd_needs_a_smooth_loss_and_disjoint_batches():
    problem = Quadratic(dim=3, radius=1.0)
    with pytest.raises(ConfigError, match="optimizer.rounds"):
        SeqAGD.from_config(problem, 1000, 1.0, 1e-6, rounds=11, batch_size=100)
    agd = SeqAGD.from_config(problem, 1000, 1.0, 1e-6)
    assert agd.rounds * agd.batch_size <= 1000 and agd.schedule().composition == "sequential"
    # Paper mode takes the step sizes as printed; L_t decreases in t (notes T16).
    assert agd.curvature(1) > agd.curvature(2) > agd.curvature(agd.rounds)


def test_phases_use_fresh_disjoint_users_and_warm_start():
    problem = Quadratic(dim=3, radius=1.0)
    phased = SeqPhased.from_config(problem, 30_000, 2.0, 1e-6, accounting="tight", parameters="calibrated")
    schedule = phased.schedule()
    users = [schedule.plan(r) for r in range(schedule.rounds)]
    spans = sorted((plan.first_user, plan.stop_user) for plan in users)
    assert all(stop <= start for (_, stop), (start, _) in zip(spans, spans[1:]))  # disjoint
    assert spans[-1][1] <= 30_000 and len(phased.phases) == phase_count(30_000) == 5
    # The first round of phase 2 queries the output of phase 1 (θ_1 = θ^ag_1 = that output).
    state, noise = phased.init(), np.full(3, 0.01)
    for _ in range(phased.phases[0].rounds):
        state = phased.update(state, phased.query(state) - problem.optimum + noise)
    assert state.phase == 1 and np.array_equal(phased.query(state), state.inner.theta_ag)


def test_phased_refuses_what_theorem_4_8_does_not_cover():
    with pytest.raises(ConfigError, match="optimizer.batch_size"):
        SeqPhased.from_config(Quadratic(dim=3, radius=1.0), 30_000, 1.0, 1e-6, batch_size=10)


def test_smoothed_optimizers_run_on_the_envelope_and_measure_the_loss():
    problem = Quadratic(dim=3, radius=1.0)
    for cls in (SeqAGDSmoothed, FullGDSmoothed):
        optimizer = cls.from_config(problem, 2000, 1.0, 1e-6, rounds=5 if cls is FullGDSmoothed else None)
        envelope = optimizer.problem
        assert isinstance(envelope, MoreauSmoothed) and envelope.unsmoothed is problem
        # Δ₂ = 2L (Theorem 4.7), and the loss measured is the problem's own.
        assert optimizer.schedule().plan(0).norm_bound == 2 * problem.lipschitz
        theta = np.array([0.3, -0.2, 0.1])
        assert envelope.excess_loss(theta) == problem.excess_loss(theta)
        # For ½‖θ − x‖² the envelope gradient is β/(1 + β)·(θ − x) exactly.
        data = problem.sample(np.random.default_rng(0), 4)
        beta = envelope.smoothness
        assert np.allclose(envelope.gradients(theta, data), beta / (1 + beta) * (theta[:, None] - data))


@pytest.mark.parametrize("protocol_name", ["cjmp_vec", "none"])
def test_full_gd_meets_lemmas_b4_plus_b5_in_expectation(protocol_name):
    """Lemma B.4 (optimization, noise variance σ² on the mean gradient) plus Lemma B.5
    (uniform stability L²Tη/n, β-smooth, η ≤ 2/β) bound E F(θ̄) − F* (notes §4.3);
    with the protocol `none` the noise is switched off (σ = 0)."""
    from pipeline.optimizers import FullGD
    from pipeline.problems import Logistic

    problem, n, rounds = Logistic(dim=3, radius=1.0), 400, 20
    protocol = build_protocol(protocol_name, "tight")
    optimizer = FullGD.from_config(problem, n, 4.0, 1e-5, rounds=rounds, accounting="tight", protocol=protocol)
    eta = optimizer.step_size
    assert eta <= 2 / problem.smoothness
    noise = 0.0 if protocol_name == "none" else cjmp.mean_mse("tight", n, 3, 4.0, 1e-5, problem.lipschitz, rounds)
    losses = [engine.execute(engine.RunJob(problem, optimizer, protocol, seed, n, 4096), "local", 1)[1][-1].excess_loss
              for seed in range(16)]
    bound = (problem.diameter**2 / (2 * eta * rounds) + eta * (problem.lipschitz**2 + noise) / 2
             + problem.lipschitz**2 * rounds * eta / n)
    assert np.mean(losses) - 5 * np.std(losses, ddof=1) / math.sqrt(len(losses)) <= bound


def _envelope_gradient(problem, beta: float, theta: np.ndarray) -> np.ndarray:
    """∇F_β(θ) = Σ_k w_k ∇ℓ_β(θ, x_k), exactly: the population gradient of the envelope
    of a finite-support problem (no sampling, no protocol: the noise switched off)."""
    return MoreauSmoothed(problem, beta).gradients(theta, np.asarray(problem.support)) @ problem.weights


@pytest.mark.parametrize("rounds", [10, 100, 1000])
def test_smoothed_acsa_without_noise_meets_lan_plus_the_smoothing_gap(rounds):
    problem = Absolute(dim=4, radius=1.0)
    lipschitz, distance = problem.lipschitz, float(np.linalg.norm(problem.optimum))
    # β balancing 2βR²/T² against L²/(2β): the non-private O(LR/T) of smoothed acceleration.
    beta = lipschitz * rounds / (2 * distance)
    optimizer = SeqAGDSmoothed(MoreauSmoothed(problem, beta), 10**6, 1.0, 1e-6, 1, rounds, 0.0,
                               parameters="calibrated")
    state = optimizer.init()
    for _ in range(rounds):
        state = optimizer.update(state, _envelope_gradient(problem, beta, optimizer.query(state)))
    # Lan 2012, Cor. 1 with σ = 0 (γ = 1/(4β)) on F_β against the comparator θ*, then
    # Lemma 4.6: F ≤ F_β + L²/(2β) and F_β ≤ F, so F(θ) − F(θ*) ≤ F_β(θ) − F_β(θ*) + L²/(2β).
    bound = 2 * beta * distance**2 / (rounds * (rounds + 1)) + lipschitz**2 / (2 * beta)
    assert problem.excess_loss(optimizer.output(state)) <= bound


def test_phased_acsa_without_noise_meets_lan_in_every_phase_from_its_warm_start():
    problem = Quadratic(dim=3, radius=1.0)
    phased = SeqPhased.from_config(problem, 20_000, 1.0, 1e-6, accounting="tight", parameters="calibrated")
    phased = dataclasses.replace(phased, phases=tuple(dataclasses.replace(p, sigma=0.0) for p in phased.phases))
    state, start = phased.init(), np.zeros(3)
    for phase in phased.phases:
        for _ in range(phase.rounds):  # the exact population gradient θ − μ
            state = phased.update(state, phased.query(state) - problem.optimum)
        theta = phased.output(state)
        # Lan 2012, Cor. 1 with σ = 0, from the previous phase's output: a phase that
        # restarted from 0 or ran fewer rounds would miss it.
        bound = 2 * problem.smoothness * np.sum((start - problem.optimum) ** 2) / (phase.rounds * (phase.rounds + 1))
        assert problem.excess_loss(theta) <= bound
        start = theta
    assert problem.excess_loss(start) < 1e-20


def test_smoothed_full_gd_without_noise_meets_lemmas_b4_b5_plus_the_smoothing_gap():
    problem, n, rounds = Absolute(dim=3, radius=1.0), 400, 40
    protocol = build_protocol("none", "tight")
    optimizer = FullGDSmoothed.from_config(problem, n, 4.0, 1e-5, rounds=rounds, accounting="tight", protocol=protocol)
    envelope, eta = optimizer.problem, optimizer.step_size
    assert eta <= 2 / envelope.smoothness  # Lemma B.5's condition
    losses = [engine.execute(engine.RunJob(envelope, optimizer, protocol, seed, n, 4096), "local", 1)[1][-1].excess_loss
              for seed in range(16)]
    # B.4 against the comparator θ* (θ_0 = 0) + B.5 on the envelope (its declared Lipschitz
    # bound 2L), + Lemma 4.6's gap L²/(2β) with L the loss's own.
    lipschitz = envelope.lipschitz
    bound = (np.sum(problem.optimum**2) / (2 * eta * rounds) + eta * lipschitz**2 / 2
             + lipschitz**2 * rounds * eta / n + problem.lipschitz**2 / (2 * envelope.smoothness))
    assert np.mean(losses) - 5 * np.std(losses, ddof=1) / math.sqrt(len(losses)) <= bound


def test_full_phased_without_noise_meets_the_chained_lemmas_b4_b5():
    problem, n = Quadratic(dim=3, radius=1.0), 600
    protocol = build_protocol("none", "tight")
    phased = FullPhased.from_config(problem, n, 1.0, 1e-5, accounting="tight", protocol=protocol)
    lam, lipschitz, diameter = problem.strong_convexity, problem.lipschitz, problem.diameter
    # Group i: E F(θ_i) − F* ≤ Δ_i = E‖θ_{i−1} − θ*‖²/(2ηT) + ηL²/2 + L²Tη/n_i (B.4 + B.5), and
    # strong convexity gives E‖θ_i − θ*‖² ≤ min(D², 2Δ_i/λ); the first group starts at 0.
    def bound(group, square):  # Lemmas B.4 + B.5 from a start at mean-square distance `square`
        eta, rounds = group.step_size, group.rounds
        return square / (2 * eta * rounds) + eta * lipschitz**2 / 2 + lipschitz**2 * rounds * eta / group.n_users

    square, tuned = float(np.sum(problem.optimum**2)), min(diameter, 2 * lipschitz / lam)
    for group in phased.phases:
        assert group.step_size <= 2 / problem.smoothness
        # Each group is tuned for the distance its predecessor's bound implies (the first: 2L/λ).
        assert group.distance == pytest.approx(tuned, rel=1e-12)
        tuned = min(diameter, math.sqrt(2 * bound(group, group.distance**2) / lam))
        delta_bound = bound(group, square)
        square = min(diameter**2, 2 * delta_bound / lam)
    losses = [engine.execute(engine.RunJob(problem, phased, protocol, seed, n, 4096), "local", 1)[1][-1].excess_loss
              for seed in range(16)]
    assert np.mean(losses) - 5 * np.std(losses, ddof=1) / math.sqrt(len(losses)) <= delta_bound


def test_full_phased_without_noise_meets_smooth_gradient_descent_in_every_group():
    problem = Quadratic(dim=3, radius=1.0)
    phased = FullPhased.from_config(problem, 4000, 1.0, 1e-5, accounting="tight")
    state, start = phased.init(), np.zeros(3)
    for group in phased.phases:
        assert group.step_size <= 1 / problem.smoothness
        for _ in range(group.rounds):  # the exact population gradient θ − μ
            state = phased.update(state, phased.query(state) - problem.optimum)
        theta = phased.output(state)
        # Projected GD on a β-smooth loss with η ≤ 1/β: F(θ_{t+1}) − F* ≤ (‖θ_t − θ*‖² −
        # ‖θ_{t+1} − θ*‖²)/(2η) (Bubeck 2015, §3.2); averaging θ_0..θ_{T−1} from the warm start θ_0:
        bound = (problem.excess_loss(start) + np.sum((start - problem.optimum) ** 2) / (2 * group.step_size)) / group.rounds
        assert problem.excess_loss(theta) <= bound
        start = theta


# ---- optimizer.rounds, batch_size and step_size: declared exactly, refused otherwise ----

# A combination each shipped optimizer plans with (problem, protocol, n, ε), d = 3, tight accounting.
OVERRIDE_RUNS = {
    "mean_estimation": ("quadratic", "central_gaussian", 1000, 1.0),
    "seq_sgd": ("quadratic", "central_gaussian", 1000, 1.0),
    "seq_agd": ("logistic", "central_gaussian", 1000, 1.0),
    "seq_agd_smoothed": ("absolute", "central_gaussian", 1000, 1.0),
    "seq_phased": ("elastic", "central_gaussian", 1000, 1.0),
    "full_gd": ("quadratic", "central_gaussian", 500, 1.0),
    "full_gd_smoothed": ("absolute", "central_gaussian", 500, 1.0),
    "full_phased": ("elastic", "central_gaussian", 500, 1.0),
    "pan_agd": ("logistic", "central_gaussian", 1000, 0.5),  # Lemma C.5 needs ε < 1
    "sgd": ("quadratic", "none", 1000, 1.0),
    "dp_sgd": ("logistic", "central_gaussian", 1000, 1.0),
    "cldp_sgd": ("quadratic", "central_gaussian", 1000, 1.0),
    "dss_sgd": ("quadratic", "central_gaussian", 1000, 1.0),
    "pnsgd": ("logistic", "central_gaussian", 500, 1.0),
    "mirror_descent_l1": ("l1_least_squares", "central_gaussian", 1000, 1.0),
    "frank_wolfe_l1": ("l1_least_squares", "report_noisy_max", 2000, 1.0),
}
DECLARED = [(name, key) for name, cls in OPTIMIZERS.items() for key in OVERRIDES if key in cls.overrides]
UNDECLARED = [(name, key) for name, cls in OPTIMIZERS.items() for key in OVERRIDES if key not in cls.overrides]


def _override_tree(name: str, **optimizer) -> dict:
    """The config tree of an optimizer's combination in OVERRIDE_RUNS, with optimizer fields added."""
    problem, protocol, n_users, epsilon = OVERRIDE_RUNS[name]
    return {"n_users": n_users, "seeds": [0], "problem": {"name": problem, "dim": 3},
            "optimizer": {"name": name, **optimizer}, "execution": {"backend": "local"},
            "privacy": {"protocol": protocol, "accounting": "tight", "epsilon": epsilon, "delta": 1e-6}}


def _resolved(name: str, **optimizer) -> dict:
    """The resolved hyperparameters of an optimizer's combination, as planned."""
    return planning.plan_run(config.expand(_override_tree(name, **optimizer))[0]).job.optimizer.hyperparameters()


def _other_value(key: str, default):
    """A valid value of an override other than the resolved default: half of it (fewer rounds or
    users per round keep rounds × batch within n; η/2 keeps PNSGD's η ≤ 2/(β + ρ)), or 2 for 1."""
    if key == "step_size":
        return default / 2
    return default // 2 if default >= 2 else 2


def test_every_shipped_optimizer_has_a_run_for_the_override_checks():
    """A new optimizer must get a combination here, so its declaration is checked too."""
    assert set(OVERRIDE_RUNS) == set(OPTIMIZERS)


@pytest.mark.parametrize("name,key", UNDECLARED, ids=[f"{name}-{key}" for name, key in UNDECLARED])
def test_an_override_the_optimizer_does_not_read_is_one_config_error_line(tmp_path, capsys, name, key):
    """optimizer.<key> set for an optimizer that does not declare it: refused in one line, exit 2,
    nothing written (it was accepted and ignored while the base class declared all three)."""
    tree = _override_tree(name, **{key: 0.01 if key == "step_size" else 2})
    tree["tracking"] = {"mlflow_uri": f"sqlite:///{tmp_path}/m.db"}
    path, out = tmp_path / "c.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(tree))
    assert cli.main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"config error: optimizer.{key} = ") and err.count("\n") == 1, err
    assert f"does not apply to optimizer {name}" in err, err
    assert not out.exists() and not (tmp_path / "m.db").exists()


@pytest.mark.parametrize("name,key", DECLARED, ids=[f"{name}-{key}" for name, key in DECLARED])
def test_an_override_the_optimizer_declares_is_the_value_it_resolves(name, key):
    """optimizer.<key> declared: the resolved hyperparameter is the value set, not the theorem's
    (the declaration is read, not just accepted)."""
    default = _resolved(name)[key]
    value = _other_value(key, default)
    assert value != default
    assert _resolved(name, **{key: value})[key] == value
