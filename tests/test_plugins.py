"""Plug-ins: a researcher's optimizer, protocol or problem in one file outside
the package, run from YAML as a user would (shared/DESIGN.md §2, "Extension
contracts"), and the contracts' refusals of what does not satisfy them."""
from __future__ import annotations

import math
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import special

from pipeline import cli, config, engine, planning, plugins
from pipeline.tracking import FINISHED

REPO = Path(__file__).resolve().parent.parent
MOMENTUM = "experiments/plugins/momentum_sgd.py:MomentumSGD"
SKELLAM = "experiments/plugins/skellam_sum.py:SkellamSum"
HUBER = "experiments/plugins/huber_location.py:HuberLocation"


@pytest.fixture(autouse=True)
def _in_repository(monkeypatch):
    """Plug-in paths (here and in experiments/plugins.yaml) are relative to the repository."""
    monkeypatch.chdir(REPO)


def _module(kind: str, spec: str):
    """The example's module, loaded the way a config's `path:Class` loads it."""
    return sys.modules[plugins.resolve(kind, spec).__module__]


def _run(tmp_path, monkeypatch, backend: str, shards: int, *extra: str) -> pd.DataFrame:
    out = tmp_path / f"{backend}{shards}"
    args = ["run", "experiments/plugins.yaml", "--out", str(out), "--set", f"execution.backend={backend}",
            "--set", f"execution.shards={shards}", "--set", "n_users=1500", "--set", "seeds=[0]",
            "--set", "execution.block_size=256", "--set", f"tracking.mlflow_uri=sqlite:///{tmp_path}/m.db", *extra]
    assert cli.main(args) == 0
    runs = pd.read_parquet(out / "runs.parquet")
    assert (runs["status"] == FINISHED).all()
    rounds = pd.read_parquet(out / "rounds.parquet")
    return rounds.merge(runs[["run_id", "optimizer.name", "privacy.protocol"]], on="run_id").sort_values(
        ["optimizer.name", "privacy.protocol", "round"]).reset_index(drop=True)


def test_examples_run_from_yaml_bit_identical_on_both_backends_and_any_sharding(tmp_path, monkeypatch, ray_session):
    local_one = _run(tmp_path, monkeypatch, "local", 1)
    assert local_one["run_id"].nunique() == 4
    # The point made of all three plug-ins, on 3 Ray actors (6 blocks of 256 users): the same bits.
    on_ray = _run(tmp_path, monkeypatch, "ray", 3, "--set", f"grid.optimizer.name=[{MOMENTUM}]",
                  "--set", f"grid.privacy.protocol=[{SKELLAM}]")
    same_point = local_one[(local_one["optimizer.name"] == MOMENTUM) & (local_one["privacy.protocol"] == SKELLAM)]
    assert len(on_ray) == len(same_point) > 0
    assert same_point["excess_loss"].to_numpy().tobytes() == on_ray["excess_loss"].to_numpy().tobytes()
    assert same_point["epsilon_spent"].to_numpy().tobytes() == on_ray["epsilon_spent"].to_numpy().tobytes()
    final = local_one.groupby(["optimizer.name", "privacy.protocol"])["epsilon_spent"].last()
    assert (final <= 2.0).all() and (final > 1.9).all()  # calibrated to the target, never above it
    assert set(local_one["optimizer.name"]) == {"seq_sgd", MOMENTUM}


def test_momentum_zero_is_seq_sgd_bit_for_bit():
    plain, momentum = (config.expand({"problem": {"name": HUBER, "dim": 3}, "n_users": 800, "optimizer": tree})[0]
                       for tree in ({"name": "seq_sgd"}, {"name": MOMENTUM, "momentum": 0.0}))
    losses = [[r.excess_loss for r in engine.execute(planning.plan_run(run).job, "local", 2)[1]] for run in (plain, momentum)]
    assert losses[0] == losses[1]


