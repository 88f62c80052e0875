"""`python -m pipeline audit CONFIG --lower-bound`: runs a config's optimizer on the
matching lower-bound instance (pipeline/problems/hard.py) and checks its excess
loss against the certified bound that no (ε, δ)-DP algorithm can beat: the
larger of the instance's closed form and its linear programs' minimax bounds
(pipeline/problems/minimax.py); the report names which (`bound_method`) and
gives the closed form beside it.

The bound holds for the excess loss averaged over the vertex v uniform on
{±1}^d, so each seed runs on its own uniformly drawn vertex; the mean over
seeds is then an unbiased estimate of that average. The check fails when
mean − SE < bound (SE = sample standard deviation/√seeds): a run that beats
the bound by more than one standard error spends less noise than its ledger
claims, or its ledger is wrong.
"""
from __future__ import annotations

import math

import numpy as np

from pipeline import config, engine, plugins
from pipeline.errors import ConfigError

INSTANCES = ("lb_convex", "lb_strongly_convex")
# Optimizers whose row is the strongly convex one, or that estimate E x (the quadratic's minimizer).
_STRONGLY_CONVEX_OPTIMIZERS = ("mean_estimation", "seq_phased", "full_phased")


def matching_instance(run: config.RunConfig) -> str:
    """The hard instance of a run's Table 1 row: the strongly convex one for
    strongly convex problems and optimizers, else the convex one.

    Args:
      run: the run's config.

    Returns:
      A name in INSTANCES.
    """
    if run["problem.name"] in INSTANCES:
        return run["problem.name"]
    if run["optimizer.name"] in _STRONGLY_CONVEX_OPTIMIZERS:
        return "lb_strongly_convex"
    try:
        problem = plugins.resolve("problem", run["problem.name"])(dim=run["problem.dim"], radius=run["problem.radius"])
        return "lb_strongly_convex" if problem.strong_convexity > 0 else "lb_convex"
    except Exception:  # a problem that needs options (a dataset): its class alone does not say
        return "lb_convex"


def on_instance(run: config.RunConfig, instance: str, vertex: int, seed: int) -> config.RunConfig:
    """The run moved to a hard instance at one vertex: the same optimizer,
    protocol, n, d, R, ε and δ; the old problem's options dropped.

    Args:
      run: the config's run.
      instance: a name in INSTANCES.
      vertex: the vertex's bits.
      seed: the run's seed.

    Returns:
      The run config.
    """
    values = {key: value for key, value in run.values.items()  # the config's fields kept, the problem's options not
              if not (key.startswith("problem.") and not config.is_field(key))
              or (run["problem.name"] == instance and key in ("problem.flips", "problem.mass"))}
    values.update({"problem.name": instance, "problem.vertex": vertex})
    return config.RunConfig(values, seed)


def audit_lower_bound(run: config.RunConfig, seeds: int, instance: str | None = None) -> dict:
    """Runs `seeds` runs on the hard instance and compares them with its certified bound.

    Args:
      run: the config's first run.
      seeds: how many runs (each its own seed and uniformly drawn vertex).
      instance: the hard instance (default: matching_instance).

    Returns:
      {instance, lower_bound, bound_method (which bound: an LP's or the closed form),
      closed_form_bound, mean, standard_error, runs, ratio, passed, ...}.

    Raises:
      ConfigError: the instance refuses the run (its rules), before any run starts.
    """
    from pipeline import planning

    if run["problem.records_per_user"] != config.FIELDS["problem.records_per_user"].default:
        raise ConfigError("problem.records_per_user", run["problem.records_per_user"],
                          "must be 1 for --lower-bound: the instances' certified bounds are for one record per user")
    instance = instance or matching_instance(run)
    dim = run["problem.dim"]
    vertices = np.random.default_rng(np.random.SeedSequence([18, seeds])).integers(0, 2 ** min(dim, 62), seeds)
    planned = [planning.plan_run(on_instance(run, instance, int(vertex), seed)) for seed, vertex in enumerate(vertices)]
    losses = []
    for plan in planned:  # every run planned (and every rule checked) before the first one starts
        _, records = engine.execute(plan.job, "local", 1)
        losses.append(records[-1].excess_loss)
    losses = np.array(losses)
    problem = planned[0].job.problem.unsmoothed
    bound = problem.lower_bound
    mean = float(losses.mean())
    error = float(losses.std(ddof=1) / math.sqrt(seeds))
    return {
        "instance": instance, "dim": dim, "n_users": run["n_users"], "epsilon": run["privacy.epsilon"],
        "delta": run["privacy.delta"], "optimizer": run["optimizer.name"], "protocol": run["privacy.protocol"],
        "accounting": run["privacy.accounting"], "flips": problem.flips_used, "lower_bound": bound,
        "bound_method": problem.lower_bound_method, "closed_form_bound": problem.closed_form_bound,
        "runs": seeds, "mean_excess_loss": mean, "standard_error": error,
        "ratio_to_bound": mean / bound, "passed": bool(mean - error >= bound),
        "rule": "fails when mean − SE < the certified lower bound",
    }


def parse_seeds(raw: str) -> int:
    """The --seeds flag: 3 to 1000 runs.

    Raises:
      ConfigError: naming --seeds.
    """
    from pipeline.options import integer

    try:
        return integer(3, 1000)(raw)
    except ValueError as err:
        raise ConfigError("--seeds", raw, f"{err} (a standard error needs 3 runs or more)") from None
