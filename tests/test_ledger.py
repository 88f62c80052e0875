"""Paper-mode ledger: Theorem 3.2's per-call bound, sequential disjointness,
and P_GD's advanced composition against the target."""
from __future__ import annotations

import dataclasses
import math

import attr
import pytest

from pipeline import config, planning
from pipeline.accounting import FULLY_INTERACTIVE, SEQUENTIAL, LedgerError, PrivacyLedger
from pipeline.accounting.ledger import paper_bound
from pipeline.accounting.paper import advanced_composition, full_gd_round_budget, pvec_analysis_bound
from pipeline.optimizers import FullGD
from pipeline.optimizers.base import RoundPlan
from pipeline.problems import Quadratic
from pipeline.protocols import CjmpVec
from pipeline.protocols.cjmp import plan_pvec


def _event(users=100, dim=10, epsilon=1.0, delta=1e-6, norm_bound=1.0):
    return CjmpVec.event(plan_pvec(users, dim, epsilon, delta, norm_bound), block_size=4096)


@pytest.mark.parametrize("epsilon,delta,dim", [(1.0, 1e-6, 10), (15.0, 0.4, 1), (0.1, 1e-9, 1000)])
def test_pvec_bound_is_the_closed_form_and_below_target(epsilon, delta, dim):
    bound, bound_delta = pvec_analysis_bound(_event(dim=dim, epsilon=epsilon, delta=delta))
    # Notes seed-000 §3.2: ε/3 + ε²/(18 ln((d+1)/δ)).
    assert bound == pytest.approx(epsilon / 3 + epsilon**2 / (18 * math.log((dim + 1) / delta)), rel=1e-12)
    assert bound <= epsilon and bound_delta == delta


def test_a_call_outside_theorem_3_2_is_refused():
    event = _event()
    with pytest.raises(ValueError, match="outside Theorem 3.2"):
        pvec_analysis_bound(attr.evolve(event, g=3))
    with pytest.raises(ValueError, match="outside Theorem 3.2"):
        pvec_analysis_bound(attr.evolve(event, p=0.5))
    # Too little noise: fewer bits, or a smaller p, than Lemma 3.1 needs.
    with pytest.raises(ValueError, match="less noise"):
        pvec_analysis_bound(attr.evolve(event, b_noise=1, p=0.01))
    with pytest.raises(ValueError, match="less noise"):
        pvec_analysis_bound(attr.evolve(event, p=event.p * 0.999))


def test_sequential_ledger_refuses_overlapping_batches():
    ledger = PrivacyLedger(SEQUENTIAL, 1.0, 1e-6)
    ledger.record(0, 0, 100, _event())
    ledger.record(1, 200, 300, _event())
    ledger.record(2, 100, 200, _event())
    with pytest.raises(LedgerError, match="already answered"):
        ledger.record(3, 250, 350, _event())
    with pytest.raises(LedgerError, match="already answered"):
        ledger.record(3, 50, 60, _event(users=10))
    with pytest.raises(LedgerError, match="a call over 100 users for 10 users"):
        ledger.record(3, 300, 310, _event())
    assert ledger.total() == (1.0, 1e-6) and ledger.within_target()
    data = ledger.to_dict()
    assert data["events"][0]["rounds"] == [0, 3] and data["accounting"]["paper"]["checks"]["disjoint_batches"]
    # No user ids or ranges (the unit of privacy names what a neighbour changes, not a user).
    assert "user" not in str({key: value for key, value in data.items() if key != "unit"}).replace("users", "")


def test_a_sequential_series_is_the_worst_call_so_far_at_every_round():
    """Disjoint batches compose in parallel (seed 000, Theorem 4.1's accounting): after each
    round the spend is the largest per-call (ε, δ) so far, however often each call ran."""
    small, large = _event(epsilon=0.5), _event(epsilon=1.0)
    calls = [small] * 3 + [large] * 2 + [small] * 2
    ledger = PrivacyLedger(SEQUENTIAL, 1.0, 1e-6, accounting="tight")
    for round_index, event in enumerate(calls):
        ledger.record(round_index, 100 * round_index, 100 * round_index + 100, event)
    # Paper mode: each call claims its own target (Theorem 3.2).
    assert ledger.spent_series("paper") == [(0.5, 1e-6)] * 3 + [(1.0, 1e-6)] * 4
    # Tight mode: each call's own bound, from a one-call ledger.
    alone = {}
    for event in (small, large):
        one = PrivacyLedger(SEQUENTIAL, 1.0, 1e-6, accounting="tight")
        one.record(0, 0, 100, event)
        alone[event] = one.total()
    assert alone[small][0] < alone[large][0]
    assert ledger.spent_series() == [alone[small]] * 3 + [alone[large]] * 4
    assert ledger.spent_series() == [ledger.spent_after(r) for r in range(len(calls))]
    # The columns the runner writes (epsilon_spent, delta_spent) hold the same values.
    for accounting in ("paper", "tight"):
        epsilon, delta = ledger.spent_columns(accounting)
        assert list(zip(epsilon.tolist(), delta.tolist())) == ledger.spent_series(accounting)


