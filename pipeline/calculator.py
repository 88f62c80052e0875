"""`python -m pipeline epsilon MECHANISM ...`: the privacy accountants as a calculator.

Each mechanism is a thin wrapper over an accountant of `pipeline.accounting` (or
dp_accounting): the options are checked first (bad input raises `ConfigError` naming the
option, which the CLI prints as one line and exits 2), then the accountant runs and its
result is printed as one JSON object with at least `epsilon`, `delta`, `method` and
`mechanism`.

Mechanisms:
  shuffle-ldp         n shuffled ε0-LDP reports per round (FMT22 / Girgis RDP).
  subsampled-shuffle  k of n users sampled per round, then shuffled (Girgis Thm 5.4.3).
  shuffle-gaussian    shuffle Gaussian mechanism and its variants (seed 004 Thms 1-3).
  cjmp-vec            P_vec noise: tight calibration vs the paper's vs a Gaussian.
  gaussian            the (optionally Poisson-subsampled) Gaussian mechanism, PLD and RDP.
  pnsgd               shuffled / randomly-stopped / per-index PNSGD (seed 002).
"""
from __future__ import annotations

import argparse
import json
import math
import re

from pipeline.errors import ConfigError

MECHANISMS = ("shuffle-ldp", "subsampled-shuffle", "shuffle-gaussian", "cjmp-vec", "gaussian", "pnsgd")
# Bounds on sizes: beyond them the accountants overflow int64 or float64, or allocate without end.
MAX_N = 10**12
MAX_ROUNDS = 10**7
MAX_D = 10**6
SIZE_REASON = "larger sizes overflow the accountants' integer and floating-point arithmetic"
ROUNDS_REASON = "composing more rounds exhausts memory or time; the pipeline plans at most 10⁷ rounds"

# Accountant parameter names (as their ValueErrors spell them) → the calculator's options.
_OPTION_OF = {
    "n": "--n", "k": "--k", "eps0": "--eps0", "delta": "--delta", "rounds": "--rounds", "bound": "--bound",
    "sigma": "--sigma", "m": "--m", "gamma": "--gamma", "slack": "--slack", "lambda_max": "--lambda-max",
    "variant": "--variant", "lipschitz": "--lipschitz", "step_size": "--step-size", "diameter": "--diameter",
    "smoothness": "--smoothness", "strong_convexity": "--strong-convexity", "contraction": "--step-size",
    "noise": "--noise", "schedule": "--schedule", "c1": "--c1", "c2": "--c2", "alpha": "--alpha",
    "epochs": "--epochs", "composition": "--composition", "index": "--index", "epsilon": "--epsilon",
}


# ---------------------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------------------

def _common(parser: argparse.ArgumentParser, rounds: bool = True) -> None:
    parser.add_argument("--delta", required=True, metavar="D", help="target δ, 0 < δ < 1")
    if rounds:
        parser.add_argument("--rounds", metavar="T", help="rounds composed, an integer ≥ 1 (default 1)")


