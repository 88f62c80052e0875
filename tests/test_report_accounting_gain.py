"""The report's accounting_gain.csv (seed 001 Fig 5.7's comparison): the ε that paper accounting
needs for the held-out accuracy tight accounting reaches, with a bootstrap interval over seeds.
Synthetic curves whose answer is exact: the paper curve is the tight one at ε / 4."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from pipeline import report

EPSILONS = [1.0, 2.0, 4.0, 8.0, 16.0]


def test_the_first_epsilon_reaching_a_target_interpolates_in_log_epsilon():
    epsilons, accuracies = np.array(EPSILONS), np.array([0.5, 0.6, 0.7, 0.8, 0.9])
    assert report._first_epsilon_reaching(epsilons, accuracies, 0.65) == pytest.approx(2 * math.sqrt(2))
    assert report._first_epsilon_reaching(epsilons, accuracies, 0.7) == pytest.approx(4.0)
    assert report._first_epsilon_reaching(epsilons, accuracies, 0.4) == 1.0  # above the target from the start
    assert report._first_epsilon_reaching(epsilons, accuracies, 0.95) == math.inf  # never inside the grid
    # Not monotone: the first crossing counts, not a later one.
    assert report._first_epsilon_reaching(epsilons, np.array([0.5, 0.8, 0.6, 0.7, 0.9]), 0.75) < 2.0


def _runs(offsets: list[float]) -> pd.DataFrame:
    """Tight accuracy 0.5 + 0.1·log2(ε); paper the same at ε / 4; each seed shifted by its offset."""
    rows = []
    for accounting, scale in (("tight", 1.0), ("paper", 4.0)):
        for seed, offset in enumerate(offsets):
            for epsilon in EPSILONS:
                rows.append({"optimizer.name": "cldp_sgd", "privacy.protocol": "girgis_linf", "privacy.unit": "user",
                             "privacy.accounting": accounting, "privacy.epsilon": epsilon, "seed": seed,
                             "final_test_accuracy": 0.5 + 0.1 * math.log2(epsilon / scale) + offset})
    return pd.DataFrame(rows)


def test_paper_accounting_at_four_times_the_epsilon_is_found_at_every_reachable_target():
    gain = report.accounting_gain(_runs([0.0, 0.0, 0.0])).set_index("privacy.epsilon")
    reachable = [1.0, 2.0, 4.0]  # the paper curve tops out at tight's accuracy at ε = 4
    assert list(gain.loc[reachable, "epsilon_paper"]) == pytest.approx([4.0, 8.0, 16.0])
    assert list(gain.loc[reachable, "ratio"]) == pytest.approx([4.0, 4.0, 4.0])
    assert (gain.loc[reachable, "epsilon_paper_low"] == gain.loc[reachable, "epsilon_paper"]).all()  # no spread
    assert np.isinf(gain.loc[[8.0, 16.0], "epsilon_paper"]).all()
    assert list(gain["seeds"]) == [3] * 5


def test_the_interval_covers_the_point_and_widens_with_the_seeds_spread():
    gain = report.accounting_gain(_runs([-0.02, 0.0, 0.02])).set_index("privacy.epsilon")
    point, low, high = (gain.loc[2.0, column] for column in ("epsilon_paper", "epsilon_paper_low",
                                                                 "epsilon_paper_high"))
    assert point == pytest.approx(8.0)  # the seed means are unshifted
    assert low < point < high and high < 16.0


def test_no_rows_without_both_accountings():
    runs = _runs([0.0])
    assert report.accounting_gain(runs[runs["privacy.accounting"] == "tight"]).empty