def test_an_option_of_another_optimizer_is_one_config_error_line(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(f"problem: {{name: quadratic, dim: 2}}\nn_users: 500\noptimizer: {{name: seq_sgd, momentum: 0.5}}\n"
                    f"execution: {{backend: local}}\ntracking: {{out: {tmp_path / 'out'}}}\n")
    assert cli.main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: optimizer.momentum = 0.5: unknown field") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field,value,rule", [
    ("optimizer.name", "no_such_module_xyz:Thing", "does not import"),
    ("optimizer.name", "experiments/plugins/missing.py:Thing", "does not import"),
    ("optimizer.name", f"{MOMENTUM[:-len('MomentumSGD')]}NoSuchClass", "has no attribute"),
    ("optimizer.name", HUBER, "is not a subclass of pipeline.optimizers.base.Optimizer"),
    ("privacy.protocol", "pipeline.protocols.base:Protocol", "does not implement the contract's abstract members"),
    ("problem.name", "unknown_short_name", "must be one of quadratic"),
    ("optimizer.momentum", 1.5, "must be a number in [0, 1)"),
    ("problem.threshold", -1, "must be a number in (0, inf)"),
])
def test_a_plugin_that_does_not_satisfy_its_contract_is_refused_before_work(tmp_path, monkeypatch, capsys,
                                                                             field, value, rule):
    out = tmp_path / "out"
    args = ["run", "experiments/plugins.yaml", "--out", str(out), "--set", f"{field}={value}",
            "--set", f"tracking.mlflow_uri=sqlite:///{tmp_path}/m.db", "--set", "execution.backend=local"]
    if field.startswith("optimizer."):
        args += ["--set", f"grid.optimizer.name=[{MOMENTUM}]"] if field == "optimizer.momentum" else [
            "--set", f"grid.optimizer.name=[{value}]"]
    if field == "privacy.protocol":
        args += ["--set", f"grid.privacy.protocol=[{value}]"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and rule in err, err
    assert not out.exists() and not (tmp_path / "m.db").exists()


# A problem plug-in whose constants each case below edits: {constants} is its class body's
# constants, {for_run} an optional for_run of its own (one that does not call super()).
CONSTANT_PLUGIN = '''
import dataclasses
import math
from typing import ClassVar

import numpy as np

from pipeline.problems.base import Problem, ball_projection


@dataclasses.dataclass(frozen=True)
class MyProblem(Problem):
    dim: int
    radius: float
    name: ClassVar[str] = "my_problem"
{constants}
    data_norm_bound = 0.1

    @property
    def optimum(self):
        return np.zeros(self.dim)

    def sample(self, rng, count):
        return rng.uniform(-0.05, 0.05, (self.dim, count))

    def gradients(self, theta, data, out=None):
        return np.subtract(theta[:, None], data, out=out)

    def project(self, theta):
        return ball_projection(theta, self.radius)

    def population_loss(self, theta):
        return 0.5 * float(theta @ theta)
{for_run}
'''
VALID_CONSTANTS = {"lipschitz": "2.0", "smoothness": "1.0", "strong_convexity": "1.0", "diameter": "2.0"}
OWN_FOR_RUN = '''
    def for_run(self, run):
        return dataclasses.replace(self, radius=self.radius)
'''


@pytest.mark.parametrize("changed,for_run,rule", [
    ({"lipschitz": None}, "", "MyProblem does not define lipschitz (L, "),
    ({"strong_convexity": None}, "", "MyProblem does not define strong_convexity"),
    ({"diameter": None}, OWN_FOR_RUN, "MyProblem does not define diameter"),  # its for_run is checked too
    ({"lipschitz": "-2.0"}, "", "MyProblem.lipschitz = -2.0 breaks the problem contract"),
    ({"smoothness": "math.nan"}, "", "MyProblem.smoothness = nan breaks"),
    ({"diameter": "math.inf"}, OWN_FOR_RUN, "MyProblem.diameter = inf breaks"),
    ({"strong_convexity": "'1.0'"}, "", "strong_convexity = '1.0' breaks"),
], ids=["no-lipschitz", "no-strong-convexity", "no-diameter-own-for-run", "negative-lipschitz", "nan-smoothness",
        "infinite-diameter-own-for-run", "string-lambda"])
def test_a_problem_plugin_without_a_declared_constant_is_one_config_error_line(tmp_path, capsys, changed,
                                                                               for_run, rule):
    """A constant the Problem contract declares, left out or outside its rule: one config error
    line naming the plug-in, the member and the rule, exit 2, nothing written (not a traceback)."""
    constants = {**VALID_CONSTANTS, **changed}
    body = "\n".join(f"    {member} = {value}" for member, value in constants.items() if value is not None)
    module = tmp_path / "myfile.py"
    module.write_text(CONSTANT_PLUGIN.format(constants=body, for_run=for_run))
    out = tmp_path / "out"
    path = tmp_path / "c.yaml"
    path.write_text(f'problem: {{name: "{module}:MyProblem", dim: 3, radius: 1.0}}\nn_users: 500\nseeds: [0]\n'
                    "optimizer: {name: seq_sgd}\nprivacy: {protocol: central_gaussian, accounting: tight}\n"
                    f"execution: {{backend: local}}\ntracking: {{mlflow_uri: 'sqlite:///{tmp_path}/m.db'}}\n")
    assert cli.main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"config error: problem.name = '{module}:MyProblem': ") and err.count("\n") == 1, err
    assert rule in err, err
    assert not out.exists() and not (tmp_path / "m.db").exists()