def add_parser(commands) -> None:
    """Add the `epsilon` command, with one sub-command per mechanism, to the CLI's subparsers."""
    epsilon = commands.add_parser(
        "epsilon", help="compute (ε, δ) of a mechanism with the accountants",
        description="Compute (ε, δ) of a mechanism with the project's accountants; prints one JSON object. "
                    "Integers may be written 1e6.")
    mechanisms = epsilon.add_subparsers(dest="mechanism", required=True, metavar="MECHANISM")

    p = mechanisms.add_parser("shuffle-ldp", help="n shuffled ε0-LDP reports per round (FMT22, Girgis RDP)",
                              description="T rounds, each shuffling n ε0-LDP reports "
                                          "(pipeline.accounting.shuffle_ldp.shuffle_ldp_epsilon).")
    p.add_argument("--n", required=True, metavar="N", help="reports per round")
    p.add_argument("--eps0", required=True, metavar="E0", help="the local randomizer's ε0 > 0")
    p.add_argument("--bound", metavar="{fmt,fmt-closed,rdp,best}",
                   help="fmt: FMT22 PLD; fmt-closed: FMT22 Thm 3.1 + KOV15; rdp: Girgis ch. 5; "
                        "best (default): the smallest that applies")
    _common(p)

    p = mechanisms.add_parser("subsampled-shuffle", help="k of n users sampled per round, then shuffled",
                              description="T rounds, each sampling k of n users without replacement and "
                                          "shuffling their ε0-LDP reports (Girgis Thm 5.4.3).")
    p.add_argument("--n", required=True, metavar="N", help="population size, ≥ 2")
    p.add_argument("--k", required=True, metavar="K", help="users sampled per round, 2 ≤ k ≤ n")
    p.add_argument("--eps0", required=True, metavar="E0", help="the local randomizer's ε0 > 0")
    _common(p)

    p = mechanisms.add_parser("shuffle-gaussian", help="shuffle Gaussian mechanism (seed 004 Thms 1-3)",
                              description="T identical shuffle Gaussian rounds composed in RDP (seed 004). "
                                          "sigma is the noise multiplier std/Δ₂.")
    p.add_argument("--n", required=True, metavar="N", help="users (population size)")
    p.add_argument("--sigma", required=True, metavar="S", help="noise multiplier σ = std/Δ₂ > 0")
    p.add_argument("--lambda-max", metavar="L", help="largest Rényi order scanned (default 256)")
    p.add_argument("--variant", metavar="{shuffle,subsampled,checkin}",
                   help="shuffle (default, Thm 1), subsampled (Thm 2, needs --m), checkin (Thm 3, needs --gamma)")
    p.add_argument("--m", metavar="M", help="subsample size, 1 ≤ m ≤ n (variant subsampled)")
    p.add_argument("--gamma", metavar="G", help="check-in probability in (0, 1] (variant checkin)")
    p.add_argument("--slack", metavar="S", help="Chernoff slack in (0, 1) (variant checkin, default 0.5)")
    _common(p)

    p = mechanisms.add_parser("cjmp-vec", help="P_vec noise: tight calibration vs paper vs Gaussian",
                              description="Noise of P_vec (seed 000) at a target (ε, δ) over T calls on the "
                                          "same users: the tight calibration, the paper's parameters and the "
                                          "analytic Gaussian, as per-coordinate variances with Δ₂ = 1.")
    p.add_argument("--n", required=True, metavar="N", help="users per call")
    p.add_argument("--d", required=True, metavar="D", help="dimension")
    p.add_argument("--epsilon", required=True, metavar="E", help="target ε > 0 of all T calls together")
    _common(p)

    p = mechanisms.add_parser("gaussian", help="Gaussian mechanism, optionally Poisson-subsampled (PLD and RDP)",
                              description="T-fold composition of the Gaussian mechanism with noise multiplier "
                                          "σ (std / L2 sensitivity), Poisson-subsampled at rate q if given; "
                                          "dp_accounting's PLD and RDP accountants (add/remove-one).")
    p.add_argument("--sigma", required=True, metavar="S", help="noise multiplier σ > 0")
    p.add_argument("--q", metavar="Q", help="Poisson sampling probability in (0, 1]")
    _common(p)

    p = mechanisms.add_parser("pnsgd", help="projected noisy SGD, final iterate only (seed 002)",
                              description="Shuffled / randomly-stopped / per-index PNSGD with batch size 1 "
                                          "(pipeline.accounting.pnsgd.pnsgd_epsilon). The guarantee covers "
                                          "releasing only the final iterate of each epoch.")
    p.add_argument("--n", required=True, metavar="N", help="dataset size = steps per epoch")
    p.add_argument("--sigma", metavar="S",
                   help="noise level (Gaussian std or Laplace scale); required for --schedule fixed only")
    p.add_argument("--lipschitz", required=True, metavar="L", help="Lipschitz constant L > 0 of the loss")
    p.add_argument("--step-size", required=True, metavar="ETA", help="step size η > 0, η ≤ 2/(β+ρ)")
    p.add_argument("--diameter", required=True, metavar="D", help="diameter of the constraint set (b − a for Laplace)")
    p.add_argument("--smoothness", required=True, metavar="B", help="smoothness β > 0")
    p.add_argument("--strong-convexity", metavar="R", help="strong convexity ρ in [0, β] (default 0)")
    p.add_argument("--noise", metavar="{gaussian,laplace}", help="default gaussian")
    p.add_argument("--variant", metavar="{shuffled,random_stop,per_index}", help="default shuffled")
    p.add_argument("--schedule", metavar="{fixed,calibrated,online}", help="default fixed")
    p.add_argument("--index", metavar="I", help="position of the differing entry (per_index; default n)")
    p.add_argument("--c1", metavar="C1", help="schedule constant (calibrated, online)")
    p.add_argument("--c2", metavar="C2", help="schedule constant (calibrated, online)")
    p.add_argument("--alpha", metavar="A", help="online decay exponent > 1 (online)")
    p.add_argument("--epochs", metavar="E", help="passes, each releasing its last iterate (default 1)")
    p.add_argument("--composition", metavar="{pld,basic}", help="how epochs compose (default pld)")
    _common(p, rounds=False)


