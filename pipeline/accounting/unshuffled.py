"""What a shuffle-Gaussian run's reports would spend without the shuffler (issue 45: seed 004
Fig 1(b)'s claim, that its shuffle accountant reaches an accuracy at a smaller ε, in the one
comparison this project can state: the same runs, accounted as if the server saw every report
with its sender).

Without the shuffler a round releases, for each user, either nothing (not sampled) or its own
report x_i + N(0, σ²I), the other users' reports being independent of x_i. For the changed
user that is the mixture P = (1 − q)·⊥ + q·N(x, σ²I) against Q = (1 − q)·⊥ + q·N(x', σ²I),
whose "not sampled" outcome ⊥ is disjoint from the reports, so its Rényi divergence is exactly

    D_α(P‖Q) = log(1 − q + q·e^{(α−1)·αΔ²/(2σ²)}) / (α − 1)

(Mironov 2017 Prop. 7 for the Gaussian; the mixture with a disjoint outcome computed directly),
which is the accountants' joint-convexity bound (M) of a sampled Gaussian at rate q: their
paper-mode curve of a Poisson (rate q) or a uniformly sampled (q = k/n) Gaussian. Their tight
routes (PLD, GDP) are not used: those bound a *sum* of the sample, in which a missing user's
absence is hidden by the others' noise; unshuffled reports show it. A shuffled run's multiset
of reports is a function of the unshuffled reports, so this ε is never below the run's.
"""
from __future__ import annotations

import copy

from pipeline.accounting.ledger import PAPER, PrivacyLedger

SHUFFLED = "ShuffleGaussian"


def unshuffled_ledger(ledger_json: dict) -> PrivacyLedger | None:
    """A run's ledger with every shuffle-Gaussian call replaced by the same reports unshuffled.

    Args:
      ledger_json: a run's ledger.json (PrivacyLedger.to_dict).

    Returns:
      The ledger, to be composed in paper mode (`unshuffled_epsilon`); None where the run has no
      shuffle-Gaussian call.
    """
    data = copy.deepcopy(ledger_json)
    calls = [entry for entry in data["events"] if entry["mechanism"] == SHUFFLED]
    if not calls:
        return None
    for entry in calls:
        if entry["rate"] > 0.0:  # shuffled check-in: each user answers with probability `rate`
            entry["mechanism"] = "PoissonGaussian"
            del entry["users"]
        else:  # `users` of `population`, sampled without replacement (or all of them)
            entry["mechanism"] = "GaussianSum"
            del entry["rate"]
    return PrivacyLedger.from_dict(data)


def unshuffled_epsilon(ledger_json: dict) -> float | None:
    """The ε, at the run's δ, that its reports spend without the shuffler (the module's bound,
    composed as the run's ledger composes); None where the run has no shuffle-Gaussian call."""
    ledger = unshuffled_ledger(ledger_json)
    return None if ledger is None else ledger.total(PAPER)[0]