def test_the_constants_rule_holds_for_the_valid_plugin(tmp_path):
    """The plug-in the cases above break plans as it is: the check refuses only what breaks a rule."""
    body = "\n".join(f"    {member} = {value}" for member, value in VALID_CONSTANTS.items())
    module = tmp_path / "myfile.py"
    module.write_text(CONSTANT_PLUGIN.format(constants=body, for_run=OWN_FOR_RUN))
    run = config.expand({"problem": {"name": f"{module}:MyProblem", "dim": 3}, "n_users": 500,
                         "privacy": {"protocol": "central_gaussian", "accounting": "tight"}})[0]
    assert planning.plan_run(run).job.problem.lipschitz == 2.0


def test_an_optimizer_plugin_declaring_an_unknown_override_is_one_config_error_line(tmp_path, capsys):
    """`overrides` names the optimizer.<field>s from_config reads: a name outside OVERRIDES
    (here a typo) would never be passed nor refused, so the class is refused."""
    module = tmp_path / "typo_sgd.py"
    module.write_text(textwrap.dedent('''
        from pipeline.optimizers.seq_sgd import SeqSGD

        class TypoSGD(SeqSGD):
            name = "typo_sgd"
            overrides = frozenset({"round", "step_size"})
    '''))
    path, out = tmp_path / "c.yaml", tmp_path / "out"
    path.write_text(f'optimizer: {{name: "{module}:TypoSGD"}}\nn_users: 500\nexecution: {{backend: local}}\n'
                    f"tracking: {{mlflow_uri: 'sqlite:///{tmp_path}/m.db'}}\n")
    assert cli.main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: optimizer.name = ") and err.count("\n") == 1, err
    assert "TypoSGD.overrides" in err and "among rounds, batch_size, step_size" in err, err
    assert not out.exists()


