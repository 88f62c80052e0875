"""experiments/analysis.ipynb runs on a results folder and agrees with the report."""
from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
from nbclient import NotebookClient

from pipeline import cli, results

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
    # The repository as Jupyter sees it: the kernel starts in experiments/, the quickstart's results
    # are in results/quickstart at the root; RESULTS unset, so the notebook finds them itself.
    repository = tmp_path / "repository"
    (repository / "experiments").mkdir(parents=True)
    out = repository / "results" / "quickstart"
    uri = new_mlflow_store(tmp_path / "m.db")
    assert cli.main(["run", str(config), "--out", str(out), "--set", f"tracking.mlflow_uri={uri}"]) == 0
    # An attempt killed after writing its rounds (no runs row): its rounds are no run's, in the
    # notebook as in the report (both read the folder with pipeline.results.load).
    part = sorted((out / "rounds.parquet").glob("part-*.parquet"))[0]
    killed = pd.read_parquet(part).assign(mlflow_run_id="killed-attempt", excess_loss=1.0)
    killed.to_parquet(out / "rounds.parquet" / f"part-{killed['run_id'][0]}-killed-attempt.parquet", index=False)
    assert cli.main(["report", str(out)]) == 0
    monkeypatch.delenv("RESULTS", raising=False)
    monkeypatch.delenv("OUTPUTS", raising=False)
    before = sorted(path.relative_to(out) for path in out.rglob("*"))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    kernel_folder = repository / "experiments"
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(kernel_folder)}}).execute()
    assert sorted(path.relative_to(out) for path in out.rglob("*")) == before  # nothing written into the results
    runs, rounds = results.load(out)
    assert len(runs) == 6 and "killed-attempt" not in set(rounds["mlflow_run_id"])
    printed = "".join(output.get("text", "") for output in notebook.cells[1].outputs)
    assert printed.strip() == f"{len(runs)} finished runs, {len(rounds)} rounds"
    assert (kernel_folder / "notebook_outputs" / "excess_vs_n.png").read_bytes()[:4] == b"\x89PNG"
    # Shown inline too (Jupyter's own backend: the notebook forces none), and written only where
    # .gitignore covers (experiments/notebook_outputs/ of the repository).
    assert any("image/png" in output.get("data", {}) for output in notebook.cells[5].outputs)
    ignored = subprocess.run(["git", "check-ignore", "-q", "experiments/notebook_outputs/excess_vs_n.png"],
                             cwd=Path(__file__).resolve().parents[1])
    assert ignored.returncode == 0
    # The notebook's slopes equal the report's.
    mine = pd.read_csv(kernel_folder / "notebook_outputs" / "slopes.csv")
    report = pd.read_csv(out / "report" / "slopes.csv")
    assert len(mine) == len(report) == 1 and np.isfinite(report["measured_slope"]).all()
    np.testing.assert_allclose(mine[["measured_slope", "theory_slope"]], report[["measured_slope", "theory_slope"]],
                               rtol=1e-12)