# ---------------------------------------------------------------------------------------
# Validation: every option is read through these, so bad input fails before any work
# ---------------------------------------------------------------------------------------

def _dest(option: str) -> str:
    return option.lstrip("-").replace("-", "_")


def _raw(args, option: str):
    return getattr(args, _dest(option), None)


def _number(option: str, raw):
    """A finite float from a string (or number), else ConfigError."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ConfigError(option, raw, "must be a number") from None
    if not math.isfinite(value):
        raise ConfigError(option, value, "must be a finite number")
    return value


def _shown(raw):
    """The value to print in an error: the number when it parses, else the text."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return raw
    return int(value) if value.is_integer() and abs(value) < 2**53 and "." not in str(raw) else value


def _int(args, option: str, minimum: int, maximum: int | None = None, default=None, why: str = ""):
    """An integer option ≥ minimum (≤ maximum); integral floats such as 1e6 are accepted.

    Args:
      why: the reason for the bounds, shown after the rule.
    """
    raw = _raw(args, option)
    if raw is None:
        if default is None:
            raise ConfigError(option, None, "is required")
        return default
    rule = f"must be an integer ≥ {minimum}" if maximum is None else f"must be an integer in [{minimum}, {maximum}]"
    rule += f" ({why})" if why else ""
    try:
        value = int(raw)
    except (TypeError, ValueError):
        number = _number(option, raw) if _is_number(raw) else None
        if number is None or not number.is_integer():
            raise ConfigError(option, _shown(raw), rule) from None
        value = int(number)
    if value < minimum or (maximum is not None and value > maximum):
        raise ConfigError(option, _shown(raw) if isinstance(raw, str) else value, rule)
    return value


def _is_number(raw) -> bool:
    try:
        float(raw)
    except (TypeError, ValueError):
        return False
    return True


def _real(args, option: str, low: float | None = None, high: float | None = None, *, low_open=True,
          high_open=True, default=None, required=True):
    """A finite real option in the interval given by low/high (open or closed ends)."""
    raw = _raw(args, option)
    if raw is None:
        if default is not None or not required:
            return default
        raise ConfigError(option, None, "is required")
    if not _is_number(raw):
        raise ConfigError(option, raw, "must be a number")
    value = float(raw)
    bad_low = low is not None and (value <= low if low_open else value < low)
    bad_high = high is not None and (value >= high if high_open else value > high)
    if not math.isfinite(value) or bad_low or bad_high:
        if low is not None and high is not None:
            rule = f"must lie in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        elif low is not None:
            rule = f"must be a finite number {'>' if low_open else '≥'} {low:g}"
        else:
            rule = f"must be a finite number {'<' if high_open else '≤'} {high:g}"
        raise ConfigError(option, value, rule)
    return value


