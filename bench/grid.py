"""Grids of small runs, end to end (issue 43): `python -m pipeline run` of a grid of N small
runs (n = 1,000, d = 3: mean estimation and seq_sgd, paper and tight accounting, N/4 seeds)
on the local backend and on a local Ray instance, and the same command again once every run
has finished, each over one single-run `python -m pipeline run` (start-up, a new MLflow store
and Ray included) timed in the same run.

A grid of small runs should cost about its compute: the targets are ≤ 4× one run for 1,000
runs locally, Ray ≤ 1.5× local, and a rerun of the finished grid ≤ 1× one run.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.timing import sized

ROOT = Path(__file__).resolve().parent.parent

_GRID = {
    "experiment": "grid-bench",
    "problem": {"name": "quadratic", "dim": 3, "radius": 1.0},
    "n_users": 1000,
    "optimizer": {"name": "seq_sgd"},
    "privacy": {"epsilon": 2.0, "delta": 1e-6},
    "grid": {"optimizer.name": ["mean_estimation", "seq_sgd"], "privacy.accounting": ["paper", "tight"]},
    "execution": {"shards": 2},
}


def _wall(folder: Path, name: str, seeds: int, backend: str) -> float:
    """Seconds of `python -m pipeline run` of the grid with `seeds` seeds (0: a single run, the
    first grid point's first seed) into the results folder and MLflow store named `name`."""
    config = folder / f"{name}.yaml"
    tree = {**_GRID, "seeds": list(range(seeds)), "execution": {**_GRID["execution"], "backend": backend},
            "tracking": {"mlflow_uri": f"sqlite:///{folder / name}.db", "out": str(folder / name)}}
    if seeds == 0:
        tree = {**tree, "seeds": [0], "grid": {}}
    config.write_text(yaml.safe_dump(tree))
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipeline", "run", str(config)], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - began


def run(size: str = "quick") -> dict[str, float]:
    """The grid's walls over one run's.

    Args:
      size: one of bench.timing.SIZES: grids of 4, 40 and 1,000 runs.

    Returns:
      name → value.
    """
    seeds = sized(size, 1, 10, 250)
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        single = _wall(folder, "single", 0, "local")
        local = _wall(folder, "local", seeds, "local")
        rerun = _wall(folder, "local", seeds, "local")  # the same folder: every run finished, skipped
        ray = _wall(folder, "ray", seeds, "ray")
    runs = 4 * seeds
    return {"grid_runs": runs, "grid_single_run_s": single, "grid_local_s": local,
            "grid_local_vs_single_run": local / single, "grid_ray_vs_local": ray / local,
            "grid_rerun_vs_single_run": rerun / single, "grid_local_s_per_run": local / runs}
