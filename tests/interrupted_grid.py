"""A grid interrupted by Ctrl-C, then rerun: the command behind
tests/test_grid.py::test_an_interrupted_grid_resumes_without_duplicates, run in the
background from the start of the test run (tests/conftest.py, BACKGROUND).

Usage: python tests/interrupted_grid.py OUT. Writes OUT/grid.yaml, the results under
OUT/out, the MLflow store OUT/mlflow.db, a copy of the runs table after the interrupt
(OUT/partial_runs.parquet), and OUT/outcome.json: each pass's exit status
and standard error.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

# The grid of tests/test_grid.py (8 runs on Ray) ...
GRID = """
experiment: grid
problem: {name: quadratic, dim: 3, radius: 1.0}
n_users: 20000
optimizer: {name: seq_sgd}
privacy: {epsilon: 4.0, delta: 1.0e-6}
seeds: [0, 1]
grid: {optimizer.name: [mean_estimation, seq_sgd], n_users: [5000, 20000]}
execution: {backend: ray, shards: 2}
"""
# ... and the one interrupted here: twelve local runs. Ctrl-C lands 0.2 s after the second
# is recorded; the ten left take seconds (the six seq_sgd ones ~10 s, on an idle machine),
# so it lands mid-grid.
INTERRUPTED = GRID.replace("backend: ray", "backend: local").replace("n_users: [5000, 20000]",
                                                                      "n_users: [5000, 20000, 50000]")

def main(out: Path) -> None:
    """Runs the grid, interrupts it after its second run, then runs it again to the end."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "grid.yaml").write_text(INTERRUPTED)
    command = [sys.executable, "-m", "pipeline", "run", str(out / "grid.yaml"), "--out", str(out / "out"),
               "--set", f"tracking.mlflow_uri=sqlite:///{out / 'mlflow.db'}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # progress lines arrive as they are printed
    with open(out / "first_stderr.txt", "w") as stderr:
        # Ctrl-C's default action in the child even if this runs as a background job (SIGINT ignored).
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=out, env=env,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        for line in child.stdout:  # wait until some runs are recorded, then Ctrl-C
            if " 2/12 " in line:
                break
        time.sleep(0.2)
        child.send_signal(signal.SIGINT)
        child.communicate(timeout=120)
    first = {"returncode": child.returncode, "stderr": (out / "first_stderr.txt").read_text()}
    # The runs table (a folder of part files, one per attempt) as the interrupt left it.
    shutil.copytree(out / "out" / "runs.parquet", out / "partial_runs.parquet")
    rerun = subprocess.run(command, capture_output=True, text=True, cwd=out, timeout=300)
    (out / "outcome.json").write_text(json.dumps({
        "first": first, "rerun": {"returncode": rerun.returncode, "stderr": rerun.stderr}}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
