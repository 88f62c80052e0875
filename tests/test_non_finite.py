"""A NaN or infinite gradient fails its run, naming the round, the user and the value class,
instead of being cast into a message (issue #29, item 3); on both backends."""
from __future__ import annotations

import pandas as pd
import pytest
import yaml

from pipeline import cli

# The quadratic's gradients, but the first user of every chunk gets VALUE in its first coordinate.
PLUGIN = '''
import dataclasses
from typing import ClassVar

from pipeline.problems.quadratic import Quadratic


@dataclasses.dataclass(frozen=True)
class Poisoned(Quadratic):
    name: ClassVar[str] = "poisoned"

    def gradients(self, theta, data, out=None):
        grads = Quadratic.gradients(self, theta, data, out=out)
        grads[0, 0] = VALUE
        return grads
'''


@pytest.mark.parametrize("backend", ["local", "ray"])
@pytest.mark.parametrize("value, shown", [("float('nan')", "NaN"), ("float('inf')", "+inf"),
                                          ("-float('inf')", "-inf")])
def test_a_non_finite_gradient_fails_the_run_naming_round_user_and_class(tmp_path, new_mlflow_store, value, shown,
                                                                         backend, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    plugin = tmp_path / "poisoned.py"
    plugin.write_text(PLUGIN.replace("VALUE", value))
    tree = {"experiment": "poisoned", "problem": {"name": f"{plugin}:Poisoned", "dim": 3, "radius": 1.0},
            "n_users": 400, "optimizer": {"name": "seq_sgd", "batch_size": 20},
            "privacy": {"epsilon": 4.0, "delta": 1e-6},
            "execution": {"backend": backend, "shards": 2, "block_size": 64},
            "tracking": {"mlflow_uri": new_mlflow_store(tmp_path / "mlflow.db"), "out": str(tmp_path / "out")}}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tree))
    assert cli.main(["run", str(config)]) != 0
    (row,) = pd.read_parquet(tmp_path / "out" / "runs.parquet").to_dict("records")
    assert row["status"] == "failed"
    # Round 0's users are 0 … 19; the first column of its one chunk is user 0.
    assert row["error"] == f"NonFiniteError: round 0: user 0's gradient holds {shown}", row["error"]