def test_an_event_no_accountant_supports_is_refused_at_planning(tmp_path):
    """A protocol whose event has no accountant: one config error naming the protocol, before any run."""
    module = tmp_path / "unaccounted.py"
    module.write_text(textwrap.dedent('''
        import attr
        from dp_accounting import dp_event
        from pipeline.protocols.sums import CentralGaussian

        @attr.s(frozen=True, slots=True, auto_attribs=True)
        class MysteryEvent(dp_event.DpEvent):
            users: int
            population: int

        class Unaccounted(CentralGaussian):
            name = "unaccounted"

            def event(self, params, block_size):
                return MysteryEvent(params.users, params.population)
    '''))
    run = config.expand({"n_users": 200, "optimizer": {"name": "seq_sgd"},
                         "privacy": {"protocol": f"{module}:Unaccounted"}})[0]
    with pytest.raises(config.ConfigError, match="privacy.protocol .* no accountant supports MysteryEvent"):
        planning.plan_run(run)


def test_a_short_name_registered_by_an_installed_package_entry_point(tmp_path, monkeypatch):
    """An installed distribution's entry point in shuffle_sco.optimizers names a class by a short name."""
    (tmp_path / "my_sgd_pkg.py").write_text((REPO / "experiments/plugins/momentum_sgd.py").read_text())
    dist = tmp_path / "my_sgd_pkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-sgd-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[shuffle_sco.optimizers]\nheavy_ball = my_sgd_pkg:MomentumSGD\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.resolve.cache_clear()
    try:
        assert "heavy_ball" in plugins.short_names("optimizer")
        run = config.expand({"n_users": 400, "optimizer": {"name": "heavy_ball", "momentum": 0.3}})[0]
        assert planning.plan_run(run).job.optimizer.momentum == 0.3
    finally:
        plugins.resolve.cache_clear()


# ---- the Skellam example's accountant against exact Rényi divergences ----

def _skellam_logpmf(k: np.ndarray, mu: float) -> np.ndarray:
    """log P(Sk(μ, μ) = k) = log Σ_j Pois_μ(j + |k|) Pois_μ(j), in log space (no underflow in the tails)."""
    j = np.arange(0, int(4 * mu + 60 * math.sqrt(mu) + 200))[:, None]
    size = np.abs(k)[None, :]
    terms = (2 * j + size) * math.log(mu) - special.gammaln(j + 1) - special.gammaln(j + size + 1) - 2 * mu
    return special.logsumexp(terms, axis=0)


def _skellam_divergences(shift: int, mu: float, orders: np.ndarray) -> np.ndarray:
    """D_α(Sk(μ, μ) ‖ Sk(μ, μ) + shift) at each order, summed over a window widened until its
    edge terms are negligible (both pmfs read from one table of log P(k))."""
    half = int(12 * math.sqrt(2 * mu) + 4 * abs(shift) + 40)
    while True:
        table = _skellam_logpmf(np.arange(-half - abs(shift), half + abs(shift) + 1), mu)
        log_p = table[abs(shift): abs(shift) + 2 * half + 1]  # k = −half … half
        log_q = table[abs(shift) - shift: abs(shift) - shift + 2 * half + 1]  # k − shift
        terms = orders[:, None] * log_p + (1 - orders[:, None]) * log_q
        total = special.logsumexp(terms, axis=1)
        if np.all(np.maximum(terms[:, 0], terms[:, -1]) < total - 40):  # all but e^-40 of each sum inside
            return total / (orders - 1)
        half *= 2


@pytest.mark.parametrize("mu", [20.0, 400.0])
@pytest.mark.parametrize("shifts", [(1,), (4,), (3, -2, 1), (6, 6)])
def test_skellam_rdp_bound_is_above_the_exact_divergence_and_near_it(mu, shifts):
    accountant = _module("protocol", SKELLAM)
    orders = np.array([2.0, 4.0, 16.0, 64.0])
    l1, l2 = float(sum(map(abs, shifts))), math.sqrt(sum(s * s for s in shifts))
    bound = accountant.skellam_rdp(l1, l2, mu, orders)
    # A product of independent coordinates: the divergences add.
    exact = sum(_skellam_divergences(s, mu, orders) for s in shifts)
    assert np.all(exact <= bound)
    gaussian = orders * l2**2 / (4 * mu)  # the Gaussian of the same variance 2μ, a lower envelope
    assert np.all(bound <= gaussian + 3 * l1 / (4 * mu) + 1e-12)
    if mu >= 400:
        assert np.all(bound <= 1.15 * exact)  # tight where the noise is large