def _choice(args, option: str, options, default: str) -> str:
    raw = _raw(args, option)
    if raw is None:
        return default
    if raw not in options:
        raise ConfigError(option, raw, f"must be one of {', '.join(options)}")
    return raw


def _delta(args) -> float:
    return _real(args, "--delta", 0.0, 1.0)


def _rounds(args) -> int:
    return _int(args, "--rounds", 1, MAX_ROUNDS, default=1, why=ROUNDS_REASON)


def _n(args, minimum: int) -> int:
    """--n, the users: at most MAX_N."""
    return _int(args, "--n", minimum, MAX_N, why=SIZE_REASON)


def _absent(args, option: str, why: str) -> None:
    if _raw(args, option) is not None:
        raise ConfigError(option, _shown(_raw(args, option)), why)


def _accountant_error(error: ValueError, values: dict, fallback: str) -> ConfigError:
    """An accountant's own refusal as a ConfigError naming the calculator's option."""
    text = str(error)
    match = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", text)
    name = match.group(1) if match else ""
    option = _OPTION_OF.get(name, fallback)
    key = _dest(option)
    return ConfigError(option, values.get(key), text)


# ---------------------------------------------------------------------------------------
# Mechanisms: check everything, then call the accountant
# ---------------------------------------------------------------------------------------

def _shuffle_ldp(args) -> dict:
    from pipeline.accounting import shuffle_ldp

    n, eps0 = _n(args, 1), _real(args, "--eps0", 0.0)
    bound = _choice(args, "--bound", shuffle_ldp.BOUNDS, "best")
    delta, rounds = _delta(args), _rounds(args)
    values = {"n": n, "eps0": eps0, "bound": bound, "delta": delta, "rounds": rounds}
    try:
        return shuffle_ldp.shuffle_ldp_epsilon(n, eps0, delta, rounds, bound)
    except ValueError as error:
        raise _accountant_error(error, values, "--eps0") from None


def _subsampled_shuffle(args) -> dict:
    from pipeline.accounting import shuffle_ldp

    n, k = _n(args, 2), _int(args, "--k", 2)
    if k > n:
        raise ConfigError("--k", k, f"must satisfy 2 ≤ k ≤ n = {n}")
    eps0, delta, rounds = _real(args, "--eps0", 0.0), _delta(args), _rounds(args)
    values = {"n": n, "k": k, "eps0": eps0, "delta": delta, "rounds": rounds}
    try:
        return shuffle_ldp.subsampled_shuffle_epsilon(n, k, eps0, delta, rounds)
    except ValueError as error:
        raise _accountant_error(error, values, "--eps0") from None


def _shuffle_gaussian(args) -> dict:
    from pipeline.accounting import shuffle_gaussian

    n, sigma = _n(args, 1), _real(args, "--sigma", 0.0)
    lambda_max = _int(args, "--lambda-max", 2, shuffle_gaussian.MAX_LAMBDA, default=256)
    variant = _choice(args, "--variant", shuffle_gaussian.VARIANTS, "shuffle")
    m = gamma = slack = None
    if variant == "subsampled":
        m = _int(args, "--m", 1, n)
    else:
        _absent(args, "--m", "only applies to --variant subsampled")
    if variant == "checkin":
        gamma = _real(args, "--gamma", 0.0, 1.0, high_open=False)
        slack = _real(args, "--slack", 0.0, 1.0, required=False)
    else:
        _absent(args, "--gamma", "only applies to --variant checkin")
        _absent(args, "--slack", "only applies to --variant checkin")
    delta, rounds = _delta(args), _rounds(args)
    values = {"n": n, "sigma": sigma, "lambda_max": lambda_max, "variant": variant, "m": m, "gamma": gamma,
              "slack": slack, "delta": delta, "rounds": rounds}
    try:
        return shuffle_gaussian.shuffle_gaussian_epsilon(n, sigma, delta, rounds, lambda_max, variant,
                                                         m=m, gamma=gamma, slack=slack)
    except ValueError as error:
        raise _accountant_error(error, values, "--sigma") from None


