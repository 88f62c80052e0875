"""What users run, through `python -m pipeline run`: combinations that used to fail per run
now plan (girgis_binary with mean_estimation), and one that cannot run is refused before any work."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pipeline import cli
from pipeline.config import expand
from pipeline.protocols.multi_message import GirgisProtocol
from pipeline.planning import plan_run

BINARY_MEAN = {
    "experiment": "binary_mean",
    "problem": {"name": "bernoulli", "dim": 3, "radius": 1.0},
    "n_users": 500,
    "optimizer": {"name": "mean_estimation"},
    "privacy": {"protocol": "girgis_binary", "epsilon": 1.0, "delta": 1e-6},
    "execution": {"backend": "local", "shards": 1, "block_size": 128},
}
# A protocol plug-in that plans every call but has no error formula for the theoretical rate.
NO_RATE_PLUGIN = '''
from pipeline.protocols.base import PlanError
from pipeline.protocols.cjmp import CjmpVec


class NoRate(CjmpVec):
    name = "no_rate"

    def mean_mse(self, *args, **kwargs):
        raise PlanError("privacy.protocol", "no_rate has no error formula to plan a rate with")
'''


def _write(folder: Path, name: str, tree: dict) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def test_girgis_binary_mean_estimation_runs_and_records_its_rate(tmp_path, new_mlflow_store):
    """Seed 001's binary randomizer on binary data runs end to end, and its rate is the one of the
    call the run makes: E‖error‖² = sum_mse/n² of the planned call (DATA inputs), eq. 3.10."""
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    config = _write(tmp_path, "binary.yaml", {**BINARY_MEAN, "tracking": {"mlflow_uri": uri}})
    assert cli.main(["run", str(config), "--out", str(tmp_path / "out")]) == 0
    (row,) = pd.read_parquet(tmp_path / "out" / "runs.parquet").to_dict("records")
    assert row["status"] == "finished" and math.isfinite(row["final_excess_loss"])
    planned = plan_run(expand(BINARY_MEAN)[0])
    protocol, job = planned.job.protocol, planned.job
    assert isinstance(protocol, GirgisProtocol)
    params = protocol.plan(job.schedule.plan(0), 3)
    n, bound = BINARY_MEAN["n_users"], job.problem.data_norm_bound
    # mean_estimation's rate: ½(B²/n + sum_mse/n²), the sampling term plus the planned call's error.
    expected = 0.5 * (bound**2 / n + protocol.sum_mse(params) / n**2)
    assert row["theory_rate"] == planned.rates["theory_rate"] == pytest.approx(expected, rel=1e-12)
    assert protocol.sum_mse(params) > 0


def test_a_combination_without_a_rate_is_refused_before_any_work(tmp_path, capsys):
    """A grid whose second point cannot plan its rate stops in one config error line, exit 2,
    before the first point runs: no results folder, no MLflow store."""
    (tmp_path / "no_rate.py").write_text(NO_RATE_PLUGIN)
    tree = {**BINARY_MEAN, "problem": {"name": "quadratic", "dim": 3, "radius": 1.0},
            "privacy": {"epsilon": 1.0, "delta": 1e-6},
            "grid": {"privacy.protocol": ["cjmp_vec", f"{tmp_path / 'no_rate.py'}:NoRate"]},
            "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}}
    config = _write(tmp_path, "grid.yaml", tree)
    assert cli.main(["run", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("config error: privacy.protocol = ") and "rate" in err[0], err
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()


# A problem plug-in whose gradients fail at run time (after planning succeeded).
FAILING_PLUGIN = '''
import dataclasses
from typing import ClassVar

from pipeline.problems.quadratic import Quadratic


@dataclasses.dataclass(frozen=True)
class Failing(Quadratic):
    name: ClassVar[str] = "failing"

    def gradients(self, theta, data, out=None):
        raise ArithmeticError("gradient exploded on purpose\\nsecond line")
'''


def test_a_failed_run_keeps_its_traceback_in_its_folder_mlflow_and_one_line_in_runs_parquet(
        tmp_path, new_mlflow_store, capsys):
    """A run that raises is marked failed with why: the whole traceback in OUT/artifacts/<id>/traceback.txt
    and as its MLflow artifact, its first line in runs.parquet's `error`."""
    from mlflow.tracking import MlflowClient

    (tmp_path / "failing.py").write_text(FAILING_PLUGIN)
    uri = new_mlflow_store(tmp_path / "mlflow.db")
    tree = {**BINARY_MEAN, "problem": {"name": f"{tmp_path / 'failing.py'}:Failing", "dim": 3, "radius": 1.0},
            "optimizer": {"name": "seq_sgd"}, "privacy": {"protocol": "cjmp_vec", "epsilon": 1.0, "delta": 1e-6},
            "tracking": {"mlflow_uri": uri}}
    config = _write(tmp_path, "failing.yaml", tree)
    assert cli.main(["run", str(config), "--out", str(tmp_path / "out")]) == 1
    assert "ArithmeticError: gradient exploded on purpose" in capsys.readouterr().out
    (row,) = pd.read_parquet(tmp_path / "out" / "runs.parquet").to_dict("records")
    assert row["status"] == "failed" and row["error"] == "ArithmeticError: gradient exploded on purpose"
    assert {p.name for p in (tmp_path / "out" / "artifacts" / row["run_id"]).iterdir()} == {"traceback.txt"}
    assert not list((tmp_path / "out").glob("rounds.parquet/*"))  # a failed attempt records no rounds
    kept = (tmp_path / "out" / "artifacts" / row["run_id"] / "traceback.txt").read_text()
    assert kept.startswith("Traceback (most recent call last):") and "in gradients" in kept
    assert kept.rstrip().endswith("second line")
    client = MlflowClient(tracking_uri=uri)
    assert client.get_run(row["mlflow_run_id"]).info.status == "FAILED"
    logged = Path(client.download_artifacts(row["mlflow_run_id"], "traceback.txt", str(tmp_path))).read_text()
    assert logged == kept
