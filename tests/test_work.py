"""Issue 46 item 7: a run's work is counted from its schedule, estimated at this machine's speed,
said before a long grid, and held to `execution.max_minutes` before any work. How close the
estimate is to the measured compute is measured in bench/work.py, not asserted here."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline import config, planning, runner, work

ROOT = Path(__file__).resolve().parent.parent


def _tree(**fields) -> dict:
    tree = {"experiment": "work", "problem": {"name": "quadratic", "dim": 4, "radius": 1.0}, "n_users": 300,
            "optimizer": {"name": "full_gd", "rounds": 7}, "privacy": {"epsilon": 4.0, "delta": 1e-6},
            "seeds": [0], "execution": {"backend": "local", "shards": 1}}
    for dotted, value in fields.items():
        section, _, key = dotted.partition("__")
        if key:
            tree.setdefault(section, {})[key] = value
        else:
            tree[section] = value
    return tree


def _planned(**fields) -> planning.PlannedRun:
    (run,) = config.expand(_tree(**fields))
    return planning.plan_run(run)


@pytest.mark.parametrize("fields, rounds, coordinates", [
    ({}, 7, 7 * 300 * 4),  # full_gd: every user in each of its rounds, d coordinates each
    ({"problem__dim": 9}, 7, 7 * 300 * 9),
    ({"problem__records_per_user": 3}, 7, 7 * 300 * 3 * 4),  # user level: a user's gradient is over its 3 records
    ({"privacy": {"epsilon": 1.0, "delta": 1e-6, "honest_fraction": 0.5}}, 7, 7 * 150 * 4),  # robust mode: ⌊γ·n⌋ answer each round
    ({"optimizer": {"name": "mean_estimation"}, "n_users": 1000}, 1, 1000 * 4),
], ids=["full_gd", "dim", "records", "dropouts", "mean_estimation"])
def test_the_work_is_counted_from_the_schedule(fields, rounds, coordinates):
    counted = work.work_of(_planned(**fields).job, "local")
    assert (counted.rounds, counted.coordinates, counted.fanouts) == (rounds, coordinates, 0)


def test_a_fully_interactive_run_on_ray_counts_a_fan_out_per_round_and_a_sequential_one_none():
    assert work.work_of(_planned().job, "ray").fanouts == 7
    assert work.work_of(_planned(optimizer={"name": "seq_sgd"}, n_users=2000).job, "ray").fanouts == 0


def test_the_estimate_is_rounds_and_coordinates_at_the_machines_speed(monkeypatch):
    monkeypatch.setattr(work, "probe_seconds", lambda: 1e-8)
    planned = _planned()
    counted = work.work_of(planned.job, "local")
    expected = 1e-8 * (work.ROUND_PROBES[counted.compiled] * 7 + work.COORDINATE_PROBES * 7 * 300 * 4)
    assert planned.estimate_s == pytest.approx(expected, rel=1e-12)


def test_max_minutes_refuses_a_run_above_it_and_admits_one_below(monkeypatch):
    monkeypatch.setattr(work, "probe_seconds", lambda: 1e-8)
    estimate = _planned().estimate_s
    assert _planned(execution={"backend": "local", "shards": 1, "max_minutes": 1.01 * estimate / 60}).estimate_s == estimate
    with pytest.raises(config.ConfigError, match=r"^config error: execution.max_minutes = .*: run .* is estimated at "
                                                 rf"up to {re.escape(work.duration(estimate))} on one core "
                                                 r"\(7 rounds, 8\.4e\+03 user-coordinates"):
        _planned(execution={"backend": "local", "shards": 1, "max_minutes": 0.99 * estimate / 60})


def test_a_literal_run_under_a_limit_is_refused_as_not_estimated():
    literal = {"problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": 2000,
               "privacy": {"epsilon": 1.0, "delta": 1e-6, "accounting": "tight"}}
    with pytest.raises(config.ConfigError, match="execution.max_minutes = 5.0: literal simulation is not estimated"):
        _planned(**literal, execution={"backend": "local", "shards": 1, "simulation": "literal", "max_minutes": 5})
    assert _planned(**literal, execution={"backend": "local", "shards": 1, "simulation": "literal"}).estimate_s is None


def test_the_limit_is_not_part_of_a_runs_identity_and_must_be_positive():
    (plain,) = config.expand(_tree())
    (limited,) = config.expand(_tree(execution={"backend": "local", "shards": 1, "max_minutes": 3}))
    assert plain.run_id == limited.run_id
    with pytest.raises(config.ConfigError, match="execution.max_minutes"):
        config.expand(_tree(execution={"backend": "local", "shards": 1, "max_minutes": 0}))


def test_the_command_refuses_a_run_over_its_limit_in_one_line_with_nothing_written(tmp_path):
    """The red team's case scaled down: a one-round mean estimate over many users, refused by
    `python -m pipeline run` before any work (no results folder, no MLflow store)."""
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(_tree(
        optimizer={"name": "mean_estimation"}, n_users=10**9,
        tracking={"out": "res", "mlflow_uri": "sqlite:///mlflow.db"})))
    done = subprocess.run([sys.executable, "-m", "pipeline", "run", "grid.yaml", "--set", "execution.max_minutes=0.5"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    refusal = [line for line in done.stderr.splitlines() if line.startswith("config error")]
    assert done.returncode == 2 and len(refusal) == 1, done.stderr
    assert "execution.max_minutes = 0.5: run" in refusal[0] and "4e+09 user-coordinates" in refusal[0]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["grid.yaml"]


def test_a_long_grid_says_its_estimate_before_it_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "ANNOUNCE_S", 0.0)
    said = []
    runner.run_grid(config.expand(_tree(tracking={"out": str(tmp_path / "res"),
                                                  "mlflow_uri": f"sqlite:///{tmp_path}/mlflow.db"})), said.append)
    assert [line for line in said if line.startswith("estimated compute: up to ")], said
    monkeypatch.setattr(runner, "ANNOUNCE_S", 1e9)
    said.clear()
    runner.run_grid(config.expand(_tree(seeds=[1], tracking={"out": str(tmp_path / "res2"),
                                                              "mlflow_uri": f"sqlite:///{tmp_path}/mlflow.db"})),
                    said.append)
    assert not [line for line in said if line.startswith("estimated compute")], said


def test_a_datasets_users_count_their_rows_and_its_metrics_their_reads(tmp_path):
    """Users of a table's user column hold its rows, not problem.records_per_user's one each: 30
    users of 2 to 8 rows (150 in all) each send the mean gradient over their rows, and the metrics
    read every row at each evaluation round. (Counting one record a user underestimated MovieLens'
    runs 2–5×.)"""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    counts = np.tile([2, 8], 15)  # 150 rows
    rng = np.random.default_rng(0)
    pq.write_table(pa.table({"x0": rng.random(150), "x1": rng.random(150), "label": rng.integers(0, 2, 150),
                             "client": np.repeat(np.arange(30), counts)}), tmp_path / "t.parquet")
    planned = _planned(problem={"name": "dataset", "source": str(tmp_path / "t.parquet"), "user_column": "client",
                                "features": "x*", "dim": 2, "loss": "logistic", "radius": 1.0}, n_users=30)
    counted = work.work_of(planned.job, "local")
    assert counted.coordinates == 7 * 30 * (150 / 30) * 2
    assert counted.evaluated == len(planned.job.evaluation_rounds) * 150 * 3  # features and label
    assert counted.seconds(1e-8) == pytest.approx(1e-8 * (
        work.ROUND_PROBES[counted.compiled] * 7 + work.COORDINATE_PROBES * counted.coordinates
        + work.EVALUATION_PROBES * counted.evaluated), rel=1e-12)
    # A subset of the users is counted at the rows of those holding the most: an upper bound.
    assert work.work_of(_planned(problem=planned.config.nested()["problem"], n_users=10).job, "local").coordinates \
        == 7 * 10 * (80 / 10) * 2
