"""The audit's power and false alarms per protocol (issue #27): `python -m pipeline audit`'s
attack on each shipped protocol family, honest and under-noised (experiments/plugins), at
ε = 1, δ = 10⁻⁶, n = 2,000, d = 1, tight accounting, `mean_estimation`'s one call.

For each protocol it runs the audit with SEEDS seeds and prints, per protocol, the ledger's ε,
the mean and largest lower bound over the seeds with their ratio to the ledger's ε (the
audit's power on an honest protocol), and how many seeds raised an alarm (bound > ledger).

    python experiments/audit_power.py [--seeds 20] [--trials 20000] [--quick]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import time

import numpy as np

from pipeline import audit, config, planning

UNDER_NOISED = "experiments/plugins/under_noised.py"
SKELLAM = "experiments/plugins/skellam_sum.py"
# (honest protocol, its under-noised copies by `privacy.shrink`: 10 is a hundredth of the noise
# variance; the shuffle Gaussian's sum, which the audit attacks, hides a tenth of σ too)
FAMILIES = [
    ("cjmp_vec", f"{UNDER_NOISED}:UnderNoisedPvec", (10,)),
    ("shuffle_gaussian", f"{UNDER_NOISED}:UnderNoisedShuffleGaussian", (10, 100)),
    ("girgis_l2", f"{UNDER_NOISED}:UnderNoisedGirgisL2", (10,)),
    ("girgis_linf", None, ()),
    ("girgis_l1", None, ()),
    (f"{SKELLAM}:SkellamSum", f"{SKELLAM}:UnderNoisedSkellamSum", (10,)),
    ("central_gaussian", f"{UNDER_NOISED}:UnderNoisedGaussian", (10,)),
    ("local_l2", None, ()),
]


def _planned(protocol: str, users: int, shrink: float | None = None):
    tree = {"problem": {"dim": 1}, "n_users": users, "optimizer": {"name": "mean_estimation"},
            "privacy": {"protocol": protocol, "epsilon": 1.0, "delta": 1e-6, "accounting": "tight",
                        **({"shrink": shrink} if shrink else {})},
            "execution": {"backend": "local"}}
    with contextlib.redirect_stdout(io.StringIO()):
        return planning.plan_run(config.expand(tree)[0])


def audited(protocol: str, seeds: int, trials: int, users: int = 2000, shrink: float | None = None) -> dict:
    """The audit of `protocol` (with an under-noised copy's `shrink`) over `seeds` seeds: the
    ledger's ε and the lower bounds."""
    planned = _planned(protocol, users, shrink)
    began = time.perf_counter()
    found = [audit.audit_run(planned, trials, seed) for seed in range(seeds)]
    bounds = np.array([item["audit"]["epsilon_lower_bound"] for item in found])
    claimed = found[0]["ledger"]["epsilon"]
    name = protocol.split(":")[-1] + (f" (shrink {shrink:g})" if shrink else "")
    return {"protocol": name, "ledger_epsilon": claimed, "mean_bound": bounds.mean(),
            "largest_bound": bounds.max(), "power": bounds.mean() / claimed,
            "alarms": int((bounds > claimed).sum()), "seconds": time.perf_counter() - began}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="2 seeds of 2,000 trials (checks that it runs)")
    args = parser.parse_args()
    seeds, trials = (2, 2_000) if args.quick else (args.seeds, args.trials)
    print(f"seeds={seeds} trials_per_neighbour={trials} (ε = 1, δ = 1e-6, n = 2000, d = 1, tight)")
    print("| protocol | ledger ε | mean bound | largest | power (mean/ε) | alarms | s |")
    print("|---|---|---|---|---|---|---|")
    runs = [(protocol, shrink) for honest, broken, shrinks in FAMILIES
            for protocol, shrink in [(honest, None), *((broken, shrink) for shrink in shrinks)]]
    for protocol, shrink in runs:
        row = audited(protocol, seeds, trials, shrink=shrink)
        print(f"| `{row['protocol']}` | {row['ledger_epsilon']:.3f} | {row['mean_bound']:.3f} | "
              f"{row['largest_bound']:.3f} | {row['power']:.2f} | {row['alarms']}/{seeds} | {row['seconds']:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