def test_advanced_composition_formula():
    # DRV10 Thm III.3 by hand: k = 100, ε0 = 0.01, δ' = 1e-6.
    epsilon, delta = advanced_composition(0.01, 1e-8, 100, 1e-6)
    by_hand = math.sqrt(200 * math.log(1e6)) * 0.01 + 100 * 0.01 * (math.exp(0.01) - 1)
    assert by_hand <= epsilon == pytest.approx(by_hand, rel=1e-11)
    assert delta == pytest.approx(100 * 1e-8 + 1e-6)


@pytest.mark.parametrize("rounds", [10, 1_000, 100_000, 10_000_000])
def test_full_gd_split_composes_below_target(rounds):
    """Notes seed-000 §3.2: with δ = 1e-6 the composed ε is between 0.55 and
    0.75 for ε = 1, and between 10.7 and 13.1 for ε = 15."""
    for epsilon, low, high in [(1.0, 0.55, 0.75), (15.0, 10.7, 13.1)]:
        epsilon0, delta0 = full_gd_round_budget(epsilon, 1e-6, rounds)
        total, total_delta = advanced_composition(epsilon0, delta0, rounds, 1e-6 / (rounds + 1))
        # The notes print one decimal (10.697 appears as 10.7).
        assert low <= round(total, 1) <= high and total <= epsilon
        assert total_delta == pytest.approx(1e-6, rel=1e-12)


def test_full_gd_ledger_total_is_within_target():
    problem = Quadratic(dim=4, radius=1.0)
    optimizer = FullGD.from_config(problem, 500, 2.0, 1e-5)
    schedule = optimizer.schedule()
    ledger = PrivacyLedger(FULLY_INTERACTIVE, 2.0, 1e-5, schedule.slack)
    for r in range(schedule.rounds):
        plan = schedule.plan(r)
        params = plan_pvec(plan.users, 4, plan.epsilon, plan.delta, plan.norm_bound)
        ledger.record(r, plan.first_user, plan.stop_user, CjmpVec.event(params, 4096))
    epsilon, delta = ledger.total()
    assert schedule.rounds == optimizer.rounds > 1
    assert epsilon <= 2.0 and delta <= 1e-5 and ledger.within_target()
    # Spent grows with the rounds and never exceeds the total.
    spent = [ledger.spent_after(r)[0] for r in range(schedule.rounds)]
    assert spent == sorted(spent) and spent[-1] == epsilon


def test_phased_groups_compose_in_parallel_and_must_be_disjoint():
    """k identical groups of T fully interactive calls spend what one group does (Lemma B.7);
    a group reusing another's users is refused."""
    from pipeline.accounting.ledger import PHASED

    call = CjmpVec.event(plan_pvec(100, 3, 0.3, 1e-7, 1.0), 64)
    single = PrivacyLedger(FULLY_INTERACTIVE, 2.0, 1e-5, 1e-6)
    phased = PrivacyLedger(PHASED, 2.0, 1e-5, 1e-6)
    for r in range(5):
        single.record(r, 0, 100, call)
    for group in range(3):
        for r in range(5):
            phased.record(group * 5 + r, 100 * group, 100 * (group + 1), call)
    for mode in ("paper", "tight"):
        assert phased.total(mode) == single.total(mode)
    with pytest.raises(LedgerError):
        phased.record(15, 50, 150, call)


