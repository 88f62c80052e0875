"""experiments/randomizer_figures.py --quick: files written; Laplace's MSE is the closed
form 2/ε0²; the exact MSE matches Monte Carlo; the randomizer's MSE falls with ε0 and
with more bit planes; the shuffled scheme's ledger meets each ε."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "randomizer_figures.py"


@pytest.fixture(scope="module")
def run(background):
    """The script, and its `--quick` run's folder and summary table (run from the start of the
    test run, in the background: tests/conftest.py)."""
    spec = importlib.util.spec_from_file_location("randomizer_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = background("randomizer_figures").out
    return module, out, pd.read_csv(out / "summary.csv")


def test_files_are_written_and_the_monte_carlo_check_holds(run):
    module, out, summary = run
    for name in module.FIGURES:
        for suffix in (".csv", ".png"):
            assert (out / f"{name}{suffix}").stat().st_size > 0
    check = summary[summary["name"].str.contains("Monte Carlo")]["reproduced"].iloc[0]
    assert check < 5  # |measured − exact| in standard errors


def test_fig32a_curves(run):
    _, out, _ = run
    table = pd.read_csv(out / "seed001_fig32a.csv")
    np.testing.assert_allclose(table["laplace_mse"], 2.0 / table["epsilon0"] ** 2, rtol=1e-12)
    for _, group in table.groupby("levels"):
        assert np.all(np.diff(group.sort_values("epsilon0")["mse"]) < 0)
    at_large = table[table["epsilon0"] == table["epsilon0"].max()].set_index("levels")["mse"]
    assert at_large[1] > at_large[2] > at_large[3]  # more bit planes, less quantization error


def test_fig32b_multi_message_overtakes_laplace_as_epsilon_grows(run):
    _, out, _ = run
    table = pd.read_csv(out / "seed001_fig32b.csv").sort_values("epsilon")
    ratio = table["laplace_mse"] / table["mse_m6"]
    assert np.all(np.diff(ratio) > 0) and ratio.iloc[-1] > 1.0
    assert np.all(np.diff(table["mse_m6"]) < 0) and np.all(np.diff(table["laplace_mse"]) < 0)
