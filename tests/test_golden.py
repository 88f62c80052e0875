"""Golden runs: every config in tests/golden/golden_runs.json must give bit-identical results.

The file pins, for every optimizer with every protocol it accepts in both
accounting modes (and a few variants), what `python -m pipeline run` writes:
the per-round records of rounds.parquet, the run's ledger.json and its
resolved hyperparameters. A change that alters any of them fails here.
Regenerate the file only when results are meant to change: see
tests/golden/make_golden.py.

The cases run in one child process (conftest's BACKGROUND command
"golden"), in the numeric environment the file was pinned in
(make_golden.NUMERIC_ENV: OpenBLAS's Haswell kernel, numpy's AVX2 loops),
so their last bits do not depend on this machine's CPU (README,
"Reproducibility"). The shard check compares two runs of this test run,
not the file: bit-identity across shardings holds in any environment.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from pipeline.config import expand
from pipeline.errors import ConfigError
from pipeline.optimizers import OPTIMIZERS
from pipeline.problems import PROBLEMS
from pipeline.protocols import PROTOCOLS
from pipeline.planning import plan_run

_GOLDEN_DIR = Path(__file__).with_name("golden")


def _load_generator():
    """The generator module (its golden_cases and NUMERIC_ENV are the file's)."""
    spec = importlib.util.spec_from_file_location("golden_make_golden", _GOLDEN_DIR / "make_golden.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_GENERATOR = _load_generator()
_DOCUMENT = json.loads((_GOLDEN_DIR / "golden_runs.json").read_text())
_RUNS = _DOCUMENT["runs"]
_SHARD_RUNS = [run for run in _RUNS if run["shards_check"]]
# Fingerprint keys, compared one by one so that a failure names what changed.
_RESULT_KEYS = ("n_rounds", "users_per_round", "rounds", "rounds_first", "rounds_last", "rounds_sha256",
                "final_excess_loss")
_LEDGER_KEYS = ("ledger_totals", "ledger_numbers_sha256", "ledger_sha256")
_HYPER_KEYS = ("hyperparameters", "hyperparameters_sha256")


@pytest.fixture(scope="module")
def fingerprints(background) -> dict:
    """What the golden cases wrote this test run: {single, sharded, errors} (make_golden.py --check)."""
    return json.loads((background("golden").out / "fingerprints.json").read_text())


def _first_round_difference(expected: list, actual: list) -> str:
    """Where two lists of [round, users, excess hex, population hex] rows first differ, readably."""
    for want, got in zip(expected, actual):
        if want != got:
            return (f"round {want[0]}: expected users={want[1]} excess={float.fromhex(want[2])!r} "
                    f"population={float.fromhex(want[3])!r}; got round {got[0]} users={got[1]} "
                    f"excess={float.fromhex(got[2])!r} population={float.fromhex(got[3])!r}")
    return f"{len(expected)} rows expected, {len(actual)} got"


def _differences(golden: dict, actual: dict) -> list[str]:
    """Every fingerprint field that differs from the golden entry, explained."""
    problems = []
    for key in (*_RESULT_KEYS, *_LEDGER_KEYS, *_HYPER_KEYS):
        if key not in golden and key not in actual:
            continue
        if golden.get(key) == actual.get(key):
            continue
        if key in ("rounds", "rounds_first", "rounds_last"):
            problems.append(f"{key}: {_first_round_difference(golden.get(key, []), actual.get(key, []))}")
        elif key == "final_excess_loss":
            problems.append(f"final_excess_loss: expected {float.fromhex(golden[key])!r}, "
                            f"got {float.fromhex(actual[key])!r}")
        elif key == "ledger_sha256" and golden["ledger_numbers_sha256"] == actual["ledger_numbers_sha256"]:
            problems.append("ledger_sha256: the ledger's numbers are identical, its text or structure changed")
        else:
            problems.append(f"{key}: expected {golden.get(key)!r}, got {actual.get(key)!r}")
    return problems


def _fingerprint(fingerprints: dict, case_id: str, variant: str = "single") -> dict:
    """One case's fingerprint; fails with the command's output where the run did not exit 0."""
    assert case_id not in fingerprints["errors"], f"{case_id}: {fingerprints['errors'][case_id]}"
    return fingerprints[variant][case_id]


@pytest.mark.parametrize("golden", _RUNS, ids=[run["id"] for run in _RUNS])
def test_golden_run_is_bit_identical(golden, fingerprints):
    """One golden config, run by `pipeline run` on one local shard, writes the pinned rounds, ledger and hyperparameters."""
    problems = _differences(golden, _fingerprint(fingerprints, golden["id"]))
    assert not problems, f"{golden['id']} changed:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("golden", _SHARD_RUNS, ids=[run["id"] for run in _SHARD_RUNS])
def test_golden_run_does_not_depend_on_shards(golden, fingerprints):
    """The same config on several shards (the blocks split across them) writes what it wrote on one, bit for bit."""
    one = _fingerprint(fingerprints, golden["id"])
    several = _fingerprint(fingerprints, golden["id"], "sharded")
    problems = _differences(one, several)
    assert not problems, f"{golden['id']} with {_DOCUMENT['shard_variant']} shards differs:\n  " + "\n  ".join(problems)


def test_golden_file_was_pinned_in_the_numeric_environment_it_is_checked_in(fingerprints):
    """The file and this test run's cases name the same numeric environment (make_golden.NUMERIC_ENV)."""
    assert _DOCUMENT["numeric_env"] == fingerprints["numeric_env"] == _GENERATOR.NUMERIC_ENV


def test_golden_set_covers_both_accounting_modes_and_variants():
    """The golden file still holds what it promises: both modes, the literal, robust, shuffled and calibrated variants."""
    trees = [run["tree"] for run in _RUNS]
    assert [run["id"] for run in _RUNS] == [case["id"] for case in _GENERATOR.golden_cases()]
    assert {tree["privacy"]["accounting"] for tree in trees} == {"paper", "tight"}
    assert any(tree["execution"]["simulation"] == "literal" for tree in trees)
    assert any("honest_fraction" in tree["privacy"] for tree in trees)
    assert any(tree["optimizer"].get("sampling") == "shuffled" for tree in trees)
    assert any(tree["optimizer"].get("parameters") == "calibrated" for tree in trees)
    assert _SHARD_RUNS


def _refusal(optimizer: str, protocol: str, problem: str) -> str | None:
    """The config error that refuses (optimizer, protocol, problem) at the golden size, or None if it plans."""
    tree = _GENERATOR._tree(optimizer, protocol, "paper", problem, epsilon=0.5)
    try:
        plan_run(expand(tree)[0])
    except ConfigError as error:
        return str(error)
    return None


def test_golden_set_runs_every_optimizer_with_every_protocol_it_accepts():
    """Every shipped (optimizer, protocol) pair that a config can run is a golden case, so it runs
    through `pipeline run` in the tests; a pair left out is refused on every shipped problem
    (at the golden size, ε = 0.5 as pan_agd needs, paper mode and the optimizer's defaults)."""
    covered = {(case["tree"]["optimizer"]["name"], case["tree"]["privacy"]["protocol"])
               for case in _GENERATOR.golden_cases()}
    # Every shipped problem but those that need more than a name (a dataset's source, a hard instance's vertex).
    problems = [name for name in PROBLEMS if name != "dataset" and not name.startswith("lb_")]
    runnable = []
    for optimizer in OPTIMIZERS:
        for protocol in PROTOCOLS:
            if (optimizer, protocol) in covered:
                continue
            accepted = [problem for problem in problems if _refusal(optimizer, protocol, problem) is None]
            if accepted:
                runnable.append((optimizer, protocol, accepted))
    assert not runnable, f"(optimizer, protocol, problems) that run but no golden case runs: {runnable}"


def test_the_install_has_the_numeric_stack_constraints_txt_pins():
    """The golden values hold for the versions constraints.txt pins (the README's installs read it):
    an install without it fails here, naming the package, as well as in the golden runs."""
    from importlib.metadata import version

    lines = (_GOLDEN_DIR.parents[1] / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))
    assert {"numpy", "scipy", "dp-accounting"} <= set(pins)
    assert {name: version(name) for name in pins} == pins