def test_skellam_noise_has_the_planned_variance():
    """The released sum's noise is Sk(μ, μ): variance 2μ per coordinate (a noise that were too small leaks)."""
    module = _module("protocol", SKELLAM)
    protocol = module.SkellamSum("tight", scale=64.0)
    from pipeline.protocols.base import RoundPlan

    params = protocol.plan(RoundPlan(0, 0, 1000, 1.0, 1e-6, 1.0, "gradients"), 50)
    # 50,000 coordinates: 5 SE of the sample variance is 3% of it, so 10% too little noise fails.
    draws = np.array([protocol.decode(params, protocol.encode_block(params, [np.zeros((50, 1000))],
                                                                     np.random.default_rng(seed)))
                      for seed in range(1000)]).ravel() * params.scale
    variance = 2 * params.mu
    # Var of the sample variance: σ⁴(2/(m−1) + κ/m), with Skellam's excess kurtosis κ = 1/(2μ).
    m = draws.size
    se = variance * math.sqrt(2 / (m - 1) + 1 / (2 * params.mu) / m)
    assert abs(draws.var(ddof=1) - variance) < 5 * se
    assert abs(draws.mean()) < 5 * math.sqrt(variance / m)


def test_huber_population_loss_is_the_average_over_every_data_point():
    """The closed form against brute force over the 2^d support, and θ* a minimizer."""
    module = _module("problem", HUBER)
    problem = module.HuberLocation(dim=3, radius=1.0, threshold=0.15)
    signs = np.array(np.meshgrid(*[[-1.0, 1.0]] * 3)).reshape(3, -1)
    points = problem.center[:, None] + problem.spread * signs
    rng = np.random.default_rng(0)
    for theta in [problem.optimum, *rng.uniform(-0.5, 0.5, (5, 3))]:
        brute = np.mean(module.huber(theta[:, None] - points, 0.15).sum(axis=0))
        assert problem.population_loss(theta) == pytest.approx(brute, rel=1e-13)
        assert problem.excess_loss(theta) >= 0.0
    grads = problem.gradients(rng.uniform(-0.5, 0.5, 3), points)
    assert np.linalg.norm(grads, axis=0).max() <= problem.lipschitz + 1e-12
    # The prox is the minimizer of h(θ' − x) + ‖θ' − θ‖²/(2t): its optimality condition holds coordinate-wise.
    theta, step = rng.uniform(-0.5, 0.5, 3), 0.7
    prox = problem.prox(theta, points, step)
    residual = np.clip(prox - points, -0.15, 0.15) + (prox - theta[:, None]) / step
    assert np.abs(residual).max() < 1e-12


def test_readme_option_tables_are_the_declarations():
    """The README's option tables are generated from the classes' declarations, not written by hand."""
    from pipeline.options import options_table

    readme = (REPO / "README.md").read_text()
    shown = readme.split("<!-- options:begin -->\n")[1].split("\n<!-- options:end -->")[0]
    tables = []
    for kind, section in (("optimizer", "optimizer"), ("protocol", "privacy"), ("problem", "problem")):
        classes = [cls for cls in plugins.kinds()[kind].builtins.values() if cls.options]
        if classes:
            tables.append(options_table(classes, section))
    assert shown == "\n\n".join(tables)