def gaussian_sigma_for_rounds(epsilon: float, delta: float, sensitivity: float, rounds: int) -> float:
    """σ of Gaussian noise whose `rounds`-fold composition is exactly (ε, δ)-DP at this sensitivity.

    T adaptive Gaussian mechanisms with sensitivity Δ and std σ have a Gaussian privacy loss
    whose mean and variance add, i.e. they are exactly the Gaussian mechanism with sensitivity
    √T·Δ (Dong, Roth, Su 2019, μ-GDP composition: μ = √T·Δ/σ). So the analytic Gaussian
    (Balle & Wang 2018, Thm 8) at sensitivity √T·Δ gives the least σ; T = 1 is that theorem itself.
    """
    from pipeline.accounting import pvec_tight

    return pvec_tight.analytic_gaussian_sigma(float(epsilon), float(delta), float(sensitivity) * math.sqrt(rounds))


def _noise_variance(g: int, users: int, b_noise: int, p: float) -> float:
    """Per-coordinate variance of P_vec's binomial noise in output units (Δ₂ = 1)."""
    return (2.0 / g) ** 2 * users * b_noise * p * (1.0 - p)


def _cjmp_vec(args) -> dict:
    from pipeline.accounting import paper, pvec_tight
    from pipeline.protocols import build_protocol
    from pipeline.protocols.base import GRADIENTS, RoundPlan

    n, d = _n(args, 1), _int(args, "--d", 1, MAX_D, why=SIZE_REASON)
    epsilon, delta, rounds = _real(args, "--epsilon", 0.0), _delta(args), _rounds(args)
    try:
        tight = pvec_tight.calibrate_pvec(n, d, epsilon, delta, rounds)
    except ValueError as error:
        raise ConfigError("--epsilon", epsilon, f"no tight P_vec calibration at --delta {delta:g}: {error}") from None
    tight_variance = _noise_variance(tight.g, n, tight.b_noise, tight.p)

    sigma = gaussian_sigma_for_rounds(epsilon, delta, 2.0, rounds)
    gaussian = {
        "sigma": sigma, "variance": sigma**2, "sensitivity": 2.0,
        "method": ("analytic Gaussian mechanism (Balle & Wang 2018 Thm 8), L2 sensitivity 2Δ₂ = 2"
                   + ("" if rounds == 1 else
                      f"; {rounds} calls composed exactly: T Gaussians of sensitivity 2 = one of sensitivity "
                      f"2√T (Gaussian privacy loss; Dong, Roth, Su 2019 GDP composition), so σ is Thm 8's at "
                      f"sensitivity 2√{rounds}")),
    }

    if rounds == 1:
        paper_target, paper_method = (epsilon, delta), "seed 000 Theorem 3.2 / A.6 (plan_pvec), one call at (ε, δ)"
    else:
        paper_target = paper.full_gd_round_budget(epsilon, delta, rounds)
        paper_method = (f"seed 000 Lemma B.6 / Thm 4.9 split: per call (ε0, δ0) = (ε/(2√(2T ln(1/δ))), δ/(T+1)), "
                        f"T = {rounds} calls by advanced composition; each call by Theorem 3.2 (plan_pvec) at (ε0, δ0)")
    paper_out: dict = {"epsilon_per_call": paper_target[0], "delta_per_call": paper_target[1], "method": paper_method}
    try:
        # The paper-mode P_vec call through the protocol's contract (Theorem 3.2's plan at that budget).
        call = RoundPlan(0, 0, n, float(paper_target[0]), float(paper_target[1]), 1.0, GRADIENTS)
        params = build_protocol("cjmp_vec", "paper").plan(call, d)
    except ValueError as error:
        paper_out["error"] = str(error)
    else:
        paper_variance = _noise_variance(params.g, n, params.b_noise, params.p)
        paper_out.update(g=params.g, b_noise=params.b_noise, p=params.p, epsilon_hat=params.epsilon_hat,
                         delta_hat=params.delta_hat, variance=paper_variance,
                         variance_ratio_to_gaussian=paper_variance / sigma**2)

    return {
        "epsilon": tight.epsilon,
        "delta": tight.delta,
        "method": (f"tight P_vec calibration (pipeline.accounting.pvec_tight: proven δ-approximate RDP bound of "
                   f"the whole vector, {rounds} call(s) on the same users composed by adding RDP curves, "
                   f"converted at order {tight.order:g} by CKS20 Prop. 12)"),
        "n": n, "d": d, "rounds": rounds, "target_epsilon": epsilon, "target_delta": delta,
        "g": tight.g, "b_noise": tight.b_noise, "p": tight.p, "order": tight.order,
        "variance": tight_variance,
        "variance_ratio_to_gaussian": tight_variance / sigma**2,
        "variance_units": "per coordinate, in output units with Δ₂ = 1: (2/g)²·n·b_noise·p(1−p); Gaussian: σ²",
        "paper": paper_out,
        "gaussian": gaussian,
    }


