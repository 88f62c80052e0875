"""Planning and the ledger per round group (#28 item 3): a group of equal rounds is planned
once and recorded at once, with the same ledger as round by round; plug-ins are planned
round by round."""
from __future__ import annotations

import pytest

from pipeline import config, planning
from pipeline.accounting.compositions import SEQUENTIAL
from pipeline.accounting.ledger import LedgerError, PrivacyLedger
from pipeline.accounting.events import GaussianSumDpEvent

BASE = {"problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": 4000,
        "privacy": {"epsilon": 2.0, "delta": 1e-5, "accounting": "tight"}, "execution": {"backend": "local"}}


def _planned(optimizer: dict, privacy: dict | None = None, **top) -> planning.PlannedRun:
    tree = {**BASE, **top, "optimizer": optimizer, "privacy": {**BASE["privacy"], **(privacy or {})}}
    return planning.plan_run(config.expand(tree)[0])


def _round_by_round(planned: planning.PlannedRun) -> dict:
    """The ledger the runner built before groups: every round planned and recorded on its own."""
    job = planned.job
    schedule = job.schedule
    calls = []
    for round_index in range(schedule.rounds):
        plan = schedule.plan(round_index)
        calls.append((round_index, plan.first_user, plan.stop_user, job.protocol.plan(plan, job.problem.dim)))
    return planning.ledger_of(job, calls).to_dict()


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


PLUGINS = __import__("pathlib").Path(__file__).resolve().parents[1] / "experiments" / "plugins"


@pytest.mark.parametrize("spec, per_budget", [
    ("cjmp_vec", True), ("central_gaussian", True), ("girgis_l2", True),
    (f"{PLUGINS / 'under_noised.py'}:UnderNoisedPvec", True),  # keeps cjmp_vec's plan: planned per group
    (f"{PLUGINS / 'under_noised.py'}:UnderNoisedGirgisL2", True),  # keeps girgis_l2's plan
    (f"{__file__}:OwnPlanPvec", False),  # a plan of its own: round by round
    (f"{PLUGINS / 'skellam_sum.py'}:SkellamSum", False),
])
def test_a_protocol_is_planned_per_group_exactly_when_its_plan_is_a_built_ins(spec, per_budget):
    """Protocol.plans_per_budget (pipeline.twins.keeps_twin): no module-path test."""
    from pipeline import plugins

    protocol = plugins.resolve("protocol", spec)("paper")
    assert protocol.plans_per_budget() is per_budget


from pipeline.protocols import CjmpVec  # noqa: E402  (the plug-in below, resolved from this file)


class OwnPlanPvec(CjmpVec):
    """cjmp_vec with a plan of its own (here the same: what matters is that it may read the round)."""

    name = "own_plan_pvec"

    def plan(self, round_plan, dim):
        return CjmpVec.plan(self, round_plan, dim)