def test_plans_are_remembered_per_budget_unless_a_plugin_plan_reads_the_round(tmp_path):
    """Shards reuse the driver's planned parameters (Protocol.planned), keyed by the
    call's budget; a protocol whose plan reads the round index is planned afresh."""
    import dataclasses

    from pipeline.protocols.base import RoundPlan
    from pipeline.protocols.sums import CentralGaussian

    class RoundAware(CentralGaussian):
        def plan(self, round_plan, dim):
            return dataclasses.replace(super().plan(round_plan, dim), users=round_plan.users + round_plan.round)

    plans = [RoundPlan(r, 100 * r, 100 * r + 100, 1.0, 1e-6, 1.0, "gradients") for r in range(3)]
    for cls, remembered in ((CentralGaussian, True), (RoundAware, False)):
        protocol = cls("tight")
        for plan in plans:
            protocol.remember(plan, 5, protocol.plan(plan, 5))
        assert (protocol.__dict__["_plans"] is not None) == remembered
        for plan in plans:  # what a shard gets equals what the driver planned for that round
            assert protocol.planned(plan, 5) == protocol.plan(plan, 5)


def test_a_relative_plugin_file_is_found_in_each_working_directory(tmp_path, monkeypatch):
    """The classes found were remembered by name alone: `mine.py:Mine` in a second folder (a
    notebook that changes directory) gave the first folder's class."""
    for folder, marker in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "mine.py").write_text(
            "from pipeline.problems.quadratic import Quadratic\n\n\n"
            f"class Mine(Quadratic):\n    marker = {marker}\n")
    found = []
    for folder in ("a", "b", "a"):
        monkeypatch.chdir(tmp_path / folder)
        found.append(plugins.resolve("problem", "mine.py:Mine").marker)
    assert found == [1, 2, 1]


def test_plug_in_optimizers_run_compiled_on_ray_actors_as_in_process(tmp_path, monkeypatch, ray_session):
    """The momentum and AdaGrad-Norm plug-ins on the quadratic run fused (their own stages, compiled
    from a file the package never names: Optimizer.compiled_update); shipped by value to 2 Ray shard
    actors, their rounds are the in-process run's, bit for bit."""
    adagrad = "experiments/plugins/adagrad_norm.py:AdaGradNorm"
    for name in (MOMENTUM, adagrad):
        (run,) = config.expand({"problem": {"name": "quadratic", "dim": 3}, "n_users": 1500, "optimizer": {"name": name},
                                "privacy": {"epsilon": 2.0, "delta": 1e-6}})
        assert engine.compiles(planning.plan_run(run).job)
    path = tmp_path / "compiled_plugins.yaml"
    path.write_text(textwrap.dedent(f"""\
        experiment: compiled-plugins
        problem: {{name: quadratic, dim: 3, radius: 1.0}}
        n_users: 1500
        optimizer: {{name: seq_sgd}}
        privacy: {{protocol: central_gaussian, epsilon: 2.0, delta: 1.0e-6, accounting: tight}}
        seeds: [0]
        grid: {{optimizer.name: ["{MOMENTUM}", "{adagrad}"]}}
        execution: {{block_size: 256}}
        """))
    frames = []
    for runs, rounds in _local_and_ray(path, tmp_path):
        assert len(runs) == 2
        rounds = rounds.merge(runs[["run_id", "optimizer.name"]], on="run_id")
        frames.append(rounds.sort_values(["optimizer.name", "round"])["excess_loss"].to_numpy())
    assert len(frames[0]) > 20 and frames[0].tobytes() == frames[1].tobytes()


def _local_and_ray(path: Path, tmp_path: Path) -> list:
    """`pipeline run` of a grid file on the local backend (1 shard), then on Ray (2 shard actors):
    each one's (runs, rounds) tables, every run FINISHED."""
    tables = []
    for backend, shards in (("local", 1), ("ray", 2)):
        out = tmp_path / backend
        assert cli.main(["run", str(path), "--out", str(out), "--set", f"execution.backend={backend}",
                         "--set", f"execution.shards={shards}", "--set",
                         f"tracking.mlflow_uri=sqlite:///{tmp_path}/m.db"]) == 0
        runs = pd.read_parquet(out / "runs.parquet")
        assert (runs["status"] == FINISHED).all()
        tables.append((runs, pd.read_parquet(out / "rounds.parquet")))
    return tables


