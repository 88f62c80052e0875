"""The empirical privacy audit: it attacks the run's own protocol object (plug-ins
included), its lower bound never exceeds the ledger on an honest protocol, and it
catches every protocol that adds less noise than its ledger states."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import yaml
from scipy import stats

from pipeline import audit, cli, config, planning, plugins
from pipeline.accounting import ledger, pvec_tight
from pipeline.accounting.paper import pvec_analysis_bound
from pipeline.audit import attack, audit_shuffle_gaussian, audited_call
from pipeline.protocols import CjmpVec
from pipeline.protocols.base import RoundPlan
from pipeline.protocols.cjmp import plan_p1d, plan_pvec, plan_pvec_tight

UNDER_NOISED = "experiments/plugins/under_noised.py"
SKELLAM = "experiments/plugins/skellam_sum.py"


def _exact_epsilon(trials: int, p: float, shift: int, delta: float) -> float:
    """The exact ε(δ) of Bin(trials, p) against Bin(trials, p) + shift: the
    smallest ε whose hockey-stick divergence, both ways, is at most δ."""
    support = np.arange(trials + shift + 1)
    null, moved = stats.binom.pmf(support, trials, p), stats.binom.pmf(support - shift, trials, p)

    def divergence(epsilon):
        return max(np.maximum(0, moved - math.exp(epsilon) * null).sum(),
                   np.maximum(0, null - math.exp(epsilon) * moved).sum())

    low, high = 0.0, 60.0
    for _ in range(80):
        middle = (low + high) / 2
        low, high = (low, middle) if divergence(middle) <= delta else (middle, high)
    return high


def _attack_pvec(params, trials: int = 20_000) -> float:
    """The audit's bound on one P_vec (or P_1D) call, run through CjmpVec's object."""
    plan = RoundPlan(0, 0, params.users, params.epsilon, params.delta, params.norm_bound, "gradients")
    return attack(audited_call(CjmpVec(params.calibration), plan, params.dim, params=params), params.delta,
                  trials)["epsilon_lower_bound"]


def test_p1d_lower_bound_is_below_the_exact_epsilon_and_lemma_3_1():
    params = plan_p1d(16, 2.0, 15.0, 0.4)  # b_noise = 6: little noise, so the attack gets somewhere
    found = _attack_pvec(params)
    # The worst-case neighbours move one user's count by exactly g (0 vs g ones).
    exact = _exact_epsilon(params.users * params.b_noise, params.p, params.g, params.delta)
    # Lemma 3.1: standalone P_1D is (ε(1 + 2/g), δ)-DP in the worst case (notes T12).
    assert 0.0 < found <= exact <= 15.0 * (1 + 2 / params.g)
    # The attack gets within a factor of the truth, so a ledger under-reporting by more would show.
    assert found >= 0.3 * exact, (found, exact)


def test_pvec_lower_bound_is_below_the_paper_ledger():
    params = plan_pvec(16, 2, 15.0, 0.4, 1.0)
    bound, _ = pvec_analysis_bound(CjmpVec.event(params, 4096))
    assert _attack_pvec(params) <= bound


def test_the_audit_catches_a_mechanism_with_too_little_noise():
    honest = plan_pvec(16, 1, 1.0, 0.1, 1.0)  # the ledger claims ε ≈ 0.34 for this call
    broken = dataclasses.replace(honest, b_noise=1, p=0.01)  # the same call with nearly noise-free counts
    # ln(10000 / ln(40)) ≈ 7.9 is the most 10^4 trials can show at 95%.
    assert _attack_pvec(broken) > 5.0 > pvec_analysis_bound(CjmpVec.event(honest, 4096))[0]


@pytest.mark.parametrize("dim,epsilon", [(2, 4.0), (1, 2.0)])
def test_tight_pvec_lower_bound_is_below_the_tight_ledger_and_near_it(dim, epsilon):
    """Where the bound can be approached (tight noise, few users): the attack's 95% lower bound is
    below the ledger, and at least 0.45 of it (measured: 0.59 and 0.63 at 20,000 trials), so a
    ledger that over-claimed its noise, or an attack that lost its power, would fail here."""
    params = plan_pvec_tight(16, dim, epsilon, 0.01, 1.0)
    claimed = pvec_tight.composed_epsilon(ledger.tight_bound(CjmpVec.event(params, 4096)), 1, 0.01)[0]
    found = _attack_pvec(params)
    assert 0.45 * claimed <= found <= claimed <= epsilon, (found, claimed)


def _config(tmp_path, protocol: str = "cjmp_vec", users: int = 2000, epsilon: float = 1.0, extra: str = "",
            optimizer: str = "{name: mean_estimation}") -> str:
    path = tmp_path / "audit.yaml"
    path.write_text(f"problem: {{dim: 1}}\nn_users: {users}\noptimizer: {optimizer}\n"
                    f"privacy: {{protocol: '{protocol}', epsilon: {epsilon}, delta: 1.0e-6, accounting: tight}}\n"
                    f"execution: {{backend: local}}\n{extra}")
    return str(path)


def _audit(capsys, path: str, *flags: str) -> tuple[int, dict]:
    code = cli.main(["audit", path, *flags])
    out = capsys.readouterr().out
    return code, (json.loads(out) if code in (0, 1) else {})


@pytest.mark.parametrize("accounting", ["paper", "tight"])
def test_audit_command_reports_the_call_and_the_ledger(tmp_path, capsys, accounting):
    path = tmp_path / "a.yaml"
    path.write_text("problem: {dim: 2}\nn_users: 64\noptimizer: {name: mean_estimation}\n"
                    f"privacy: {{epsilon: 15.0, delta: 0.4, accounting: {accounting}}}\nexecution: {{backend: local}}\n")
    code, printed = _audit(capsys, str(path), "--trials", "4000")
    assert code == 0 and printed["passed"]
    assert printed["ledger"]["accounting"] == accounting == printed["call"]["parameters"]["calibration"]
    assert printed["audit"]["epsilon_lower_bound"] <= printed["ledger"]["epsilon"] <= 15.0
    assert printed["call"]["users"] == 64 and math.isclose(printed["audit"]["confidence"], 0.95)
    assert cli.main(["audit", str(path), "--trials", "5"]) == 2


# Each protocol family's honest object, and its copy that adds a hundredth of the noise variance
# (experiments/plugins): the copy fails the audit at ε = 1, n = 2,000, d = 1; the honest one passes.
# The shuffle Gaussian's copy adds σ/100: the audit attacks the released sum, whose noise σ√n is
# far above the multiset's that the ledger accounts (seed 004), so at σ/10 (sum noise 4Δ₂) it
# shows less than the ledger's ε; at σ/100 (0.4Δ₂) it shows more.
FAMILIES = [
    ("cjmp_vec", f"{UNDER_NOISED}:UnderNoisedPvec", 10),
    ("shuffle_gaussian", f"{UNDER_NOISED}:UnderNoisedShuffleGaussian", 100),
    ("girgis_l2", f"{UNDER_NOISED}:UnderNoisedGirgisL2", 10),
    (f"{SKELLAM}:SkellamSum", f"{SKELLAM}:UnderNoisedSkellamSum", 10),
    ("central_gaussian", f"{UNDER_NOISED}:UnderNoisedGaussian", 10),
]


@pytest.mark.parametrize("honest,broken,shrink", FAMILIES)
def test_the_audit_fails_each_under_noised_copy_and_passes_the_honest_protocol(tmp_path, capsys, honest, broken,
                                                                              shrink):
    # No false alarm in 20 seeds of 20,000 trials each: experiments/README.md, "Audit power".
    code, found = _audit(capsys, _config(tmp_path, honest), "--trials", "4000")
    assert code == 0 and found["audit"]["epsilon_lower_bound"] <= found["ledger"]["epsilon"], found
    code, wrong = _audit(capsys, _config(tmp_path, broken), "--trials", "10000", "--set", f"privacy.shrink={shrink}")
    # The copy's ledger states the honest call's ε: the attack on what it sends goes above it.
    assert wrong["ledger"]["epsilon"] == pytest.approx(found["ledger"]["epsilon"])
    assert code == 1 and not wrong["passed"] and wrong["audit"]["epsilon_lower_bound"] > wrong["ledger"]["epsilon"]


def test_the_audit_runs_the_runs_sampling_and_literal_mode(tmp_path, capsys):
    """A Poisson-sampled central Gaussian round (dp_sgd) and a literal-mode P_vec call are run as
    the engine runs them: both pass, and a sampled under-noised copy still fails."""
    sampled = ("optimizer: {name: dp_sgd, batch_size: 100, rounds: 20}\n"
               "privacy: {protocol: central_gaussian, epsilon: 1.0, delta: 1.0e-6, accounting: tight}\n")
    path = tmp_path / "sampled.yaml"
    path.write_text(f"problem: {{dim: 1}}\nn_users: 2000\n{sampled}execution: {{backend: local}}\n")
    code, found = _audit(capsys, str(path), "--trials", "4000")
    assert code == 0 and found["call"]["sampling"] == "poisson", found["call"]
    code, _ = _audit(capsys, str(path), "--trials", "4000", "--set", f"privacy.protocol={UNDER_NOISED}:UnderNoisedGaussian",
                     "--set", "privacy.shrink=100")
    assert code == 1
    literal = _config(tmp_path, users=16, epsilon=8.0, extra="")
    code, found = _audit(capsys, literal, "--trials", "2000", "--set", "execution.simulation=literal")
    assert code == 0 and found["call"]["simulation"] == "literal"


def test_the_bound_is_the_same_in_process_and_on_ray(monkeypatch, ray_session):
    """Batches are keyed by their first trial: any backend and worker count give the same bound."""
    monkeypatch.setattr(audit, "BATCH", 700)
    params = plan_pvec_tight(16, 1, 2.0, 0.01, 1.0)
    plan = RoundPlan(0, 0, 16, 2.0, 0.01, 1.0, "gradients")
    call = audited_call(CjmpVec("tight"), plan, 1, params=params)
    assert attack(call, 0.01, 3000, backend="local") == attack(call, 0.01, 3000, backend="ray")


PAIR_REFUSED = '''
from pipeline.protocols.base import PlanError
from pipeline.protocols.sums import CentralGaussian


class NoPair(CentralGaussian):
    name = "no_pair"

    def audit_pair(self, round_plan, dim):
        raise PlanError("problem.dim", "this protocol has no worst case in one dimension")


class Silent(CentralGaussian):
    name = "silent"
    supports_audit = False


# Issue 46's hostile hooks: each once passed the audit (bound 0) or ended in a traceback.
class SamePair(CentralGaussian):
    name = "same_pair"

    def audit_pair(self, round_plan, dim):
        base, _ = super().audit_pair(round_plan, dim)
        return base, base.copy()


class NanPair(CentralGaussian):
    name = "nan_pair"

    def audit_pair(self, round_plan, dim):
        base, moved = super().audit_pair(round_plan, dim)
        moved[0, 0] = float("nan")
        return base, moved


class NanStatistic(CentralGaussian):
    name = "nan_statistic"

    def audit_statistic(self, params, statistic):
        return float("nan")


class TextStatistic(CentralGaussian):
    name = "text_statistic"

    def audit_statistic(self, params, statistic):
        return "high"


class ExitingEncoder(CentralGaussian):
    name = "exiting_encoder"

    @staticmethod
    def encode_block(params, chunks, rng, work=None):
        import sys
        sys.exit(0)


class RaisingEncoder(CentralGaussian):
    name = "raising_encoder"

    @staticmethod
    def encode_block(params, chunks, rng, work=None):
        raise ValueError("boom" + chr(10) + "a second line the error line leaves out")
'''


@pytest.mark.parametrize("protocol,field,rule", [
    ("none", "privacy.protocol = 'none'", "cannot be audited: it is not private"),
    ("{plugin}:NoPair", "privacy.protocol = 'no_pair'", "refuses the audit's neighbouring pair"),
    ("{plugin}:Silent", "privacy.protocol = '{plugin}:Silent'", "must say why in `audit_refusal`"),
    ("{plugin}:SamePair", "privacy.protocol = 'same_pair'", "the same inputs twice"),
    ("{plugin}:NanPair", "privacy.protocol = 'nan_pair'", "a NaN or infinite input"),
    ("{plugin}:NanStatistic", "privacy.protocol = 'nan_statistic'", "audit_statistic returned nan: it must be finite"),
    ("{plugin}:TextStatistic", "privacy.protocol = 'text_statistic'", "must return a real number, got a str"),
    ("{plugin}:ExitingEncoder", "privacy.protocol = 'exiting_encoder'", "stopped the audit: SystemExit"),
    ("{plugin}:RaisingEncoder", "privacy.protocol = 'raising_encoder'", "stopped the audit: ValueError: boom"),
])
def test_an_audit_that_cannot_run_is_one_line_and_exit_2(tmp_path, capsys, protocol, field, rule):
    plugin = tmp_path / "refusing.py"
    plugin.write_text(PAIR_REFUSED)
    protocol, field = protocol.format(plugin=plugin), field.format(plugin=plugin)
    assert cli.main(["audit", _config(tmp_path, protocol), "--trials", "1000"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith(f"config error: {field}")
    assert rule in lines[0], lines


def test_report_noisy_max_says_why_it_cannot_be_audited(tmp_path, capsys):
    path = tmp_path / "fw.yaml"
    path.write_text("problem: {name: l1_least_squares, dim: 4}\nn_users: 2000\noptimizer: {name: frank_wolfe_l1}\n"
                    "privacy: {protocol: report_noisy_max, epsilon: 1.0, delta: 1.0e-6}\nexecution: {backend: local}\n")
    assert cli.main(["audit", str(path), "--trials", "1000"]) == 2
    assert "its noise is the optimizer's" in capsys.readouterr().err


@pytest.mark.parametrize("users,sigma", [(2, 0.5), (10, 0.5)])
def test_shuffle_gaussian_lower_bound_is_below_its_accountant(users, sigma):
    from pipeline.accounting.shuffle_gaussian import shuffle_gaussian_epsilon

    delta = 1e-3
    claimed = shuffle_gaussian_epsilon(users, sigma, delta, lambda_max=256)["epsilon"]
    found = audit_shuffle_gaussian(users, sigma, delta, trials=20_000)["epsilon_lower_bound"]
    # Sound, and the attack finds a real share of it (more users: more amplification, a weaker attack).
    assert 0.25 * claimed <= found <= claimed, (found, claimed)


RECORD_LEVEL = """n_users: 30
problem: {name: quadratic, dim: 1, radius: 1.0, records_per_user: 4}
optimizer: {name: cldp_sgd, records_per_round: 4, batch_size: 1, rounds: 1}
privacy: {protocol: girgis_l1, unit: record, epsilon: 1.0, delta: 1.0e-6, accounting: tight}
execution: {backend: local}
"""


def _with_nested_route(routes):
    """tight_routes plus the route issue 41 withdrew: WBK19 over the clients of (M) at s/m given the sample."""
    from pipeline.accounting import mechanisms, shuffle_gaussian, shuffle_ldp

    def patched(event):
        found = dict(routes(event))
        if getattr(event, "record_messages", 0) and event.sampling == "uniform":
            shuffled = shuffle_ldp.shuffle_rdp_upper(event.users * event.messages_per_user, event.stream_epsilons[0],
                                                     mechanisms.ORDERS)
            share = event.messages_per_user / event.records_min
            given = shuffled if share >= 1 else mechanisms._mixture(share, [(share, shuffled)])
            found["nested"] = shuffle_gaussian.wbk_subsampled_rdp(event.users / event.population, given)
        return found
    return patched


def _clear_accounting_caches():
    from pipeline.accounting import mechanisms
    from pipeline.protocols import multi_message
    for cached in (mechanisms.tight_call, mechanisms.composed_epsilon, multi_message._plan):
        cached.cache_clear()


@pytest.mark.parametrize("nested", [False, True])
def test_the_audit_attacks_record_level_calls(tmp_path, capsys, monkeypatch, nested):
    """n = 30 clients of 4 records, k = 1, s = 4 (issue 41): a client whose other records stand out.
    The ledger passes; with the withdrawn nested route its ε0 is calibrated 4× too high and the audit
    raises the alarm."""
    from pipeline.accounting import mechanisms
    path = tmp_path / "records.yaml"
    path.write_text(RECORD_LEVEL)
    _clear_accounting_caches()
    if nested:
        monkeypatch.setattr(mechanisms, "tight_routes", _with_nested_route(mechanisms.tight_routes))
    try:
        code, found = _audit(capsys, str(path), "--trials", "20000")
    finally:
        monkeypatch.undo()
        _clear_accounting_caches()
    assert found["ledger"]["unit"] == "record" and found["audit"]["neighbours"].startswith("record level")
    assert found["call"]["parameters"]["record_messages"] == 4 and found["call"]["users"] == 1
    bound, claimed = found["audit"]["epsilon_lower_bound"], found["ledger"]["epsilon"]
    if nested:
        assert code == 1 and not found["passed"] and bound > 2.0 * claimed, found
    else:
        # ε0 = ε: the call is pure ε0-DP and the sampling barely helps a client that stands out
        assert code == 0 and found["passed"] and 0.1 < bound <= claimed, found


COMPILED_UNDER_NOISED = '''
from pipeline.protocols.sums import ShuffleGaussian


class CompiledUnderNoised(ShuffleGaussian):
    """shuffle_gaussian whose numpy encode_block is honest and whose compiled twin adds σ/100."""

    name = "compiled_under_noised"

    def fused_encoding(self, params):
        honest = super().fused_encoding(params)
        return None if honest is None else honest._replace(sigma=honest.sigma / 100)
'''


def test_the_audit_attacks_the_compiled_encoding_a_compiled_run_sends_with(tmp_path, capsys):
    """A run whose rounds are compiled sends its users' messages with the protocol's fused
    encoding: a twin that adds a hundredth of the noise (FAMILIES) fails the audit, though its numpy
    encode_block (which the audit attacked before) is honest and passes; the honest protocol passes."""
    (tmp_path / "compiled_under_noised.py").write_text(COMPILED_UNDER_NOISED)
    broken = f"{tmp_path / 'compiled_under_noised.py'}:CompiledUnderNoised"
    full_gd = "{name: full_gd, rounds: 3}"  # its rounds compiled (engine.compiles)
    code, found = _audit(capsys, _config(tmp_path, "shuffle_gaussian", optimizer=full_gd), "--trials", "4000")
    assert code == 0 and found["call"]["code"] == "compiled: pipeline.protocols.sums.FusedSum", found["call"]
    code, wrong = _audit(capsys, _config(tmp_path, broken, optimizer=full_gd), "--trials", "4000")
    assert wrong["call"]["code"] == found["call"]["code"]
    assert wrong["ledger"]["epsilon"] == pytest.approx(found["ledger"]["epsilon"])
    assert code == 1 and wrong["audit"]["epsilon_lower_bound"] > wrong["ledger"]["epsilon"]
    planned = planning.plan_run(config.expand(yaml.safe_load(open(_config(tmp_path, broken, optimizer=full_gd))))[0])
    plan = planned.job.schedule.plan(0)
    numpy_call = audited_call(planned.job.protocol, plan, 1, planned.job.block_size)
    assert numpy_call.code.startswith("numpy") and attack(numpy_call, 1e-6, 4000)["epsilon_lower_bound"] <= \
        wrong["ledger"]["epsilon"]


@pytest.mark.parametrize("protocol", ["cjmp_vec", "shuffle_gaussian", "central_gaussian", "local_l2", "girgis_l2",
                                      f"{SKELLAM}:SkellamSum"])
def test_the_compiled_route_is_encode_block_on_the_same_streams_bit_for_bit(protocol):
    """Each trial's compiled statistic (fused_interactive.encoded_blocks) is what the protocol's
    numpy encode_block, merge, finish and audit_statistic give on the streams (ROUND_STREAM, trial,
    block) of the neighbour's key, over three blocks of the population, both neighbours."""
    from pipeline.engine.layout import ROUND_STREAM, counter

    plan = RoundPlan(0, 0, 600, 1.0, 1e-6, 1.0, "gradients")
    protocol_object = plugins.resolve("protocol", protocol)("tight")
    call = audited_call(protocol_object, plan, 2, block_size=256, compiled=True)
    assert call.code.startswith("compiled")
    for neighbour in (0, 1):
        compiled = audit._trial_statistics(call, neighbour, 5, 3, seed=2)
        rng = np.random.default_rng(np.random.SeedSequence([2, neighbour, 5]))
        key = np.random.SeedSequence([2, neighbour]).generate_state(2, np.uint64)
        inputs, params = call.pair[neighbour], call.params
        want = []
        for trial in range(5, 8):
            partials = [protocol_object.encode_block(params, [inputs[:, first: first + 256].copy()], np.random.Generator(
                np.random.Philox(key=key, counter=counter(ROUND_STREAM, trial, first // 256))),
                protocol_object.workspace(256, 2)) for first in range(0, 600, 256)]
            released = protocol_object.finish(params, protocol_object.merge(partials), rng)
            want.append(protocol_object.audit_statistic(params, released))
        assert compiled.tolist() == want, neighbour


@pytest.mark.parametrize("problem,optimizer,compiled", [
    ("quadratic", "seq_sgd", True),  # fused sequential rounds
    ("absolute", "full_gd", True),  # compiled fully interactive rounds
    ("absolute", "full_gd_smoothed", True),  # the envelope's twin: compiled fully interactive rounds
    ("logistic", "full_gd", False),  # no compiled twin: encode_block
    ("quadratic", "mean_estimation", False),  # the users send their data: encode_block
])
def test_the_audit_encodes_the_call_with_the_code_the_run_uses(problem, optimizer, compiled):
    """fused_interactive.encodes_compiled says which code a run's first call sends with, and
    audit_run's call is encoded by it (its `code`)."""
    from pipeline.engine.fused_interactive import encodes_compiled

    tree = {"problem": {"name": problem, "dim": 2}, "n_users": 600, "optimizer": {"name": optimizer},
            "privacy": {"protocol": "shuffle_gaussian", "epsilon": 1.0, "delta": 1e-6, "accounting": "tight"},
            "execution": {"backend": "local"}}
    planned = planning.plan_run(config.expand(tree)[0])
    plan = planned.job.schedule.plan(0)
    assert encodes_compiled(planned.job, plan, planned.job.protocol.planned(plan, 2)) is compiled
    found = audit.audit_run(planned, 200)
    assert found["call"]["code"].startswith("compiled" if compiled else "numpy"), found["call"]
