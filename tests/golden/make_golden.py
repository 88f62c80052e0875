"""Generates tests/golden/golden_runs.json: bit-exact results of a fixed set of runs.

The golden file pins, for every optimizer with every protocol it accepts (in
both accounting modes where time allows, plus a few variants), what
``python -m pipeline run`` writes: the rounds of rounds.parquet, the run
folder's ledger.json and the MLflow run's resolved hyperparameters
(``resolved.*`` params). tests/test_golden.py re-runs each config and demands
bit-identical values, so refactors of the package are proven not to change a
single result. Only the public command is used (``pipeline.cli.main(["run",
...])`` in this process, one results folder per case, one MLflow store), so
every case also exercises recording, MLflow, Parquet and the rates.

Every run happens in NUMERIC_ENV (the script re-executes itself there and
checks that OpenBLAS and numpy took it): float results are then the same bits
on any x86-64 CPU with AVX2 and FMA (README, "Reproducibility").

When to regenerate: only in a commit that deliberately changes results
(random streams, a formula, a calibration, a ledger field or its wording),
never to make a failing refactor pass. Say in that commit message why every
changed entry changed.

How to regenerate (from the repository root, at the commit whose results
are to be pinned; run it from a clean checkout so the right ``pipeline`` is
imported)::

    git worktree add /tmp/golden-src HEAD
    PYTHONPATH=/tmp/golden-src .venv/bin/python tests/golden/make_golden.py
    git worktree remove /tmp/golden-src --force

It prints where ``pipeline`` was imported from (check it is the frozen
checkout, not the working tree) and each run's time, checks that the runs
marked ``shards_check`` give the same fingerprint with 3 shards as with 1,
and overwrites golden_runs.json next to this file, recording the source
commit and NUMERIC_ENV. Then run ``pytest tests/test_golden.py`` against the
working tree. ``--check OUT`` writes every case's fingerprint (and the shard
variant's) to OUT/fingerprints.json instead: that is what the test runs.

Combinations left out, with the reason the current code gives (n ≤ 5000, d = 3, ε = 1, δ = 1e-6):

* ``girgis_binary`` runs with ``mean_estimation`` on ``bernoulli`` only (binary data).
* ``report_noisy_max`` runs with ``frank_wolfe_l1`` only; ``frank_wolfe_l1`` runs with it alone
  (with ``full_gd``, ``full_gd_smoothed`` and ``full_phased`` the refusal is a ValueError, not a
  ConfigError, from plan_run).
* ``mean_estimation`` refuses ``l1_least_squares`` (labelled data); the smoothed optimizers need a
  closed-form prox (none for ``l1_least_squares``); ``seq_agd``, ``pnsgd`` and ``pan_agd`` need a
  smooth loss; the phased ones need λ > 0 (``quadratic``, ``elastic``, ``bernoulli``);
  ``mirror_descent_l1`` and ``frank_wolfe_l1`` need an ℓ1-ball problem.
* ``sgd`` runs with ``none`` only; ``dp_sgd``, ``pnsgd`` and ``pan_agd`` with ``central_gaussian`` only;
  ``mirror_descent_l1`` with ``central_gaussian``, ``shuffle_gaussian`` or ``none``.
* ``cldp_sgd`` and ``dss_sgd`` sample users: ``cjmp_vec`` and ``local_l2`` have no accountant
  for sampled rounds.
* ``pan_agd`` needs ε < 1 (Lemma C.5): run at ε = 0.5.
* ``full_gd`` / ``full_gd_smoothed`` in paper mode with ``girgis_*``, ``central_gaussian`` or
  ``shuffle_gaussian`` at the default T (T = n = 2000): advanced composition leaves each round
  ε0 ≈ 0.002 and the calibration finds no noise level / local budget (ValueError); ``local_l2``
  at the default T is refused by the budget guard (ε = 4.25 > 1). These run here with
  ``optimizer.rounds: 5`` instead (tight mode too, for a like-for-like pair).
* ``full_phased`` (no ``optimizer.rounds`` override: each phase sets its own) in paper mode at
  n = 1000–2000 fails the same way (ValueError, or the budget guard for ``local_l2``): it runs
  here at n = 300 (5 groups of 60 users, 3 rounds each).

Left out for time only (the test must stay under a minute on 2 cores; the Girgis and shuffle-
Gaussian calibrations cost 0.5–2 s of CPU per distinct round size, and are cached by it):

* Every optimizer that takes seed 001's randomizers runs with each of them at least in paper
  mode, and with at least one of ``girgis_l1``, ``girgis_linf``, ``girgis_l2`` in both modes,
  rotated so each variant meets several optimizers:
  ``seq_sgd``, ``seq_agd`` and ``seq_agd_smoothed`` with all three, ``mean_estimation`` l2 (on
  26 users, seq_sgd's round), ``seq_phased`` linf, ``full_gd`` and ``full_gd_smoothed`` l1,
  ``full_phased`` l2, ``cldp_sgd`` linf, ``dss_sgd`` l1. ``seq_agd`` and ``seq_agd_smoothed`` run the costly protocols
  (``COSTLY``) at ``optimizer.batch_size: 26``, seq_sgd's own B, to reuse its calibrations; their
  theorems' B is pinned by the ``CHEAP`` protocols.
* ``seq_phased`` runs the costly protocols on ``elastic`` only (one B for every phase).
* ``optimizer.parameters: calibrated`` runs in paper mode only (a tight-mode search over B costs
  seconds), except ``full_gd`` at T = 5; ``privacy.levels``/``messages`` in paper mode only.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOLDEN_PATH = Path(__file__).with_name("golden_runs.json")
FORMAT_VERSION = 2  # 2: fingerprints read back from what `pipeline run` wrote (1: engine records)
# The numeric environment the golden runs are pinned and checked in (README, "Reproducibility").
# Float results depend on the CPU through two dispatches: OpenBLAS picks its kernel per CPU (ddot's
# FMA chain, in θ·θ and the losses), numpy its SIMD loops (exp, log, reductions). Fixing both to
# x86-64-v3, which every machine of this kind has, makes the runs' last bits the same on any of them.
NUMERIC_ENV = {
    "OPENBLAS_CORETYPE": "Haswell",  # OpenBLAS's AVX2 + FMA kernels, whatever kernel this CPU would get
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",  # numpy's AVX2 loops, never its AVX-512 ones
    "OPENBLAS_NUM_THREADS": "1",  # a threaded BLAS call splits its sums by the number of cores
}
# The CPU features NUMERIC_ENV needs (numpy's names): without them the pinned kernels cannot run.
NEEDED_CPU_FEATURES = ("AVX2", "FMA3")
# Runs with more rounds than this store a sha256 of their rounds plus the first and last few.
INLINE_ROUNDS = 40
EDGE_ROUNDS = 3
SEED = 0
DIM = 3
N_USERS = 500
# Small blocks, so that n = 500 users make 4 blocks and the shard count is a real test.
BLOCK_SIZE = 128
SHARD_VARIANT = 3

# Sequential optimizers run on more users (more rounds); their cost is in the calibrations, not n.
SEQ_N_USERS = 2000
# seq_sgd's B = ⌈√d ln(d/δ)/ε⌉ at d = 3, ε = 1, δ = 1e-6: the other sequential optimizers use it
# with the costly protocols, so that they reuse seq_sgd's calibrations (cached by round size).
SHARED_BATCH = 26

# Every protocol the seed-000 optimizers accept (see the module docstring for what is refused).
ALL_UNSAMPLED = ("cjmp_vec", "girgis_l1", "girgis_linf", "girgis_l2", "none", "central_gaussian",
                 "shuffle_gaussian", "local_l2")
# Their calibration is cheap (or none): run at each optimizer's own round size.
CHEAP = ("cjmp_vec", "none", "local_l2")
# Their calibration costs 0.5-2 s of CPU per distinct round size.
COSTLY = ("girgis_l1", "girgis_linf", "girgis_l2", "central_gaussian", "shuffle_gaussian")
ALL_PROBLEMS = ("quadratic", "logistic", "absolute", "elastic", "bernoulli", "l1_least_squares")


def _tree(optimizer: str, protocol: str, accounting: str, problem: str, *, n: int = N_USERS,
          epsilon: float = 1.0, optimizer_extra: dict | None = None, privacy_extra: dict | None = None,
          execution_extra: dict | None = None) -> dict:
    """A nested config, as a YAML file would hold it, for one golden run."""
    return {
        "experiment": "golden",
        "problem": {"name": problem, "dim": DIM, "radius": 1.0},
        "n_users": n,
        "optimizer": {"name": optimizer, **(optimizer_extra or {})},
        "privacy": {"protocol": protocol, "epsilon": epsilon, "delta": 1e-6, "accounting": accounting,
                    **(privacy_extra or {})},
        "seeds": [SEED],
        "execution": {"backend": "local", "shards": 1, "simulation": "exact", "block_size": BLOCK_SIZE,
                      **(execution_extra or {})},
    }


def _case_id(tree: dict, suffix: str = "") -> str:
    """A readable id: optimizer/protocol/accounting/problem/n-d-ε[/variant]."""
    return "/".join([tree["optimizer"]["name"], tree["privacy"]["protocol"], tree["privacy"]["accounting"],
                     tree["problem"]["name"],
                     f"n{tree['n_users']}-d{tree['problem']['dim']}-eps{tree['privacy']['epsilon']:g}"]
                    + ([suffix] if suffix else []))


def _both_modes(optimizer: str, protocols: tuple[str, ...], problems: tuple[str, ...], suffix: str = "",
                shards_check: tuple[str, ...] = (), modes: tuple[str, ...] = ("paper", "tight"),
                **kwargs) -> list[dict]:
    """Cases for each protocol in both accounting modes (or `modes`); problems rotate over the protocols."""
    cases = []
    for index, protocol in enumerate(protocols):
        problem = problems[index % len(problems)]
        for accounting in modes:
            tree = _tree(optimizer, protocol, accounting, problem, **kwargs)
            cases.append({"id": _case_id(tree, suffix), "tree": tree,
                          "shards_check": protocol in shards_check and accounting == "tight"})
    return cases


def golden_cases() -> list[dict]:
    """The golden set: {id, tree, shards_check} per run, in a fixed order."""
    seq = {"n": SEQ_N_USERS}
    shared_batch = {"n": SEQ_N_USERS, "optimizer_extra": {"batch_size": SHARED_BATCH}}
    full_rounds = {"optimizer_extra": {"rounds": 5}}
    cases = [
        *_both_modes("mean_estimation", ("cjmp_vec", "none", "central_gaussian", "shuffle_gaussian", "local_l2"),
                     ("quadratic", "logistic", "absolute", "elastic", "bernoulli"),
                     shards_check=("cjmp_vec", "shuffle_gaussian")),
        # One call over 26 users: the round seq_sgd calibrates below (cached), so it costs nothing.
        *_both_modes("mean_estimation", ("girgis_l2",), ("quadratic",), n=SHARED_BATCH),
        *_both_modes("mean_estimation", ("girgis_binary",), ("bernoulli",), shards_check=("girgis_binary",)),
        # Sequential family at n = 2000. seq_sgd pays each calibration at its B = 26; seq_agd and
        # seq_agd_smoothed reuse them with batch_size: 26 for the costly protocols, and run the
        # cheap ones at their theorems' B.
        *_both_modes("seq_sgd", ALL_UNSAMPLED, ALL_PROBLEMS, shards_check=("cjmp_vec", "local_l2"), **seq),
        *_both_modes("seq_agd", CHEAP, ("logistic", "quadratic", "bernoulli"), **seq),
        *_both_modes("seq_agd", COSTLY, ("l1_least_squares", "logistic", "quadratic"), suffix=f"B={SHARED_BATCH}",
                     **shared_batch),
        *_both_modes("seq_agd_smoothed", CHEAP, ("absolute", "elastic"), **seq),
        *_both_modes("seq_agd_smoothed", COSTLY, ("elastic", "absolute"), suffix=f"B={SHARED_BATCH}",
                     shards_check=("girgis_l2",), **shared_batch),
        # seq_phased sets each phase's batch itself (no batch_size); on elastic every phase has B = 85,
        # one calibration per protocol (on quadratic each phase's B differs: 1-4 s of CPU per protocol,
        # so the smooth path runs with the uncalibrated protocols).
        *_both_modes("seq_phased", CHEAP, ("elastic", "quadratic", "quadratic"), **seq),
        *_both_modes("seq_phased", ("central_gaussian", "shuffle_gaussian", "girgis_linf"), ("elastic",),
                     shards_check=("girgis_linf",), **seq),
        # full_gd family: cjmp_vec and none at the theorem's T (n = 200: T = 32), the others at
        # T = 5 (see the module docstring); full_gd_smoothed reuses full_gd's calibrations.
        *_both_modes("full_gd", ("cjmp_vec", "none"), ("logistic", "quadratic"), n=200, shards_check=("cjmp_vec",)),
        *_both_modes("full_gd", ("girgis_l1", "central_gaussian", "shuffle_gaussian", "local_l2"), ALL_PROBLEMS,
                     suffix="rounds=5", **full_rounds),
        *_both_modes("full_gd_smoothed", ("cjmp_vec", "none"), ("absolute", "elastic"), n=200),
        *_both_modes("full_gd_smoothed", ("girgis_l1", "central_gaussian", "shuffle_gaussian", "local_l2"),
                     ("absolute", "elastic"), suffix="rounds=5", **full_rounds),
        *_both_modes("full_phased", (*CHEAP, "central_gaussian", "shuffle_gaussian", "girgis_l2"),
                     ("elastic", "quadratic"), n=300, shards_check=("none",)),
        *_both_modes("pan_agd", ("central_gaussian",), ("logistic",), epsilon=0.5, shards_check=("central_gaussian",)),
        *_both_modes("sgd", ("none",), ("quadratic",)),
        *_both_modes("dp_sgd", ("central_gaussian",), ("logistic",), shards_check=("central_gaussian",)),
        *_both_modes("cldp_sgd", ("none", "central_gaussian", "shuffle_gaussian", "girgis_linf"), ALL_PROBLEMS,
                     shards_check=("girgis_linf",)),
        *_both_modes("dss_sgd", ("none", "central_gaussian", "shuffle_gaussian", "girgis_l1"),
                     ("bernoulli", "l1_least_squares", "quadratic", "logistic"), shards_check=("shuffle_gaussian",)),
        *_both_modes("pnsgd", ("central_gaussian",), ("logistic",), shards_check=("central_gaussian",)),
        *_both_modes("mirror_descent_l1", ("none", "central_gaussian", "shuffle_gaussian"), ("l1_least_squares",),
                     shards_check=("shuffle_gaussian",)),
        *_both_modes("frank_wolfe_l1", ("report_noisy_max",), ("l1_least_squares",),
                     shards_check=("report_noisy_max",)),
        # Variants.
        *_both_modes("frank_wolfe_l1", ("report_noisy_max",), ("l1_least_squares_active",)),
        *_both_modes("mirror_descent_l1", ("central_gaussian",), ("l1_least_squares_active",)),
        *_both_modes("dp_sgd", ("central_gaussian",), ("quadratic",), suffix="sampling=shuffled",
                     optimizer_extra={"sampling": "shuffled"}, shards_check=("central_gaussian",)),
        *_both_modes("seq_sgd", ("cjmp_vec",), ("logistic",), suffix="honest=0.5", privacy_extra={"honest_fraction": 0.5},
                     shards_check=("cjmp_vec",), **seq),
        *_both_modes("full_gd", ("cjmp_vec",), ("quadratic",), suffix="rounds=5,calibrated",
                     optimizer_extra={"parameters": "calibrated", "rounds": 5}),
        *_both_modes("seq_sgd", ("none",), ("elastic",), suffix="batch=50,step=0.1",
                     optimizer_extra={"batch_size": 50, "step_size": 0.1}, **seq),
        # The other (optimizer, seed 001 randomizer) pairs, in paper mode, at sizes whose calibrations
        # the cases above already paid: every pair a config can run is run here once.
        *_both_modes("mean_estimation", ("girgis_l1", "girgis_linf"), ("quadratic", "elastic"), n=SHARED_BATCH,
                     modes=("paper",)),
        *_both_modes("seq_phased", ("girgis_l1", "girgis_l2"), ("elastic",), modes=("paper",), **seq),
        *_both_modes("full_phased", ("girgis_l1", "girgis_linf"), ("elastic", "quadratic"), n=300, modes=("paper",)),
        *_both_modes("cldp_sgd", ("girgis_l1", "girgis_l2"), ("logistic", "absolute"), modes=("paper",)),
        *_both_modes("dss_sgd", ("girgis_linf", "girgis_l2"), ("quadratic", "elastic"), modes=("paper",)),
    ]
    # Paper mode only (tight-mode calibrated searches over B cost seconds each): calibrated P_vec
    # parameters make B = n here, the central Gaussian's B = 15.
    for optimizer, protocol, problem in (("seq_sgd", "cjmp_vec", "quadratic"), ("seq_agd", "cjmp_vec", "logistic"),
                                         ("seq_sgd", "central_gaussian", "logistic")):
        tree = _tree(optimizer, protocol, "paper", problem, n=SEQ_N_USERS, optimizer_extra={"parameters": "calibrated"})
        cases.append({"id": _case_id(tree, "calibrated"), "tree": tree, "shards_check": False})
    # Seed 001's randomizer options (m levels, s messages), in paper mode (its calibration is the cheaper).
    tree = _tree("seq_sgd", "girgis_linf", "paper", "logistic", n=SEQ_N_USERS, privacy_extra={"levels": 2, "messages": 2})
    cases.append({"id": _case_id(tree, "levels=2,messages=2"), "tree": tree, "shards_check": False})
    # P_vec's literal simulation (materialized messages, a real two-stage shuffle): tight mode keeps it small.
    for optimizer, problem, n, epsilon in (("mean_estimation", "quadratic", 200, 1.0), ("seq_sgd", "quadratic", 500, 4.0)):
        tree = _tree(optimizer, "cjmp_vec", "tight", problem, n=n, epsilon=epsilon,
                     execution_extra={"simulation": "literal", "block_size": 64})
        cases.append({"id": _case_id(tree, "literal"), "tree": tree, "shards_check": True})
    ids = [case["id"] for case in cases]
    assert len(ids) == len(set(ids)), "golden ids must be unique"
    return cases


def _hex(value) -> str:
    """The exact float as a hex string (float.hex)."""
    return float(value).hex()


def _sha256(data) -> str:
    """sha256 of the canonical JSON of `data` (sorted keys)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=_json_default).encode()).hexdigest()