def _huber_job(protocol: str, shards: int = 1):
    (run,) = config.expand({"problem": {"name": HUBER, "dim": 3, "radius": 1.0, "threshold": 0.15}, "n_users": 3000,
                            "optimizer": {"name": "seq_sgd"}, "seeds": [4],
                            "privacy": {"epsilon": 2.0, "delta": 1e-6, "protocol": protocol, "accounting": "tight"},
                            "execution": {"backend": "local", "shards": shards, "block_size": 256}})
    return planning.plan_run(run).job


@pytest.mark.parametrize("protocol", ["cjmp_vec", "shuffle_gaussian", "girgis_l2"])
def test_the_huber_plug_in_runs_compiled_with_the_python_paths_bits(protocol):
    """The Huber problem plug-in states its compiled twin in its own file (HuberTwin: clipped
    gradients, its losses, its users drawn with pipeline.draws), so its sequential runs take the
    fused rounds with no edit to the package; every block's users, every round's record and the
    final state are the Python path's, bit for bit."""
    from pipeline.engine import fused
    from pipeline.engine.shard import Shard

    job = _huber_job(protocol)
    assert engine.compiles(job)
    shard = Shard(job, 0, job.layout.n_blocks)
    rounds = fused.FusedRounds(shard)
    for block in range(job.layout.n_blocks):
        assert np.array_equal(rounds.draw_block(block), shard.draw_block(block)), block
    start = job.optimizer.start(job.seed)
    fused_state, fused_records = shard.run_rounds(start, 0, job.schedule.rounds)
    python_state, python_records = Shard(job, 0, job.layout.n_blocks).python_rounds(start, 0, job.schedule.rounds)
    assert len(fused_records) == job.schedule.rounds > 20
    for name in ("excess_loss", "population_loss", "users"):
        assert np.asarray(fused_records.column(name)).tobytes() == np.asarray(python_records.column(name)).tobytes()
    assert all(np.array_equal(a, b) for a, b in zip(fused_state[:-1], python_state[:-1]))
    losses = np.asarray(fused_records.column("excess_loss"))
    assert losses[-1] < losses[0]  # it learns: the clipped gradients are the loss's


def test_a_huber_plug_in_subclass_that_changes_its_gradients_keeps_the_python_path():
    """A subclass of the plug-in that overrides what its twin reproduces is not fused."""
    module = _module("problem", HUBER)

    class Doubled(module.HuberLocation):
        def gradients(self, theta, data, out=None):
            return 2.0 * super().gradients(theta, data, out)

    assert module.HuberLocation(dim=2, radius=1.0).compiled_problem() is not None
    assert Doubled(dim=2, radius=1.0).compiled_problem() is None


def test_the_huber_plug_in_runs_compiled_on_ray_actors_as_in_process(tmp_path, ray_session):
    """Shipped by value to 2 Ray shard actors, the plug-in's twin (its functions compiled from a
    module the workers cannot import) gives the in-process run's rounds, bit for bit."""
    path = tmp_path / "huber.yaml"
    path.write_text(textwrap.dedent(f"""\
        experiment: compiled-huber
        problem: {{name: "{HUBER}", dim: 3, radius: 1.0, threshold: 0.15}}
        n_users: 3000
        optimizer: {{name: seq_sgd}}
        privacy: {{protocol: cjmp_vec, epsilon: 2.0, delta: 1.0e-6, accounting: tight}}
        seeds: [4]
        execution: {{block_size: 256}}
        """))
    losses = [rounds.sort_values("round")["excess_loss"].to_numpy() for _, rounds in _local_and_ray(path, tmp_path)]
    assert len(losses[0]) > 20 and losses[0].tobytes() == losses[1].tobytes()
    assert losses[0].tobytes() == np.asarray(_fused_losses(_huber_job("cjmp_vec"))).tobytes()


