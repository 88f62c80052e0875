"""Results as one dataset: the columns of the runs and rounds tables, and a loader
that reads them from any number of results folders, local or under a URI.

    from pipeline import results
    runs, rounds = results.load("results")            # every results folder under results/
    runs, rounds = results.load("s3://bucket/sco/*")  # or a URI, or a glob
    curves = rounds.merge(runs, on="mlflow_run_id")   # the MLflow run id is unique everywhere

A run's `run_id` names its grid point and seed (the same in two folders that ran
the same grid); `mlflow_run_id` names one attempt of it and is unique across
folders and machines: join on it.
"""
from __future__ import annotations

import datetime
import fnmatch
import functools
import glob
import importlib.metadata
import json
import math
import subprocess
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from pipeline.accounting import ACCOUNTING_VERSION, UNPROVEN_BEFORE
from pipeline.config import FIELDS, HASHED_UNLESS_DEFAULT
from pipeline.errors import ConfigError
from pipeline.optimizers import theory

if TYPE_CHECKING:  # the tracking layer loads where results are read
    from pipeline.tracking.location import Location

FLOAT, INT, TEXT, TIME = float, int, str, datetime.datetime
# Resolved hyperparameters every runs row has (null where an optimizer has none); others are added as they come.
RESOLVED = {"resolved.rounds": INT, "resolved.batch_size": INT, "resolved.step_size": FLOAT}
# The problem's declared constants (Problem.constants), as MLflow's params name them.
CONSTANTS = {"problem.L": FLOAT, "problem.beta": FLOAT, "problem.lambda": FLOAT, "problem.D": FLOAT}
# A dataset's measured metrics: null on the generated problems, whose losses are exact.
MEASURED = ("test_loss", "test_accuracy", "optimum_gap")
# Every runs column and its kind: one schema in every file, whatever the run set.
RUN_KINDS: dict[str, type] = {
    "run_id": TEXT, "mlflow_run_id": TEXT, "config_hash": TEXT, "seed": INT,
    **{field: spec.kind for field, spec in FIELDS.items()},
    **RESOLVED, **CONSTANTS,
    "final_excess_loss": FLOAT, **{f"final_{column}": FLOAT for column in MEASURED},
    "epsilon": FLOAT, "delta": FLOAT, **{column: FLOAT for column in theory.THEORY_COLUMNS},
    "status": TEXT, "error": TEXT, "wall_s": FLOAT, "started_at": TIME, "ended_at": TIME,
    "package_version": TEXT, "git_commit": TEXT, "accounting_version": INT, "plugins": TEXT,
}
ROUND_KINDS: dict[str, type] = {
    "run_id": TEXT, "mlflow_run_id": TEXT, "experiment": TEXT, "round": INT, "users_in_round": INT,
    "excess_loss": FLOAT, "population_loss": FLOAT, "epsilon_spent": FLOAT, "delta_spent": FLOAT, "wall_s": FLOAT,
    **{column: FLOAT for column in MEASURED},
}
KINDS = {**RUN_KINDS, **ROUND_KINDS}
NOT_A_CHECKOUT = "not a git checkout"


@functools.lru_cache(maxsize=1)
def provenance() -> dict[str, str]:
    """The installed package's version and the git commit of its source ("+dirty" with
    uncommitted changes; NOT_A_CHECKOUT where there is none, as in a Ray job's copy)."""
    try:
        version = importlib.metadata.version("shuffle-sco")
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    source = Path(__file__).resolve().parent
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", *args], cwd=source, capture_output=True, text=True, check=True,
                                  timeout=10).stdout.strip()

        commit = git("rev-parse", "HEAD") + ("+dirty" if git("status", "--porcelain", "--", ".") else "")
    except (OSError, subprocess.SubprocessError):
        commit = NOT_A_CHECKOUT
    return {"package_version": version, "git_commit": commit}


def _folders(source: str) -> list[tuple[Location, str]]:
    """The results folders a source names, as (Location, folder path): the folder itself
    and every folder under it that holds a runs table, keeping those a glob matches
    (a local glob, or wildcards in a URI's path).

    Raises:
      ConfigError: a URI that cannot be opened, or a source with no results folder.
    """
    from urllib.parse import urlsplit, urlunsplit

    from pipeline.tracking.location import open_location
    from pipeline.tracking.parquet_store import RUNS

    if "://" not in source:
        matches = sorted(glob.glob(source)) if any(char in source for char in "*?[") else [source]
        located = [(open_location(match, "source"), "") for match in matches]
    else:  # wildcards in a URI's path: list from the folder before the first, then match
        parts = urlsplit(source)
        components = parts.path.split("/")
        plain = next((i for i, part in enumerate(components) if any(char in part for char in "*?[")), None)
        base = source if plain is None else urlunsplit(parts._replace(path="/".join(components[:plain])))
        location = open_location(base, "source")
        pattern = "" if plain is None else "/".join([location.root, *components[plain:]]).rstrip("/")
        located = [(location, pattern)]
    found = []
    for location, pattern in located:
        for table in location.named(RUNS):
            folder = table.rsplit("/", 1)[0]
            if not pattern or fnmatch.fnmatch(folder, pattern):
                found.append((location, folder))
    if not found:
        raise ConfigError("source", source, f"holds no results folder (no {RUNS} under it)")
    return list({location.address(folder): (location, folder) for location, folder in found}.values())