def _json_default(value):
    """JSON for numpy scalars (integers as int, everything else as float)."""
    if hasattr(value, "dtype"):
        return int(value) if value.dtype.kind in "iub" else float(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _numbers(data, path: str = "") -> list[list[str]]:
    """Every number in a JSON-like tree as [path, hex], in key order: the ledger's numbers without its text."""
    if isinstance(data, dict):
        return [item for key in sorted(data) for item in _numbers(data[key], f"{path}/{key}")]
    if isinstance(data, (list, tuple)):
        return [item for index, value in enumerate(data) for item in _numbers(value, f"{path}/{index}")]
    if isinstance(data, bool) or data is None or isinstance(data, str):
        return []
    if isinstance(data, int) or (hasattr(data, "dtype") and data.dtype.kind in "iu"):
        return [[path, str(int(data))]]
    if isinstance(data, float) or hasattr(data, "dtype"):
        return [[path, _hex(data) if math.isfinite(float(data)) else repr(float(data))]]
    return []


def _parse_param(text: str):
    """A resolved hyperparameter back from its MLflow param text (int, float, else the text)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def run_case(tree: dict, shards: int, folder: Path, mlflow_uri: str) -> dict:
    """Runs one config through `python -m pipeline run` and fingerprints what it wrote.

    The fingerprint is read back from the run's public outputs: rounds.parquet
    (every round the run may log), runs.parquet, the run folder's ledger.json,
    and the MLflow run's resolved hyperparameters (params resolved.*).

    Args:
      tree: the nested config (one run).
      shards: the local engine's shard count.
      folder: a new folder for the config and its results.
      mlflow_uri: the MLflow store the run records in.

    Returns:
      {n_rounds, users_per_round, rounds (or rounds_first, rounds_last),
      rounds_sha256, final_excess_loss, ledger_sha256, ledger_numbers_sha256,
      ledger_totals, hyperparameters, hyperparameters_sha256}.

    Raises:
      RuntimeError: the command did not exit 0 (its output in the message).
    """
    import contextlib
    import io

    import pandas as pd
    import yaml
    from mlflow.tracking import MlflowClient

    from pipeline import cli

    folder.mkdir(parents=True)
    config = {**tree, "execution": {**tree["execution"], "shards": shards},
              "tracking": {"mlflow_uri": mlflow_uri, "out": str(folder / "results")}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        status = cli.main(["run", str(folder / "config.yaml")])
    if status != 0:
        raise RuntimeError(f"pipeline run exited {status}:\n{printed.getvalue()[-3000:]}")
    results = folder / "results"
    (row,) = pd.read_parquet(results / "runs.parquet").to_dict("records")
    rounds = pd.read_parquet(results / "rounds.parquet")
    rows = [[int(r.round), int(r.users_in_round), _hex(r.excess_loss), _hex(r.population_loss)]
            for r in rounds.itertuples()]
    ledger = json.loads((results / "artifacts" / row["run_id"] / "ledger.json").read_text())
    params = MlflowClient(tracking_uri=mlflow_uri).get_run(row["mlflow_run_id"]).data.params
    hyper = {key.removeprefix("resolved."): _parse_param(value) for key, value in params.items()
             if key.startswith("resolved.")}
    fingerprint = {
        "n_rounds": len(rows),
        "rounds_sha256": _sha256(rows),
        "final_excess_loss": _hex(row["final_excess_loss"]),
        "ledger_sha256": _sha256(ledger),
        "ledger_numbers_sha256": _sha256(_numbers(ledger)),
        "ledger_totals": {mode: {key: (_hex(value) if isinstance(value, float) else value)
                                 for key, value in ledger["accounting"][mode].items() if key in ("epsilon", "delta")}
                          for mode in sorted(ledger["accounting"])},
        "hyperparameters": json.loads(json.dumps(hyper, sort_keys=True, default=_json_default)),
        "hyperparameters_sha256": _sha256(hyper),
    }
    if len(rows) <= INLINE_ROUNDS:
        fingerprint["rounds"] = rows
    else:
        fingerprint["rounds_first"] = rows[:EDGE_ROUNDS]
        fingerprint["rounds_last"] = rows[-EDGE_ROUNDS:]
    fingerprint["users_per_round"] = _run_lengths([row[1] for row in rows])
    return fingerprint


def _run_lengths(values: list[int]) -> list[list[int]]:
    """[[value, count], ...]: users per round, compressed (most rounds share a batch size)."""
    out: list[list[int]] = []
    for value in values:
        if out and out[-1][0] == value:
            out[-1][1] += 1
        else:
            out.append([value, 1])
    return out


def _dump(document: dict) -> str:
    """The golden document as JSON with one line per run (a changed run is a one-line diff)."""
    head = {key: value for key, value in document.items() if key != "runs"}
    lines = [json.dumps(run) for run in document["runs"]]
    return (json.dumps(head, indent=1)[:-2] + ',\n "runs": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n")


def _source_commit(folder: Path) -> str | None:
    """The git commit of the imported pipeline's checkout, marked "+dirty" if it has changes; None outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        return commit + ("+dirty" if git("status", "--porcelain", "--", ".") else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def enter_numeric_env() -> None:
    """Re-executes this script in NUMERIC_ENV unless it already runs there, then checks that
    the environment took effect (both settings are read once, when numpy loads).

    Raises:
      RuntimeError: this CPU lacks a feature NUMERIC_ENV needs, or OpenBLAS or numpy did
        not take the setting (another BLAS, another numpy build).
    """
    if any(os.environ.get(key) != value for key, value in NUMERIC_ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **NUMERIC_ENV})
    import numpy as np
    import threadpoolctl

    features = np._core._multiarray_umath.__cpu_features__
    missing = [name for name in NEEDED_CPU_FEATURES if not features.get(name)]
    if missing:
        raise RuntimeError(f"the golden runs are pinned on x86-64-v3 kernels; this CPU lacks {', '.join(missing)}")
    if features.get("X86_V4"):
        raise RuntimeError("numpy's AVX-512 loops are still on: NPY_DISABLE_CPU_FEATURES was not taken")
    blas = [(info["internal_api"], info.get("architecture")) for info in threadpoolctl.threadpool_info()
            if info["user_api"] == "blas"]
    if blas != [("openblas", NUMERIC_ENV["OPENBLAS_CORETYPE"])]:
        raise RuntimeError(f"the golden runs need numpy's OpenBLAS on its {NUMERIC_ENV['OPENBLAS_CORETYPE']} "
                           f"kernel; this process has {blas}")