def _fused_losses(job):
    from pipeline.engine.shard import Shard

    shard = Shard(job, 0, job.layout.n_blocks)
    return shard.run_rounds(job.optimizer.start(job.seed), 0, job.schedule.rounds)[1].column("excess_loss")


def _skellam_job(optimizer: dict, protocol: str = SKELLAM):
    (run,) = config.expand({"problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": 3000,
                            "optimizer": optimizer, "seeds": [4],
                            "privacy": {"epsilon": 2.0, "delta": 1e-6, "protocol": protocol, "model": "central"},
                            "execution": {"backend": "local", "shards": 1, "block_size": 256}})
    return planning.plan_run(run).job


@pytest.mark.parametrize("optimizer", [{"name": "seq_sgd"}, {"name": "full_gd", "rounds": 4}])
def test_the_skellam_plug_in_runs_compiled_with_the_python_paths_bits(optimizer):
    """The Skellam protocol plug-in states its compiled twin in its own file (SkellamEncoding: the
    clip, the random rounding, numpy's Poisson noise via pipeline.draws, the decode), so its
    sequential rounds and its fully interactive rounds (full_gd: the block kernel, a block's units
    merged in Python) run compiled with no edit to the package; every round's record and the final
    state are the Python path's, bit for bit."""
    from pipeline.engine import fused_interactive
    from pipeline.engine.shard import Shard

    job = _skellam_job(optimizer)
    assert engine.compiles(job)
    plan = job.schedule.plan(0)
    params = job.protocol.planned(plan, job.problem.dim)
    assert fused_interactive.InteractiveRounds.encoding(plan, params, np.zeros(3), job.protocol) is not None
    start = job.optimizer.start(job.seed)
    fused_state, fused_records = Shard(job, 0, job.layout.n_blocks).run_rounds(start, 0, job.schedule.rounds)
    python_state, python_records = Shard(job, 0, job.layout.n_blocks).python_rounds(start, 0, job.schedule.rounds)
    assert len(fused_records) == job.schedule.rounds >= 4
    for name in ("excess_loss", "population_loss", "users"):
        assert np.asarray(fused_records.column(name)).tobytes() == np.asarray(python_records.column(name)).tobytes()
    assert all(np.array_equal(a, b) for a, b in zip(fused_state[:-1], python_state[:-1]))
    losses = np.asarray(fused_records.column("excess_loss"))
    assert losses[-1] < losses[0]


def test_the_under_noised_skellam_plug_in_keeps_the_python_path():
    """The audit's broken subclass overrides encode_block, which the twin reproduces: no twin."""
    module = _module("protocol", SKELLAM)
    params = module.SkellamParams(100, 3, 1.0, 1024.0, 5.0)
    assert module.SkellamSum().fused_encoding(params) is not None
    assert module.UnderNoisedSkellamSum().fused_encoding(params) is None


_FUSED_RUN = """
import sys
from pipeline import config, engine, planning
(run,) = config.expand({"problem": {"name": sys.argv[1], "dim": 3, "radius": 1.0}, "n_users": 600,
                        "optimizer": {"name": "seq_sgd"}, "seeds": [0], "execution": {"backend": "local", "shards": 1},
                        "privacy": {"epsilon": 1.0, "delta": 1e-6, "protocol": "cjmp_vec", "accounting": "tight"}})
job = planning.plan_run(run).job
assert engine.compiles(job)
engine.execute(job, "local", 1)
"""


def test_a_plug_in_twins_cached_kernels_do_not_reach_a_process_without_the_plug_in():
    """numba's index file unpickles every key it holds, and a twin's kernel's key names its class:
    a process that cached the Huber plug-in's kernels must leave the quadratic's loadable by a
    process that never imports the plug-in (each kernel's cache has files of its own,
    compiled._KeyedCache); a shared index failed there with ModuleNotFoundError."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    for problem in (HUBER, "quadratic"):
        done = subprocess.run([sys.executable, "-c", _FUSED_RUN, problem], cwd=root, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
