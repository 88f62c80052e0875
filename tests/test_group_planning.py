"""Planning and the ledger per round group (#28 item 3): a group of equal rounds is planned
once and recorded at once, with the same ledger as round by round; plug-ins are planned
round by round."""
from __future__ import annotations

import pytest

from pipeline import config, runner
from pipeline.accounting.compositions import SEQUENTIAL
from pipeline.accounting.ledger import LedgerError, PrivacyLedger
from pipeline.accounting.events import GaussianSumDpEvent

BASE = {"problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": 4000,
        "privacy": {"epsilon": 2.0, "delta": 1e-5, "accounting": "tight"}, "execution": {"backend": "local"}}


def _planned(optimizer: dict, privacy: dict | None = None, **top) -> runner.PlannedRun:
    tree = {**BASE, **top, "optimizer": optimizer, "privacy": {**BASE["privacy"], **(privacy or {})}}
    return runner.plan_run(config.expand(tree)[0])


def _round_by_round(planned: runner.PlannedRun) -> dict:
    """The ledger the runner built before groups: every round planned and recorded on its own."""
    job = planned.job
    schedule = job.schedule
    calls = []
    for round_index in range(schedule.rounds):
        plan = schedule.plan(round_index)
        calls.append((round_index, plan.first_user, plan.stop_user, job.protocol.plan(plan, job.problem.dim)))
    return runner.ledger_of(job, calls).to_dict()


@pytest.mark.parametrize("optimizer, privacy, top", [
    ({"name": "seq_sgd", "batch_size": 7}, None, {}),  # sequential, thousands of rounds in one group
    ({"name": "seq_phased"}, None, {"problem": {"name": "elastic", "dim": 3, "radius": 1.0}}),  # groups per phase
    ({"name": "full_gd", "rounds": 5}, None, {}),  # fully interactive: the same users every round
    ({"name": "full_phased"}, None, {}),  # PHASED: recorded round by round
    ({"name": "dp_sgd", "batch_size": 40}, {"protocol": "central_gaussian"}, {}),  # Poisson-sampled rounds
    ({"name": "pnsgd"}, {"protocol": "central_gaussian"}, {}),  # final iterate only
    ({"name": "seq_sgd", "batch_size": 20}, {"honest_fraction": 0.5, "epsilon": 1.0}, {}),  # robust mode
])
def test_the_ledger_per_group_is_the_ledger_round_by_round(optimizer, privacy, top):
    planned = _planned(optimizer, privacy, **top)
    assert planned.job.schedule.rounds > 1
    assert planned.ledger.to_dict() == _round_by_round(planned)


def test_recording_a_group_keeps_the_sequential_disjointness_check():
    event = GaussianSumDpEvent(10, 10, 3, 2.0, 5.0)
    ledger = PrivacyLedger(SEQUENTIAL, 1.0, 1e-5, accounting="tight")
    ledger.record_rounds(0, 3, 0, 10, 10, event)  # users [0, 30) in three batches
    assert ledger.rounds == 3
    with pytest.raises(LedgerError, match="already answered"):
        ledger.record(3, 25, 35, event)
    with pytest.raises(LedgerError, match="already answered"):  # the same users every round is no sequential run
        PrivacyLedger(SEQUENTIAL, 1.0, 1e-5, accounting="tight").record_rounds(0, 2, 0, 0, 10, event)


ROUND_READING = '''
from pipeline.protocols.sums import CentralGaussian

PLANNED = []


class RoundReading(CentralGaussian):
    name = "round_reading"

    def plan(self, round_plan, dim):
        PLANNED.append(round_plan.round)
        return super().plan(round_plan, dim)
'''


def test_a_plugin_protocol_is_planned_round_by_round(tmp_path):
    path = tmp_path / "round_reading.py"
    path.write_text(ROUND_READING)
    planned = _planned({"name": "dp_sgd", "batch_size": 400, "rounds": 30},
                       {"protocol": f"{path}:RoundReading"})
    module = __import__(type(planned.job.protocol).__module__, fromlist=["PLANNED"])
    # The runner asks every round, in order (a plug-in may read it; the optimizer's calibration asked before).
    assert module.PLANNED[-30:] == list(range(30))