def fingerprint_all(work: Path, say=lambda line: None) -> tuple[dict, dict, dict]:
    """Runs every golden case (and the shard variant of those marked shards_check).

    Args:
      work: an empty folder for the configs, results and the MLflow store.
      say: where a line per case goes.

    Returns:
      (fingerprints by id on 1 shard, fingerprints by id on SHARD_VARIANT shards,
      errors by id: what a case's command printed when it did not exit 0).
    """
    mlflow_uri = f"sqlite:///{work / 'mlflow.db'}"
    single, sharded, errors = {}, {}, {}
    for index, case in enumerate(golden_cases()):
        start = time.perf_counter()
        try:
            single[case["id"]] = run_case(case["tree"], 1, work / f"{index:03d}", mlflow_uri)
            if case["shards_check"]:
                sharded[case["id"]] = run_case(case["tree"], SHARD_VARIANT, work / f"{index:03d}-shards", mlflow_uri)
        except RuntimeError as error:
            errors[case["id"]] = str(error)
        say(f"{time.perf_counter() - start:7.2f}s  {case['id']}")
    return single, sharded, errors


def check(out: Path) -> None:
    """Fingerprints every golden case into OUT/fingerprints.json (tests/test_golden.py compares them)."""
    enter_numeric_env()
    single, sharded, errors = fingerprint_all(out / "work")
    document = {"single": single, "sharded": sharded, "errors": errors, "numeric_env": NUMERIC_ENV}
    (out / "fingerprints.json").write_text(json.dumps(document))