@pytest.mark.parametrize("honest", [0.34, 0.5, 0.9])
def test_robust_mode_ledger_is_corollary_a9_and_the_tight_bound_of_the_honest_noise(honest):
    """Dropouts (Appendix A.3): paper mode plans Theorem 3.2 at γε for the whole batch and
    claims (γε)/γ = ε (Corollary A.9); tight mode bounds the honest users' noise alone."""
    batch, sending = 300, math.floor(honest * 300)
    plan = RoundPlan(0, 0, batch, 1.0, 1e-6, 1.0, "gradients", sampling="uniform", sample_size=sending,
                     honest_fraction=honest)
    paper_call = CjmpVec("paper").plan(plan, 3)
    assert paper_call.users == batch and paper_call.honest_users == sending
    assert paper_call.epsilon == pytest.approx(sending / batch)
    tight_call = CjmpVec("tight").plan(plan, 3)
    for call, mode in ((paper_call, "paper"), (tight_call, "tight")):
        ledger = PrivacyLedger(SEQUENTIAL, 1.0, 1e-6, accounting=mode)
        ledger.record(0, 0, batch, CjmpVec.event(call, 64))
        assert ledger.total()[0] <= 1.0 + 1e-12
    # The tight bound is that of a call planned for the honest users only.
    honest_only = PrivacyLedger(SEQUENTIAL, 1.0, 1e-6, accounting="tight")
    honest_only.record(0, 0, sending, CjmpVec.event(dataclasses.replace(tight_call, users=sending, honest_users=None), 64))
    ledger = PrivacyLedger(SEQUENTIAL, 1.0, 1e-6, accounting="tight")
    ledger.record(0, 0, batch, CjmpVec.event(tight_call, 64))
    assert ledger.total() == honest_only.total()
    # Corollary A.9 does not cover a call above ε = 1: no paper bound.
    assert paper_bound(attr.evolve(CjmpVec.event(paper_call, 64), epsilon=1.5)) is None


def test_the_planned_ledger_is_the_same_whether_a_calls_parameters_hash_or_not():
    """The runner makes one event per distinct call (parameters that hash) instead of one per
    round; a plug-in's unhashable parameters get one per round: the same ledger either way."""
    import types

    from pipeline import config, planning

    # Phases of different batch sizes: several distinct calls, each over many rounds.
    tree = {"problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": 20000,
            "optimizer": {"name": "seq_phased"}, "privacy": {"epsilon": 2.0, "delta": 1e-6, "accounting": "tight"}}
    (run,) = config.expand(tree)
    planned = planning.plan_run(run)
    job = planned.job
    plans = [job.schedule.plan(r) for r in range(job.schedule.rounds)]
    records = [(p.round, p.first_user, p.stop_user, job.protocol.planned(p, job.problem.dim)) for p in plans]

    class Wrapped:  # the same calls, their parameters in a list (unhashable)
        accounting = job.protocol.accounting

        @staticmethod
        def event(params, block_size):
            return job.protocol.event(params[0], block_size)

    unhashable = types.SimpleNamespace(optimizer=job.optimizer, schedule=job.schedule, protocol=Wrapped(),
                                       block_size=job.block_size, unit=job.unit)
    wrapped = planning.ledger_of(unhashable, [(r, first, stop, [params]) for r, first, stop, params in records])
    assert len(records) > len({params for *_, params in records}) > 1  # 23 rounds, 5 distinct calls
    assert planning.ledger_of(job, records).to_dict() == wrapped.to_dict() == planned.ledger.to_dict()


def _tiny(epsilon: float, accounting: str = "tight"):
    tree = {"experiment": "same", "problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": 2000,
            "optimizer": {"name": "seq_sgd"}, "privacy": {"epsilon": epsilon, "delta": 1e-6, "accounting": accounting},
            "execution": {"backend": "local", "shards": 1}}
    return planning.plan_run(config.expand(tree)[0])


def test_same_calls_holds_exactly_when_the_ledgers_write_the_same_json():
    """PrivacyLedger.same_calls, which record_run checks instead of composing both ledgers."""
    first, again, other, paper = _tiny(2.0), _tiny(2.0), _tiny(2.5), _tiny(2.0, "paper")
    assert first.ledger.same_calls(again.ledger) and first.ledger.to_dict() == again.ledger.to_dict()
    for different in (other, paper):
        assert not first.ledger.same_calls(different.ledger)
        assert first.ledger.to_dict() != different.ledger.to_dict()


def test_a_run_whose_executed_calls_differ_from_its_plan_is_refused_before_anything_is_written():
    from pipeline import engine, recording

    planned, other = _tiny(2.0), _tiny(2.5)
    _, records = engine.execute(other.job, "local", 1)

    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError(f"a sink was written: {name}")

    with pytest.raises(RuntimeError, match="the executed rounds differ from the planned ledger"):
        recording.record_run(planned, records, 0.1, "attempt", recording.now(), Untouchable(), Untouchable())