def _latest_finished(runs: pd.DataFrame) -> pd.DataFrame:
    """Each run's latest finished attempt (by ended_at, else the order written)."""
    done = runs[runs["status"] == "finished"]
    if "ended_at" in done:
        done = done.sort_values("ended_at", kind="stable", na_position="first")
    return done.drop_duplicates(["results_folder", "run_id"], keep="last")


def _flag_outdated_accounting(runs: pd.DataFrame) -> None:
    """Adds `accounting_outdated` and `budget_unproven` to runs (in place) and warns of the latter."""
    version = (pd.to_numeric(runs["accounting_version"], errors="coerce") if "accounting_version" in runs
               else pd.Series(float("nan"), index=runs.index)).fillna(1)  # unrecorded: version 1
    runs["accounting_outdated"] = version < ACCOUNTING_VERSION
    runs["budget_unproven"] = False
    for fixed_in, reason in UNPROVEN_BEFORE.items():
        affected = (version < fixed_in) & (runs.get("privacy.unit") == "record") & (runs.get("privacy.accounting") == "tight")
        runs["budget_unproven"] |= affected
        if affected.any():
            warnings.warn(f"{int(affected.sum())} run(s) recorded before accounting version {fixed_in}: {reason} "
                          "(column budget_unproven)", stacklevel=3)


COMPOSED_SPEND = ("basic composition over the runs that read the table (Σε, Σδ of their ledgers' totals): a grid "
                  "on private data spends all its runs' budgets together; at record level a user's records share it")


def privacy_by_source(runs: pd.DataFrame) -> pd.DataFrame:
    """What each source table has spent over the runs that read it.

    Each run is (ε, δ)-DP for the table's users (or records) by its ledger; runs over the same
    table compose. Basic composition (Σε, Σδ) bounds them whatever each run did; a tighter total
    would need the runs' RDP curves, which the runs table does not carry.

    Args:
      runs: a runs table (`load`'s), one row per finished run.

    Returns:
      One row per `problem.source`: runs, epsilon, delta, unit ("user" only if every run
      protected users, else "record": a record-level run does not protect a user's records
      together), rule. Empty where no run read a table.
    """
    if "problem.source" not in runs or runs["problem.source"].isna().all():
        return pd.DataFrame(columns=["source", "runs", "epsilon", "delta", "unit", "rule"])
    read = runs[runs["problem.source"].notna()]
    units = read.get("privacy.unit", pd.Series("user", index=read.index)).fillna("user")
    rows = [{"source": source, "runs": len(group), "epsilon": float(group["epsilon"].astype(float).sum()),
             "delta": float(group["delta"].astype(float).sum()),
             "unit": "user" if (units[group.index] == "user").all() else "record", "rule": COMPOSED_SPEND}
            for source, group in read.groupby("problem.source", sort=True)]
    return pd.DataFrame(rows)


