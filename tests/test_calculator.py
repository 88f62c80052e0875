"""`python -m pipeline epsilon MECHANISM ...`: the printed numbers are the accountants', and
each mechanism is checked against one independent published or exact number."""
from __future__ import annotations

import json
import math

import dp_accounting
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from scipy import optimize, stats

from pipeline import cli
from pipeline.accounting import paper, pnsgd, pvec_tight, shuffle_gaussian, shuffle_ldp
from pipeline.protocols import cjmp


def calculate(capsys, *argv: str) -> dict:
    """Run the CLI, check it succeeded quietly, and parse its one JSON object."""
    assert cli.main(["epsilon", *argv]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    result = json.loads(out)
    assert {"epsilon", "delta", "method", "mechanism"} <= set(result)
    assert isinstance(result["method"], str) and result["method"]
    return result


def same(printed: dict, computed: dict) -> None:
    """Everything the accountant returned is printed unchanged (through JSON)."""
    assert {key: printed[key] for key in computed} == json.loads(json.dumps(computed))


def analytic_gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Exact ε of the Gaussian mechanism (Balle & Wang 2018, Thm 8), by root finding."""
    def excess(eps: float) -> float:
        a, b = sensitivity / (2 * sigma), eps * sigma / sensitivity
        return stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b) - delta
    return optimize.brentq(excess, 0.0, 100.0, xtol=1e-13)


# ---------------------------------------------------------------------------------------- mechanisms


def test_shuffle_ldp_rdp_reference_composition(capsys):
    # Integers written as 1e6 / 1e5 are accepted.
    result = calculate(capsys, "shuffle-ldp", "--n", "1e6", "--eps0", "0.5", "--bound", "rdp",
                       "--rounds", "1e5", "--delta", "1e-8")
    same(result, shuffle_ldp.shuffle_ldp_epsilon(10**6, 0.5, 1e-8, 10**5, "rdp"))
    assert result["mechanism"] == "shuffle-ldp"
    # Girgis ch. 5 reference (tests/test_shuffle_ldp_accounting.py): T = 1e5, n = 1e6, ε0 = 0.5, δ = 1e-8 → ≈ 1.64.
    assert result["epsilon"] == pytest.approx(1.64, abs=0.005)
    assert result["binding_bound"] == "Thm 5.3.1 (UB1)"


def test_shuffle_ldp_default_bound_is_best(capsys):
    result = calculate(capsys, "shuffle-ldp", "--n", "1000", "--eps0", "1", "--delta", "1e-6")
    assert result["bound"] == "best"
    same(result, shuffle_ldp.shuffle_ldp_epsilon(1000, 1.0, 1e-6, 1, "best"))
    # Never above ε0 by much, never below the exact shuffled-2RR lower bound.
    lower = shuffle_ldp.shuffle_ldp_lower_epsilon(1000, 1.0, 1e-6)["epsilon"]
    assert lower <= result["epsilon"] < 1.0


def test_subsampled_shuffle(capsys):
    result = calculate(capsys, "subsampled-shuffle", "--n", "1e5", "--k", "1000", "--eps0", "1",
                       "--rounds", "100", "--delta", "1e-6")
    same(result, shuffle_ldp.subsampled_shuffle_epsilon(10**5, 1000, 1.0, 1e-6, 100))
    assert result["epsilon"] < result["baseline"]["epsilon"]
    # With k = n nothing is subsampled: never worse than the plain shuffle's RDP bound.
    full = calculate(capsys, "subsampled-shuffle", "--n", "5000", "--k", "5000", "--eps0", "1", "--delta", "1e-6")
    plain = calculate(capsys, "shuffle-ldp", "--n", "5000", "--eps0", "1", "--bound", "rdp", "--delta", "1e-6")
    assert full["epsilon"] <= plain["epsilon"] * (1 + 1e-12)


def test_shuffle_gaussian_table1(capsys):
    n, sigma = 60000, 9.48  # seed 004 Table 1 (tests/test_shuffle_gaussian_accounting.py), δ = 1/n, λ ≤ 30
    result = calculate(capsys, "shuffle-gaussian", "--n", str(n), "--sigma", str(sigma), "--lambda-max", "30",
                       "--delta", repr(1 / n))
    same(result, shuffle_gaussian.shuffle_gaussian_epsilon(n, sigma, 1 / n, 1, 30))
    assert result["epsilon"] == pytest.approx(0.22820, abs=5e-6)  # Table 1, "Ours (RDP)"
    assert result["at_cap"] and result["order"] == 30


def test_shuffle_gaussian_subsampled_variant(capsys):
    result = calculate(capsys, "shuffle-gaussian", "--n", "1e4", "--sigma", "2", "--variant", "subsampled",
                       "--m", "100", "--rounds", "10", "--delta", "1e-5")
    same(result, shuffle_gaussian.shuffle_gaussian_epsilon(10**4, 2.0, 1e-5, 10, 256, "subsampled", m=100))


def test_cjmp_vec_tight_paper_and_gaussian(capsys):
    result = calculate(capsys, "cjmp-vec", "--n", "1000", "--d", "10", "--epsilon", "1", "--delta", "1e-6")
    tight = pvec_tight.calibrate_pvec(1000, 10, 1.0, 1e-6, 1)
    planned = cjmp.plan_pvec(1000, 10, 1.0, 1e-6, 1.0)
    sigma = pvec_tight.analytic_gaussian_sigma(1.0, 1e-6, 2.0)
    assert (result["epsilon"], result["delta"], result["g"], result["b_noise"], result["p"]) == (
        tight.epsilon, tight.delta, tight.g, tight.b_noise, tight.p)
    assert result["variance"] == pytest.approx((2 / tight.g) ** 2 * 1000 * tight.b_noise * tight.p * (1 - tight.p),
                                               rel=1e-12)
    assert (result["paper"]["g"], result["paper"]["b_noise"], result["paper"]["p"]) == (
        planned.g, planned.b_noise, planned.p)
    assert result["gaussian"]["variance"] == pytest.approx(sigma**2, rel=1e-12)
    assert result["epsilon"] <= 1.0
    assert result["variance_ratio_to_gaussian"] < 2.0
    assert result["paper"]["variance_ratio_to_gaussian"] > 1e4
    # The Gaussian's σ solves Balle–Wang's exact δ(ε) at sensitivity 2.
    assert analytic_gaussian_epsilon(sigma, 1e-6, 2.0) == pytest.approx(1.0, abs=1e-6)


def test_cjmp_vec_several_rounds(capsys):
    rounds = 4
    result = calculate(capsys, "cjmp-vec", "--n", "1000", "--d", "10", "--epsilon", "1", "--delta", "1e-6",
                       "--rounds", str(rounds))
    tight = pvec_tight.calibrate_pvec(1000, 10, 1.0, 1e-6, rounds)
    assert (result["epsilon"], result["g"], result["b_noise"], result["p"]) == (tight.epsilon, tight.g,
                                                                                tight.b_noise, tight.p)
    eps0, delta0 = paper.full_gd_round_budget(1.0, 1e-6, rounds)
    planned = cjmp.plan_pvec(1000, 10, eps0, delta0, 1.0)
    assert (result["paper"]["epsilon_per_call"], result["paper"]["b_noise"]) == (eps0, planned.b_noise)
    # The Gaussian σ per call: its T-fold composition, by dp_accounting's PLD, is (1, 1e-6)-DP up to discretization.
    sigma = result["gaussian"]["sigma"]
    accountant = PLDAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma / 2.0), rounds))
    assert accountant.get_epsilon(1e-6) == pytest.approx(1.0, abs=2e-3)
    assert result["variance_ratio_to_gaussian"] < 2.0
    assert result["paper"]["variance_ratio_to_gaussian"] > 1e4


def test_gaussian_single_round_is_the_analytic_gaussian(capsys):
    result = calculate(capsys, "gaussian", "--sigma", "1", "--delta", "1e-5")
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(1.0), 1)
    pld, rdp = PLDAccountant(), RdpAccountant()
    pld.compose(event)
    rdp.compose(event)
    assert result["pld_epsilon"] == pld.get_epsilon(1e-5)
    assert result["rdp_epsilon"] == pytest.approx(rdp.get_epsilon(1e-5), rel=1e-12)
    assert result["epsilon"] == min(result["pld_epsilon"], result["rdp_epsilon"])
    assert result["accountant"] == "pld" and "PLD" in result["method"]
    exact = analytic_gaussian_epsilon(1.0, 1e-5)  # Balle & Wang 2018, Thm 8
    assert exact <= result["epsilon"] <= exact * 1.01


def test_gaussian_rounds_compose_exactly(capsys):
    # Four Gaussians with σ = 2 are one with σ = 1.
    result = calculate(capsys, "gaussian", "--sigma", "2", "--rounds", "4", "--delta", "1e-5")
    exact = analytic_gaussian_epsilon(1.0, 1e-5)
    assert exact <= result["epsilon"] <= exact * 1.01


def test_gaussian_poisson_subsampled(capsys):
    result = calculate(capsys, "gaussian", "--sigma", "1", "--q", "0.01", "--rounds", "100", "--delta", "1e-5")
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 100)
    pld, rdp = PLDAccountant(), RdpAccountant()
    pld.compose(event)
    rdp.compose(event)
    assert result["pld_epsilon"] == pld.get_epsilon(1e-5)
    assert result["rdp_epsilon"] == pytest.approx(rdp.get_epsilon(1e-5), rel=1e-12)
    assert result["epsilon"] == min(result["pld_epsilon"], result["rdp_epsilon"]) < 1.0
    assert result["q"] == 0.01 and result["rounds"] == 100


def test_pnsgd_shuffled_test_vector(capsys):
    # Thm 2 with A = θ(2L/σ) = θ(2), 1 − B = 1 − θ(M·D/(ησ)) = 1 − θ(5) at n = 100 (notes: δ(1) = 0.21999…):
    # L = σ = D = 1, η = 0.2, β = 1, ρ = 0 (M = 1).
    def theta(r, eps):  # Gaussian hockey stick δ of N(r, 1) against N(0, 1)
        return stats.norm.cdf(r / 2 - eps / r) - math.exp(eps) * stats.norm.cdf(-r / 2 - eps / r)
    a, one_minus_b = float(theta(2.0, 1.0)), 1.0 - float(theta(5.0, 1.0))
    delta = a * (1 - (1 - one_minus_b) ** 100) / (100 * one_minus_b)
    assert delta == pytest.approx(0.2199984, abs=1e-7)
    result = calculate(capsys, "pnsgd", "--n", "100", "--sigma", "1", "--lipschitz", "1", "--step-size", "0.2",
                       "--diameter", "1", "--smoothness", "1", "--delta", repr(float(delta)))
    same(result, pnsgd.pnsgd_epsilon(100, 1.0, delta, 1.0, 0.2, 1.0, 1.0))
    assert result["epsilon"] == pytest.approx(1.0, abs=1e-6)


def test_pnsgd_calibrated_schedule_takes_no_sigma(capsys):
    result = calculate(capsys, "pnsgd", "--n", "1000", "--lipschitz", "10", "--step-size", "0.1", "--diameter", "1",
                       "--smoothness", "0.5", "--noise", "laplace", "--schedule", "calibrated", "--c1", "1e5",
                       "--c2", "2", "--delta", "1e-3")
    same(result, pnsgd.pnsgd_epsilon(1000, None, 1e-3, 10.0, 0.1, 1.0, 0.5, noise="laplace",
                                     schedule="calibrated", c1=1e5, c2=2.0))


# ---------------------------------------------------------------------------------------- bad input

CONFIG_ERRORS = [  # (argv, option named) — refused by the calculator: one line, exit 2
    (["shuffle-ldp", "--n", "100", "--eps0", "1", "--delta", "1"], "--delta"),
    (["shuffle-ldp", "--n", "100", "--eps0", "1", "--delta", "1.5"], "--delta"),
    (["gaussian", "--sigma", "-1", "--delta", "1e-5"], "--sigma"),
    (["gaussian", "--sigma", "abc", "--delta", "1e-5"], "--sigma"),
    (["shuffle-ldp", "--n", "100", "--eps0", "1", "--bound", "pld", "--delta", "1e-6"], "--bound"),
    (["subsampled-shuffle", "--n", "100", "--k", "101", "--eps0", "1", "--delta", "1e-6"], "--k"),
    (["gaussian", "--sigma", "1", "--rounds", "0", "--delta", "1e-5"], "--rounds"),
    (["shuffle-ldp", "--n", "10.5", "--eps0", "1", "--delta", "1e-6"], "--n"),
    (["shuffle-ldp", "--n", "1000", "--eps0", "5", "--bound", "fmt-closed", "--delta", "1e-6"], "--eps0"),
    (["gaussian", "--sigma", "1", "--q", "1.5", "--delta", "1e-5"], "--q"),
    (["shuffle-gaussian", "--n", "100", "--sigma", "1", "--m", "5", "--delta", "1e-5"], "--m"),
    (["shuffle-gaussian", "--n", "100", "--sigma", "1", "--variant", "subsampled", "--m", "500",
      "--delta", "1e-5"], "--m"),
    (["cjmp-vec", "--n", "1000", "--d", "0", "--epsilon", "1", "--delta", "1e-6"], "--d"),
    (["cjmp-vec", "--n", "1000", "--d", "10", "--epsilon", "-1", "--delta", "1e-6"], "--epsilon"),
    (["pnsgd", "--n", "100", "--sigma", "1", "--lipschitz", "1", "--step-size", "3", "--diameter", "1",
      "--smoothness", "1", "--delta", "1e-5"], "--step-size"),
    (["pnsgd", "--n", "100", "--lipschitz", "1", "--step-size", "0.2", "--diameter", "1", "--smoothness", "1",
      "--delta", "1e-5"], "--sigma"),
    (["pnsgd", "--n", "100", "--sigma", "1", "--lipschitz", "1", "--step-size", "0.2", "--diameter", "1",
      "--smoothness", "1", "--schedule", "calibrated", "--c1", "1", "--c2", "1", "--delta", "1e-5"], "--sigma"),
]

ARGPARSE_ERRORS = [  # (argv, text in argparse's last line) — refused by argparse: SystemExit(2)
    (["shuffle-ldp", "--n", "100", "--eps0", "1"], "--delta"),
    (["gaussian", "--sigma", "1"], "--delta"),
    (["laplace", "--sigma", "1", "--delta", "1e-5"], "laplace"),
    ([], "MECHANISM"),
]


@pytest.mark.parametrize("argv, option", CONFIG_ERRORS, ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_bad_input_is_one_line_naming_the_option(capsys, argv, option):
    assert cli.main(["epsilon", *argv]) == cli.EXIT_BAD_INPUT == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and f"{option} = " in lines[0]


@pytest.mark.parametrize("argv, text", ARGPARSE_ERRORS, ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_argparse_refusals_exit_2(capsys, argv, text):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["epsilon", *argv])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert text in err.strip().splitlines()[-1]