def _gaussian(args) -> dict:
    import dp_accounting
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    sigma = _real(args, "--sigma", 0.0)
    q = _real(args, "--q", 0.0, 1.0, high_open=False, required=False)
    delta, rounds = _delta(args), _rounds(args)
    event = dp_accounting.GaussianDpEvent(sigma)
    if q is not None:
        event = dp_accounting.PoissonSampledDpEvent(q, event)
    event = dp_accounting.SelfComposedDpEvent(event, rounds)
    pld = PLDAccountant()
    pld.compose(event)
    pld_epsilon = float(pld.get_epsilon(delta))
    rdp = RdpAccountant()
    rdp.compose(event)
    rdp_epsilon, rdp_order = rdp.get_epsilon_and_optimal_order(delta)
    rdp_epsilon = float(rdp_epsilon)
    which = "pld" if pld_epsilon <= rdp_epsilon else "rdp"
    mechanism = f"Gaussian mechanism, noise multiplier σ = {sigma:g}" + (
        "" if q is None else f", Poisson-subsampled at q = {q:g}")
    accountant = ("dp_accounting PLDAccountant (pessimistic PLD, discretization 1e-4, composition by PLD "
                  "self-convolution)" if which == "pld" else
                  "dp_accounting RdpAccountant (RDP curves added, converted at the best order)")
    return {
        "epsilon": min(pld_epsilon, rdp_epsilon),
        "delta": delta,
        "method": f"{mechanism}; {rounds} round(s) (SelfComposedDpEvent); smaller of PLD and RDP: {accountant}",
        "accountant": which,
        "pld_epsilon": pld_epsilon,
        "rdp_epsilon": rdp_epsilon,
        "rdp_order": float(rdp_order),
        "sigma": sigma,
        "q": q,
        "rounds": rounds,
        "neighboring_relation": "add or remove one",
        "pld_value_discretization_interval": 1e-4,
    }


