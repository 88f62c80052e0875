"""A run's ledger is checked where no plug-in reaches (issue 29, item 1): its JSON, rebuilt
from the events it lists, is composed again in a separate process
(pipeline.accounting.rederive) and must write the same JSON and meet the target. The red
team's plug-in that patched `PrivacyLedger.within_target` finished a full_gd run at
ε = 7.094 above its target 4; it now fails that run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml

from pipeline import cli
from pipeline.accounting.ledger import PrivacyLedger
from pipeline.accounting.rederive import Rederiver, rederive, verdict
from pipeline.config import expand
from pipeline.planning import plan_run

# One run of each composition (sequential, fully interactive, phased, final iterate), with
# P_vec and the companion mechanisms (Gaussian, shuffled Gaussian, shuffle LDP, report noisy
# max, sampled users), in both accounting modes: configs of tests/golden/golden_runs.json.
GOLDEN = {run["id"]: run["tree"] for run in json.loads(
    (Path(__file__).with_name("golden") / "golden_runs.json").read_text())["runs"]}
RUNS = [f"{name}/{mode}/{rest}" for name, rest in (
    ("seq_sgd/cjmp_vec", "quadratic/n2000-d3-eps1"), ("full_phased/cjmp_vec", "elastic/n300-d3-eps1"),
    ("full_phased/shuffle_gaussian", "elastic/n300-d3-eps1"),
    ("full_gd/shuffle_gaussian", "absolute/n500-d3-eps1/rounds=5"), ("full_gd/cjmp_vec", "logistic/n200-d3-eps1"),
    ("cldp_sgd/girgis_linf", "elastic/n500-d3-eps1"),
    ("dss_sgd/girgis_l1", "logistic/n500-d3-eps1"), ("pnsgd/central_gaussian", "logistic/n500-d3-eps1"),
    ("frank_wolfe_l1/report_noisy_max", "l1_least_squares/n500-d3-eps1")) for mode in ("paper", "tight")]


def _planned(run_id: str):
    return plan_run(expand(GOLDEN[run_id])[0])


@pytest.mark.parametrize("run_id", RUNS)
def test_every_composition_is_rebuilt_from_its_json_to_the_same_json(run_id):
    ledger = _planned(run_id).ledger
    written = json.loads(json.dumps(ledger.to_dict()))
    rebuilt = PrivacyLedger.from_dict(written)
    assert json.loads(json.dumps(rebuilt.to_dict())) == written
    assert rebuilt.total() == ledger.total() and rebuilt.rounds == ledger.rounds
    assert verdict(written) == {"same": True, "epsilon": ledger.total()[0], "delta": ledger.total()[1],
                                "within_target": True}


def test_the_separate_process_sees_a_reported_spend_below_the_events_and_a_missed_target():
    """Both sides of the check: a JSON whose totals were lowered, and one whose target was."""
    written = json.loads(json.dumps(_planned("full_gd/shuffle_gaussian/tight/absolute/n500-d3-eps1/rounds=5").ledger.to_dict()))
    assert rederive(written)["same"] is True
    lowered = json.loads(json.dumps(written))
    lowered["accounting"]["tight"]["epsilon"] *= 0.999
    assert rederive(lowered)["same"] is False
    spent = written["accounting"]["tight"]["epsilon"]
    tightened = json.loads(json.dumps(written))
    tightened["target"]["epsilon"] = spent * 0.999  # the events spend more than this target
    answer = rederive(tightened)
    assert answer["within_target"] is False and answer["epsilon"] == spent
    # A phased ledger's groups matter: taken as one group, its phases would compose, not take the worst.
    phased = json.loads(json.dumps(_planned("full_phased/cjmp_vec/tight/elastic/n300-d3-eps1").ledger.to_dict()))
    assert len({event["phase"] for event in phased["events"]}) > 1
    merged = json.loads(json.dumps(phased))
    for event in merged["events"]:
        event["phase"] = 0
    assert rederive(merged)["same"] is False


def test_a_ledger_checked_once_is_answered_again_without_composing_it_and_a_changed_one_is_not():
    """Issue 43: a grid point's seeds write the same ledger; the separate process answers it again
    from what it gave (a dict lookup), while a ledger that differs in any value is composed anew."""
    written = json.loads(json.dumps(_planned("seq_sgd/cjmp_vec/tight/quadratic/n2000-d3-eps1").ledger.to_dict()))
    checker = Rederiver()
    try:
        first = checker(written)
        again = checker(json.loads(json.dumps(written)))
        lowered = json.loads(json.dumps(written))
        lowered["accounting"]["tight"]["epsilon"] *= 0.999
        changed = checker(lowered)
    finally:
        checker.close()
    assert first.pop("answered_before") is False and again.pop("answered_before") is True
    assert first == again == verdict(written) and first["same"] is True
    assert changed["same"] is False and changed["answered_before"] is False


def test_a_plugin_event_is_not_rebuilt_and_says_why():
    written = json.loads(json.dumps(_planned("full_gd/shuffle_gaussian/tight/absolute/n500-d3-eps1/rounds=5").ledger.to_dict()))
    written["events"][0]["mechanism"] = "MyPluginMechanism"
    answer = rederive(written)
    answer.pop("answered_before")
    assert answer == {"error": "UnsupportedEventError: the ledger's 'MyPluginMechanism' events are not this package's"}


PATCHES = {
    # The red team's probe: the driver's target check always passes.
    "within_target": ("PrivacyLedger.within_target = lambda self: True\n", "above the target (4, 0.3)"),
    # The ledger reports nothing spent: its JSON would say ε = 0.
    "total": ("PrivacyLedger.total = lambda self, accounting=None: (0.0, 0.0)\n", "differs from what its events"),
}


@pytest.fixture
def restored_ledger_class():
    """The plug-in below patches PrivacyLedger in this process: put its attributes back after."""
    saved = dict(vars(PrivacyLedger))
    yield
    for name in set(vars(PrivacyLedger)) - set(saved):
        delattr(PrivacyLedger, name)
    for name, value in saved.items():
        if name not in ("__dict__", "__weakref__"):
            setattr(PrivacyLedger, name, value)


@pytest.mark.parametrize("patch", sorted(PATCHES))
def test_a_plugin_that_patches_the_ledger_fails_its_run_through_the_public_command(
        patch, tmp_path, capsys, monkeypatch, restored_ledger_class):
    code, words = PATCHES[patch]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "patches.py").write_text("from pipeline.accounting.ledger import PrivacyLedger\n" + code +
                                         "from pipeline.problems.quadratic import Quadratic as Patched\n")
    config = {"experiment": "patched", "problem": {"name": "patches.py:Patched", "dim": 3, "radius": 1.0},
              "n_users": 2000, "optimizer": {"name": "full_gd"}, "privacy": {"epsilon": 4.0, "delta": 0.3},
              "execution": {"backend": "local", "shards": 2},
              "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "out": str(tmp_path / "out")}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    assert cli.main(["run", "config.yaml"]) == 1
    (row,) = pd.read_parquet(tmp_path / "out" / "runs.parquet").to_dict("records")
    assert row["status"] == "failed" and row["error"].startswith("LedgerError: ") and words in row["error"], row
    assert "0 finished, 0 skipped, 1 failed" in capsys.readouterr().out


def _written() -> dict:
    return json.loads(json.dumps(_planned("full_gd/shuffle_gaussian/tight/absolute/n500-d3-eps1/rounds=5").ledger.to_dict()))


def test_a_sitecustomize_on_the_path_cannot_answer_for_the_process(tmp_path, monkeypatch):
    """Issue 46: a sitecustomize.py on PYTHONPATH that prints a passing verdict was taken for the
    answer. The process runs isolated and answers on its own pipe, each answer carrying its question's
    nonce: a lowered ledger is still seen."""
    (tmp_path / "sitecustomize.py").write_text(
        'import json\nprint(json.dumps({"same": True, "epsilon": 0.0, "delta": 0.0, "within_target": True}), '
        'flush=True)\n')
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    checker = Rederiver()
    try:
        lowered = _written()
        lowered["accounting"]["tight"]["epsilon"] *= 0.5
        assert checker(lowered)["same"] is False
        assert checker(_written())["same"] is True  # and it answers the next question, not a stale line
    finally:
        checker.close()


def test_a_stalled_process_is_bounded_and_killed():
    """Issue 46: SIGSTOP on the re-derivation process left the driver waiting forever. The wait is
    bounded: no answer in time is a RuntimeError (the run fails), the process is killed, and the next
    question starts a new one."""
    checker = Rederiver()
    try:
        assert checker(_written())["same"] is True
        stalled = checker._process
        os.kill(stalled.pid, signal.SIGSTOP)
        began = time.monotonic()
        with pytest.raises(RuntimeError, match="gave no answer within 2 s"):
            checker(_written(), timeout=2.0)
        assert 2.0 <= time.monotonic() - began < 10.0 and stalled.poll() is not None
        assert checker(_written())["same"] is True
    finally:
        checker.close()


def test_a_process_started_ahead_is_killed_unless_asked_and_else_left_to_end():
    """A grid starts the process before it plans (Rederiver.start), so that its imports overlap the
    planning: one never asked (a grid that recorded nothing) is killed on close, not waited for
    through its imports; one that answered ends by itself once its stdin closes."""
    ahead = Rederiver()
    ahead.start()
    process = ahead._process
    ahead.start()  # running: not started twice
    assert ahead._process is process
    ahead.close()
    assert process.returncode == -signal.SIGKILL
    asked = Rederiver()
    asked.start()
    process = asked._process
    assert asked(_written())["same"] is True and asked._process is process  # the one started ahead answers
    asked.close()
    assert process.returncode == 0
    asked.start()  # a new process, not asked yet: what the last one was asked does not count
    process = asked._process
    asked.close()
    assert process.returncode == -signal.SIGKILL


def _finished_runs(folder: Path) -> int:
    """How many runs a results folder holds as finished (0 while it holds no readable table)."""
    try:
        return int((pd.read_parquet(folder / "runs.parquet")["status"] == "finished").sum())
    except (OSError, ValueError, KeyError):
        return 0


def test_sigterm_stops_a_grid_whose_rederivation_stalls(tmp_path):
    """Issue 46's reproducer through the public command: the re-derivation process stopped while a
    grid records, SIGTERM to the driver ends it with 143 at once, its run marked failed."""
    config = {"experiment": "stalled", "problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": 500,
              "optimizer": {"name": "mean_estimation"}, "privacy": {"epsilon": 1.0, "delta": 1e-6},
              "seeds": list(range(20)), "execution": {"backend": "local"},
              "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "out": str(tmp_path / "out")}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    driver = psutil.Popen([sys.executable, "-m", "pipeline", "run", str(tmp_path / "config.yaml")], cwd=tmp_path,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = None
    try:
        deadline = time.monotonic() + 120
        while child is None and time.monotonic() < deadline:
            child = next((c for c in driver.children(recursive=True) if "rederive" in " ".join(c.cmdline())), None)
            time.sleep(0.05)
        assert child is not None, "the grid never started its re-derivation process"
        # Started before the grid plans: stopped once it has checked a run, so that it stalls the
        # check of a later one while the grid records.
        while not _finished_runs(tmp_path / "out") and time.monotonic() < deadline:
            time.sleep(0.05)
        recorded = _finished_runs(tmp_path / "out")
        assert 0 < recorded < len(config["seeds"]), f"{recorded} runs recorded when the process was stopped"
        child.suspend()
        time.sleep(0.5)
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(timeout=30) == 143
    finally:
        for process in [driver, *([child] if child is not None else [])]:
            if process.is_running():
                process.kill()
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert (runs["status"] == "failed").any() and "RUNNING" not in set(runs["status"])
