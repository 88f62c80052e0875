"""The trust boundary in the outputs (DESIGN §3): no raw value, per-user
value or user id in any artifact, Parquet file or MLflow record."""
from __future__ import annotations

import json
import re
import sqlite3
import textwrap

import numpy as np
import pandas as pd

from pipeline import cli, config, planning
from pipeline.engine.shard import Shard

SMALL = """
experiment: boundary
problem: {name: quadratic, dim: 3, radius: 1.0}
n_users: 40
optimizer: {name: mean_estimation}
privacy: {epsilon: 15.0, delta: 0.4}
seeds: [5]
grid: {optimizer.name: [mean_estimation, seq_sgd]}
execution: {backend: local, shards: 2, block_size: 8}
"""


def _numbers(value):
    """Every number inside a JSON-like value."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield float(value)


def test_no_raw_or_per_user_value_and_no_user_id_leaves_the_shards(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(SMALL))
    assert cli.main(["run", str(path)]) == 0
    (planned, *_) = [planning.plan_run(run) for run in config.expand(config.read_config(path))]
    layout = planned.job.layout
    shard = Shard(planned.job, 0, layout.n_blocks)  # the users' points, regenerated from the seed
    raw = np.concatenate([shard.draw_block(block) for block in shard.blocks], axis=1)
    theta0 = np.zeros(3)
    secrets = set(raw.ravel()) | set((theta0[:, None] - raw).ravel())  # raw points and first-round gradients
    secrets.discard(0.0)

    found: list[float] = []
    out = tmp_path / "results" / "boundary"
    # Every part file of the results tables (folders of parts), and the rounds.parquet and
    # ledger.json that each MLflow run holds as artifacts (in ./mlartifacts), besides the
    # results folder's artifacts/<run_id>/ledger.json.
    parquets = sorted(tmp_path.rglob("*.parquet"))
    parquets = [path for path in parquets if path.is_file()]
    ledgers = sorted(tmp_path.rglob("ledger.json"))
    for table in ("runs.parquet", "rounds.parquet"):
        assert len(list(out.glob(f"{table}/part-*.parquet"))) == 2, table
    assert len(list(out.glob("artifacts/*/ledger.json"))) == 2
    assert len(parquets) == 2 + 2 + 2 and len(ledgers) == 2 + 2  # results folder and MLflow artifacts
    for parquet in parquets:
        table = pd.read_parquet(parquet)
        # Counts of users are fine; ids, indices or ranges of users are not.
        assert not [c for c in table.columns if re.search(r"user_?(id|index)|(first|stop)_user", c)], parquet
        found += [float(v) for v in table.select_dtypes("number").to_numpy().ravel()]
    for ledger in ledgers:
        text = ledger.read_text()
        assert "first_user" not in text and "stop_user" not in text
        found += list(_numbers(json.loads(text)))
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        found += [float(v) for (v,) in db.execute("SELECT value FROM metrics")]
        for (value,) in db.execute("SELECT value FROM params"):
            try:
                found.append(float(value))
            except ValueError:
                pass
    assert len(found) > 100  # the scan saw the outputs
    leaked = secrets.intersection(found)
    assert not leaked, f"{len(leaked)} raw or per-user values appear in the outputs"