def _pnsgd(args) -> dict:
    from pipeline.accounting import pnsgd

    n = _n(args, 1)
    lipschitz = _real(args, "--lipschitz", 0.0)
    step_size = _real(args, "--step-size", 0.0)
    diameter = _real(args, "--diameter", 0.0)
    smoothness = _real(args, "--smoothness", 0.0)
    strong_convexity = _real(args, "--strong-convexity", 0.0, low_open=False, default=0.0)
    if strong_convexity > smoothness:
        raise ConfigError("--strong-convexity", strong_convexity, f"must be ≤ --smoothness = {smoothness:g}")
    if step_size > 2.0 / (smoothness + strong_convexity):
        raise ConfigError("--step-size", step_size,
                          f"must be ≤ 2/(β+ρ) = {2.0 / (smoothness + strong_convexity):g} for the gradient map to contract")
    noise = _choice(args, "--noise", pnsgd.NOISES, "gaussian")
    variant = _choice(args, "--variant", pnsgd.VARIANTS, "shuffled")
    schedule = _choice(args, "--schedule", pnsgd.SCHEDULES, "fixed")
    composition = _choice(args, "--composition", pnsgd.COMPOSITIONS, "pld")
    epochs = _int(args, "--epochs", 1, MAX_ROUNDS, default=1, why=ROUNDS_REASON)
    index = None
    if _raw(args, "--index") is not None:
        if variant == "shuffled":
            raise ConfigError("--index", _shown(_raw(args, "--index")),
                              "the shuffled bound (Thm 2) is uniform over entries; give no --index")
        index = _int(args, "--index", 1, n)
    sigma = c1 = c2 = alpha = None
    if schedule == "fixed":
        if _raw(args, "--sigma") is None:
            raise ConfigError("--sigma", None, "is required with --schedule fixed (the default)")
        sigma = _real(args, "--sigma", 0.0)
        for option in ("--c1", "--c2", "--alpha"):
            _absent(args, option, "only the calibrated and online schedules take --c1, --c2, --alpha")
    else:
        _absent(args, "--sigma", f"the {schedule} schedule sets the noise itself; give no --sigma")
        c1, c2 = _real(args, "--c1", 0.0), _real(args, "--c2", 0.0)
        if schedule == "online":
            if variant != "per_index":
                raise ConfigError("--variant", variant, "the online schedule (Thms 6, 7) needs --variant per_index")
            if epochs > 1:
                raise ConfigError("--epochs", epochs, "the online schedule is a single pass over a stream")
            alpha = _real(args, "--alpha", 1.0)
        else:
            _absent(args, "--alpha", "only the online schedule takes --alpha")
    delta = _delta(args)
    values = {"n": n, "sigma": sigma, "lipschitz": lipschitz, "step_size": step_size, "diameter": diameter,
              "smoothness": smoothness, "strong_convexity": strong_convexity, "noise": noise, "variant": variant,
              "schedule": schedule, "composition": composition, "epochs": epochs, "index": index, "c1": c1,
              "c2": c2, "alpha": alpha, "delta": delta}
    try:
        return pnsgd.pnsgd_epsilon(n, sigma, delta, lipschitz, step_size, diameter, smoothness,
                                   strong_convexity=strong_convexity, noise=noise, variant=variant,
                                   schedule=schedule, index=index, c1=c1, c2=c2, alpha=alpha, epochs=epochs,
                                   composition=composition)
    except ValueError as error:
        raise _accountant_error(error, values, "--delta") from None


_HANDLERS = {"shuffle-ldp": _shuffle_ldp, "subsampled-shuffle": _subsampled_shuffle,
             "shuffle-gaussian": _shuffle_gaussian, "cjmp-vec": _cjmp_vec, "gaussian": _gaussian, "pnsgd": _pnsgd}


def _plain(value):
    """numpy scalars and arrays as Python numbers and lists, recursively."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if hasattr(value, "tolist"):  # numpy scalar or array
        return _plain(value.tolist())
    return value


def compute(args: argparse.Namespace) -> dict:
    """The result of `epsilon MECHANISM ...` as a dict (options checked first).

    Raises:
      ConfigError: an option outside its range, named as on the command line,
        or an accountant that runs out of memory (MECHANISM).
    """
    try:
        result = _HANDLERS[args.mechanism](args)
    except MemoryError:  # within the bounds, an accountant can still outgrow this machine
        raise ConfigError("MECHANISM", args.mechanism, "the accountant needs more memory than this machine has "
                          "at these options: lower --rounds or --n") from None
    return _plain({"mechanism": args.mechanism, **result})


def run(args: argparse.Namespace) -> int:
    """Print the mechanism's (ε, δ) as one JSON object; 0 on success.

    Raises:
      ConfigError: bad input (the CLI prints it as one line and exits 2).
    """
    print(json.dumps(compute(args), indent=2, ensure_ascii=False))
    return 0
