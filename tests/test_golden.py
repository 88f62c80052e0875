"""Golden runs: every config in tests/golden/golden_runs.json must give bit-identical results.

The file pins, for every optimizer with every protocol it accepts in both
accounting modes (and a few variants), the per-round records, the planned
ledger and the resolved hyperparameters, as produced by the public entry
points (config.expand → runner.plan_run → engine.execute on the local
backend). A refactor that changes any of them fails here. Regenerate the
file only when results are meant to change: see tests/golden/make_golden.py.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_GOLDEN_DIR = Path(__file__).with_name("golden")


def _load_generator():
    """The generator module (its run_case computes the same fingerprint the golden file holds)."""
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
        if key not in golden:
            continue
        if golden[key] == actual.get(key):
            continue
        if key in ("rounds", "rounds_first", "rounds_last"):
            problems.append(f"{key}: {_first_round_difference(golden[key], actual.get(key, []))}")
        elif key == "final_excess_loss":
            problems.append(f"final_excess_loss: expected {float.fromhex(golden[key])!r}, "
                            f"got {float.fromhex(actual[key])!r}")
        elif key == "ledger_sha256" and golden["ledger_numbers_sha256"] == actual["ledger_numbers_sha256"]:
            problems.append("ledger_sha256: the ledger's numbers are identical, its text or structure changed")
        else:
            problems.append(f"{key}: expected {golden[key]!r}, got {actual.get(key)!r}")
    return problems


@pytest.mark.parametrize("golden", _RUNS, ids=[run["id"] for run in _RUNS])
def test_golden_run_is_bit_identical(golden):
    """One golden config, on one local shard, reproduces its records, ledger and hyperparameters exactly."""
    actual = _GENERATOR.run_case(golden["tree"], 1)
    problems = _differences(golden, actual)
    assert not problems, f"{golden['id']} changed:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("golden", _SHARD_RUNS, ids=[run["id"] for run in _SHARD_RUNS])
def test_golden_run_does_not_depend_on_shards(golden):
    """The same config on several shards (the blocks split across them) gives the golden values too."""
    actual = _GENERATOR.run_case(golden["tree"], _DOCUMENT["shard_variant"])
    problems = _differences(golden, actual)
    assert not problems, f"{golden['id']} with {_DOCUMENT['shard_variant']} shards differs:\n  " + "\n  ".join(problems)


def test_golden_set_covers_both_accounting_modes_and_variants():
    """The golden file still holds what it promises: both modes, the literal, robust, shuffled and calibrated variants."""
    trees = [run["tree"] for run in _RUNS]
    assert {tree["privacy"]["accounting"] for tree in trees} == {"paper", "tight"}
    assert any(tree["execution"]["simulation"] == "literal" for tree in trees)
    assert any("honest_fraction" in tree["privacy"] for tree in trees)
    assert any(tree["optimizer"].get("sampling") == "shuffled" for tree in trees)
    assert any(tree["optimizer"].get("parameters") == "calibrated" for tree in trees)
    assert _SHARD_RUNS