def main() -> None:
    """Runs the golden set on the imported pipeline and writes golden_runs.json."""
    enter_numeric_env()
    import pipeline

    print(f"pipeline from {pipeline.__file__}", file=sys.stderr)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        single, sharded, errors = fingerprint_all(Path(work), lambda line: print(line, file=sys.stderr))
    assert not errors, errors
    for case_id, fingerprint in sharded.items():
        assert fingerprint == single[case_id], f"{case_id}: {SHARD_VARIANT} shards differ from 1"
    entries = [{**case, **single[case["id"]]} for case in golden_cases()]
    print(f"{len(entries)} runs in {time.perf_counter() - began:.1f}s", file=sys.stderr)
    document = {
        "format_version": FORMAT_VERSION,
        "generated_by": "tests/golden/make_golden.py (see its docstring before regenerating)",
        "source_commit": _source_commit(Path(pipeline.__file__).parent),
        "shard_variant": SHARD_VARIANT,
        "numeric_env": NUMERIC_ENV,
        "runs": entries,
    }
    GOLDEN_PATH.write_text(_dump(document))
    print(f"wrote {GOLDEN_PATH}", file=sys.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Pin (default) or check the golden runs.")
    parser.add_argument("--check", type=Path, metavar="OUT",
                        help="write every case's fingerprint to OUT/fingerprints.json instead of pinning")
    arguments = parser.parse_args()
    if arguments.check:
        check(arguments.check)
    else:
        main()
