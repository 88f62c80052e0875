"""experiments/analysis.ipynb runs on a results folder and agrees with the report."""
from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
from nbclient import NotebookClient

from pipeline import cli

NOTEBOOK = Path(__file__).resolve().parents[1] / "experiments" / "analysis.ipynb"


def test_notebook_reproduces_the_reports_slopes(tmp_path, monkeypatch, new_mlflow_store):
    config = tmp_path / "small.yaml"
    config.write_text(textwrap.dedent("""
        experiment: notebook
        problem: {name: quadratic, dim: 3, radius: 1.0}
        optimizer: {name: mean_estimation}
        privacy: {epsilon: 8.0, delta: 1.0e-6}
        seeds: [0, 1]
        grid: {n_users: [2000, 8000, 32000]}
        execution: {backend: local, shards: 1}
    """))
    out = tmp_path / "results"
    uri = new_mlflow_store(tmp_path / "m.db")
    assert cli.main(["run", str(config), "--out", str(out), "--set", f"tracking.mlflow_uri={uri}"]) == 0
    assert cli.main(["report", str(out)]) == 0
    monkeypatch.setenv("RESULTS", str(out))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert (out / "notebook_excess_vs_n.png").read_bytes()[:4] == b"\x89PNG"
    # The notebook's slopes equal the report's.
    mine = pd.read_csv(out / "notebook_slopes.csv")
    report = pd.read_csv(out / "report" / "slopes.csv")
    assert len(mine) == len(report) == 1 and np.isfinite(report["measured_slope"]).all()
    np.testing.assert_allclose(mine[["measured_slope", "theory_slope"]], report[["measured_slope", "theory_slope"]],
                               rtol=1e-12)