def load(source: str | Path, verify: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Reads every results folder a source names into one runs and one rounds table.

    Args:
      source: a results folder, a folder holding results folders (searched at
        any depth), a glob of them, or a URI of any of these (file://, s3://, ...).
      verify: re-derive each run's ledger.json in a separate, isolated process where no
        plug-in runs (pipeline.accounting.rederive) and say in `ledger_check` whether it
        holds: "verified" (it rebuilds to itself, its total is the row's ε and within the
        target), or what is wrong; a warning counts the runs that are not verified.

    Returns:
      (runs, rounds): the latest finished attempt of each run of each folder
      (runs gains `results_folder`, where it was found), and the rounds of
      exactly those attempts; joined by `mlflow_run_id`. A folder in the
      layout before 0.2 (single-file tables) is read too. An attempt found in several
      folders (a copy of a folder) comes once, from the first. `accounting_outdated` marks
      the runs an older accountant recorded, and `budget_unproven` those among them whose
      ε that accountant may have under-reported; `rounds_missing` a finished run whose
      rounds are gone; `ledger_check` (with `verify`) the independent check of its ledger
      (warnings say how many and why).

    Raises:
      ConfigError: no results folder, or a file that cannot be read (named).
    """
    from pipeline.tracking.parquet_store import ROUNDS, RUNS, DamagedTable, read_table

    all_runs, all_rounds, located = [], [], {}
    for location, folder in _folders(str(source)):
        located[location.address(folder)] = (location, folder)
        try:
            runs = read_table(location, f"{folder}/{RUNS}", RUNS)
            rounds = read_table(location, f"{folder}/{ROUNDS}", ROUNDS)
        except DamagedTable as damaged:
            raise ConfigError("source", location.address(damaged.path), f"{damaged.problem}: move it aside") from None
        if runs.empty:
            continue
        if "mlflow_run_id" not in rounds and not rounds.empty:  # the layout before 0.2: one attempt per run
            rounds = rounds.merge(runs[["run_id", "mlflow_run_id", "experiment"]], on="run_id")
        all_runs.append(runs.assign(results_folder=location.address(folder)))
        all_rounds.append(rounds.assign(results_folder=location.address(folder)))
    if not all_runs:
        return pd.DataFrame(columns=list(RUN_KINDS)), pd.DataFrame(columns=list(ROUND_KINDS))
    # A copy of a folder (a backup beside it, a link back into the tree) holds the same attempts: each
    # attempt once, from the first folder in order, with that folder's rounds only.
    runs = _latest_finished(pd.concat(all_runs, ignore_index=True)).sort_values("results_folder", kind="stable")
    runs = runs.drop_duplicates("mlflow_run_id", keep="first")
    for field in HASHED_UNLESS_DEFAULT:  # a run recorded before the field existed ran at its default
        runs[field] = runs[field].fillna(FIELDS[field].default) if field in runs else FIELDS[field].default
    _flag_outdated_accounting(runs)
    rounds = pd.concat(all_rounds, ignore_index=True)
    if "round" not in rounds:  # no folder holds a rounds row
        rounds = pd.DataFrame(columns=[*ROUND_KINDS, "results_folder"])
    rounds = rounds.merge(runs[["mlflow_run_id", "results_folder"]], on=["mlflow_run_id", "results_folder"])
    rounds = rounds.drop(columns="results_folder").drop_duplicates(["mlflow_run_id", "round"])
    _flag_missing_rounds(runs, rounds)
    if verify:
        _check_ledgers(runs, located)
    return runs.reset_index(drop=True), rounds.sort_values(["mlflow_run_id", "round"]).reset_index(drop=True)


VERIFIED, NON_PRIVATE = "verified", "non-private: ε = ∞, as its row says"
PLUGIN_EVENTS = "plug-in events: composed by the plug-in's own accountant, not re-derived"


def _check_ledgers(runs: pd.DataFrame, located: dict) -> None:
    """Adds `ledger_check` to runs (in place): each run's ledger.json re-derived where no plug-in runs.

    The driver checks every ledger the same way before it records a run, but plug-ins run in the
    driver and could disable that check; this one runs in the reader's own process tree.
    """
    from pipeline.accounting.rederive import rederive
    from pipeline.tracking.parquet_store import ARTIFACTS

    checks = []
    recorded = pd.to_numeric(runs["epsilon"], errors="coerce") if "epsilon" in runs else [math.nan] * len(runs)
    for folder, run_id, epsilon in zip(runs["results_folder"], runs["run_id"], recorded):
        location, path = located[folder]
        ledger = None
        for artifacts in (ARTIFACTS, "runs"):  # "runs": each run's folder in the layout before 0.2
            try:
                with location.filesystem.open_input_stream(f"{path}/{artifacts}/{run_id}/ledger.json") as stream:
                    ledger = json.loads(stream.read())
                break
            except (OSError, ValueError):
                continue
        if ledger is None:
            checks.append("no readable ledger.json")
            continue
        checks.append(_ledger_check(rederive(ledger), epsilon))
    runs["ledger_check"] = checks
    unverified = ~runs["ledger_check"].isin((VERIFIED, NON_PRIVATE))
    if unverified.any():
        warnings.warn(f"{int(unverified.sum())} finished run(s) whose ledger is not verified by an independent "
                      "re-derivation (column ledger_check)", stacklevel=3)


def _ledger_check(verdict: dict, epsilon: float) -> str:
    """One run's `ledger_check` from the separate process's verdict on its ledger.json."""
    if "error" in verdict:
        if verdict["error"].startswith("UnsupportedEventError"):
            return PLUGIN_EVENTS
        return f"does not rebuild ({verdict['error']})"
    if not verdict["same"]:
        return "differs from what its events compose to"
    if math.isinf(epsilon) and math.isinf(verdict["epsilon"]):
        return NON_PRIVATE
    if epsilon != verdict["epsilon"]:
        return f"the runs row says ε = {epsilon:.6g}, its ledger composes to {verdict['epsilon']:.6g}"
    if not verdict["within_target"]:
        return f"spends ε = {verdict['epsilon']:.6g}, above its target"
    return VERIFIED


def _flag_missing_rounds(runs: pd.DataFrame, rounds: pd.DataFrame) -> None:
    """Adds `rounds_missing` (a finished run none of whose rounds were found) and warns of such runs."""
    runs["rounds_missing"] = ~runs["mlflow_run_id"].isin(rounds["mlflow_run_id"])
    if runs["rounds_missing"].any():
        warnings.warn(f"{int(runs['rounds_missing'].sum())} finished run(s) have no rounds in their folder (a rounds "
                      "part moved aside or lost; column rounds_missing): `run` redoes them", stacklevel=3)
