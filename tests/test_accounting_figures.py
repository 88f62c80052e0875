"""experiments/accounting_figures.py --quick: every file is written, and the reproduced numbers
match the published ones (seed 004 Table 1), the notes' recomputed ones, and closed forms
computed here independently of the accountants."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "accounting_figures.py"


@pytest.fixture(scope="module")
def run(background):
    """The script, and its `--quick` run's folder and summary table (run from the start of the
    test run, in the background: tests/conftest.py)."""
    spec = importlib.util.spec_from_file_location("accounting_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = background("accounting_figures").out
    return module, out, pd.read_csv(out / "summary.csv")


def _csv(out: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(out / f"{name}.csv")


def test_every_csv_and_png_is_written(run):
    module, out, summary = run
    assert len(module.FIGURES) == 5
    for name in module.FIGURES:
        for suffix in (".csv", ".png"):
            path = out / f"{name}{suffix}"
            assert path.is_file() and path.stat().st_size > 0, path
        assert len(_csv(out, name)) > 0
    assert (out / "summary.csv").stat().st_size > 0
    assert list(summary.columns) == ["name", "reproduced", "published", "file"]
    assert set(summary.file) <= {f"{name}.csv" for name in module.FIGURES}


def test_seed004_table1_matches_the_published_row(run):
    _, out, _ = run
    df = _csv(out, "seed004_table1")
    ours = df[(df.panel == "table1") & df.accountant.str.startswith("shuffle")].sort_values("rounds")
    assert list(ours.rounds) == list(range(1, 8))
    # Printed with 5 decimals: match to half a unit of the last digit.
    assert np.all(np.abs(ours.epsilon - ours.published) <= 5e-6 + 1e-12)
    assert ours.epsilon.iloc[0] == pytest.approx(0.2282, abs=5e-5)
    # Independent: the λ = 30 conversion term (notes §4.1) plus ~2.8e-6 of RDP per round.
    term = (math.log(60000) + 29 * math.log(29 / 30) - math.log(30)) / 29
    assert np.all(ours.epsilon > term) and np.all(ours.epsilon - term < 3e-6 * ours.rounds)
    assert ours.at_cap.all()
    # Fig. 1(a): shuffling beats the no-shuffle Gaussian at every T.
    fig = df[df.panel == "fig1a"].pivot(index="rounds", columns="accountant", values="epsilon")
    assert np.all(fig["shuffle RDP (Thm 1), λ≤30"] < fig["no shuffle (Cor. 1 λ/(2σ²)), λ≤30"])


def test_seed002_delta_decreases_to_the_limit(run):
    _, out, _ = run
    df = _csv(out, "seed002_delta_vs_n")
    # Independent closed forms of Thms 4/5's limits (ε = 1, C1 = 1e5).
    k = 1e5 * math.exp(0.5)
    limits = {"laplace": -math.expm1(-k) / k, "gaussian": -math.expm1(-2 * k) / (2 * k)}
    for noise, limit in limits.items():
        sub = df[(df.figure == "shuffled") & (df.noise == noise) & (df.step_size == 0.1)].sort_values("n")
        assert sub.delta_limit.iloc[0] == pytest.approx(limit, rel=1e-12)
        assert np.all(np.diff(sub.delta) < 0)  # decreasing in n ...
        assert np.all(sub.delta > limit)  # ... from above ...
        assert sub.delta.iloc[-1] / limit < (1.001 if noise == "laplace" else 1.03)  # ... to the limit
    online = df[df.figure == "online"]
    for _, group in online.groupby("noise"):
        group = group.sort_values("n")
        assert np.all(np.diff(group.delta) < 0)
        assert group.delta.iloc[-1] == pytest.approx(group.delta_limit.iloc[0], rel=0.02)
        assert np.all(group.delta > group.delta_limit_lower)
    # A notes §4.2 value at a grid point (printed to 5 significant digits).
    laplace = df[(df.figure == "shuffled") & (df.noise == "laplace") & (df.n == 10**6)]
    assert laplace.delta.iloc[0] == pytest.approx(7.1950e-6, abs=5e-11)


def test_seed001_composition_reference_values(run):
    _, out, _ = run
    df = _csv(out, "seed001_composition")
    shuffle = df[df.panel == "shuffle"]

    def eps(eps0, rounds, accountant):
        return shuffle[(shuffle.eps0 == eps0) & (shuffle.rounds == rounds)
                       & (shuffle.accountant == accountant)].epsilon.iloc[0]

    # Notes seed-001 §3.10: T = 1e5, n = 1e6, ε0 = 0.5, δ = 1e-8.
    assert eps(0.5, 10**5, "Girgis RDP (UB1 route), composed") == pytest.approx(1.64, abs=0.005)
    assert eps(0.5, 10**5, "FMT22 closed form per round + DRV10") == pytest.approx(47.7, abs=0.1)
    # One round of the closed form is the formula itself (FMT22 Thm 3.1, recomputed here).
    for eps0 in (0.5, 2.0):
        e = math.exp(eps0)
        closed = math.log1p(math.tanh(eps0 / 2) * (8 * math.sqrt(e * math.log(4 / 1e-8) / 1e6) + 8 * e / 1e6))
        assert eps(eps0, 1, "FMT22 closed form per round + KOV15") == pytest.approx(closed, rel=1e-12)
        # Optimal composition never loses to DRV; the numerical bound never loses to the closed form.
        for rounds in shuffle.rounds.unique():
            assert eps(eps0, rounds, "FMT22 closed form per round + KOV15") \
                <= eps(eps0, rounds, "FMT22 closed form per round + DRV10") + 1e-9
            assert eps(eps0, rounds, "FMT22 numerical per round + KOV15") \
                <= eps(eps0, rounds, "FMT22 closed form per round + KOV15") + 1e-9
    sub = df[df.panel == "subsampled"]
    assert set(sub.gamma.round(6)) == {0.001}
    thm = sub[sub.accountant == "Thm 5.4.1 (subsampled shuffle RDP)"]
    assert np.all(np.diff(thm.sort_values("rounds").epsilon) > 0)


def test_seed000_pvec_variance_ratios_and_pgd_budget(run):
    _, out, _ = run
    df = _csv(out, "seed000_pvec_noise")
    tight, paper = df[df.calibration == "tight"], df[df.calibration == "paper"]
    assert len(tight) == len(paper) >= 3
    assert np.all(tight.variance_ratio < 2.0) and np.all(tight.variance_ratio >= 1.0)
    assert np.all(paper.variance_ratio > 1e4)
    assert np.all(tight.epsilon_tight_accounting <= 1.0) and np.all(tight.epsilon_tight_accounting >= 0.98)
    assert np.all(paper.epsilon_paper_analysis <= 1.0)
    # The analytic Gaussian (Balle & Wang 2018, Thm 8) at σ² = gaussian_variance, sensitivity 2, meets δ.
    sigma, eps, delta = math.sqrt(df.gaussian_variance.iloc[0]), 1.0, 1e-6
    a, b = 2.0 / (2 * sigma), eps * sigma / 2.0
    assert stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b) == pytest.approx(delta, rel=1e-6)

    pgd = _csv(out, "seed000_pgd_budget")
    for row in pgd.itertuples():
        # Lemma B.6 recomputed: ε0 = ε/(2√(2T ln(1/δ))), DRV with slack δ/(T+1).
        t = row.rounds
        eps0 = 1.0 / (2 * math.sqrt(2 * t * math.log(1e6)))
        total = math.sqrt(2 * t * math.log((t + 1) / 1e-6)) * eps0 + t * eps0 * math.expm1(eps0)
        assert row.epsilon_paper_composed == pytest.approx(total, rel=1e-9)
        assert 0.55 <= row.epsilon_paper_composed <= 0.75 and row.unspent_epsilon > 0.25
        assert row.delta_paper_composed <= 1e-6
        assert row.epsilon_tight_accounting_of_paper_noise < row.epsilon_paper_composed
