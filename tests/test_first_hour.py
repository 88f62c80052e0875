"""A user's first hour (issue 44): what `python -m pipeline run` says when Ray cannot start or a
cluster cannot be reached."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CONFIG = """\
experiment: first-hour
problem: {name: quadratic, dim: 3, radius: 1.0}
n_users: 2000
optimizer: {name: seq_sgd}
privacy: {epsilon: 2.0, delta: 1.0e-5}
execution: {backend: ray, shards: 2}
seeds: [0]
"""


def _run(tmp_path: Path, env: dict, prelude: str = "") -> subprocess.CompletedProcess:
    config = tmp_path / "grid.yaml"
    config.write_text(CONFIG)
    code = textwrap.dedent(f"""\
        import sys
        {prelude}
        from pipeline import cli
        sys.exit(cli.main(["run", {str(config)!r}, "--out", {str(tmp_path / 'out')!r},
                           "--set", "tracking.mlflow_uri=sqlite:///{tmp_path / 'mlflow.db'}"]))
        """)
    environment = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**environment, "PYTHONPATH": str(REPO), **env}, timeout=300)


def _refusal(done: subprocess.CompletedProcess) -> str:
    """The stderr's one line (exit 2), with nothing written."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_a_cluster_that_cannot_be_reached_is_one_line_naming_both_ways_out(tmp_path):
    began = time.monotonic()
    line = _refusal(_run(tmp_path, {"RAY_ADDRESS": "127.0.0.1:1"}))
    assert time.monotonic() - began < 60  # ray.init alone waits minutes for such an address
    assert line.startswith("config error: RAY_ADDRESS = '127.0.0.1:1': the Ray cluster could not be reached"), line
    assert "execution.backend: local" in line and "RAY_ADDRESS" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()


def test_a_local_ray_that_cannot_start_is_one_line_naming_both_ways_out(tmp_path):
    # As a loaded machine's ray.init fails: Ray waits for its agents, then raises.
    prelude = ("import ray\n"
               "def refuse(*args, **kwargs):\n"
               "    raise TimeoutError('Timed out waiting for the dashboard agent to start.\\nsecond line')\n"
               "ray.init = refuse")
    line = _refusal(_run(tmp_path, {}, textwrap.indent(prelude, "        ").lstrip()))
    assert line.startswith("config error: execution.backend = 'ray': a local Ray instance could not start: "
                           "TimeoutError: Timed out waiting for the dashboard agent"), line
    assert "second line" not in line
    assert "execution.backend: local" in line and "RAY_ADDRESS" in line
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()


def _planned_grid(execution: dict | None = None):
    from pipeline import config
    from pipeline.planning import plan_run

    tree = {"experiment": "first-hour", "problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": 4000,
            "optimizer": {"name": "seq_sgd"}, "privacy": {"epsilon": 2.0, "delta": 1e-5},
            "execution": {"backend": "local", **(execution or {})}, "seeds": [0, 1],
            "grid": {"privacy.epsilon": [1.0, 8.0], "privacy.accounting": ["paper", "tight"]}}
    return [plan_run(run) for run in config.expand(tree)]


@pytest.mark.parametrize("shards, warm_shards, warm_block", [(1, 1, 4096), (4, 2, 300)])
def test_a_cold_kernel_cache_is_announced_and_compiled_once_per_kind_of_run_before_the_grid(monkeypatch, shards,
                                                                                          warm_shards, warm_block):
    """Each kind of run is warmed by a small local run on as many shards as it has, up to two (blocks
    of half its users): a fully interactive run's kernels differ on one shard and on several."""
    from pipeline import engine, runner

    planned = _planned_grid({"shards": shards})
    calls, said = [], []
    monkeypatch.setattr(engine, "kernels_cached", lambda jobs=(): False)
    monkeypatch.setattr(engine, "execute",
                        lambda job, backend, shards: calls.append((job.n_users, job.block_size, backend, shards)))
    runner._compile_first(planned, said.append)
    assert said[0] == ("compiling the fused rounds' kernels: once per install and optimizer (numba caches them), "
                       "about 15 s on 2 cores")
    assert said[1].startswith("kernels compiled in ")
    # 8 runs, 2 kinds (paper and tight accounting: their calls' constants differ in type)
    assert calls == [(runner.WARM_USERS, warm_block, "local", warm_shards)] * 2


def test_a_warm_kernel_cache_is_silent(monkeypatch):
    from pipeline import engine, runner

    said, calls = [], []
    monkeypatch.setattr(engine, "kernels_cached", lambda jobs=(): True)
    monkeypatch.setattr(engine, "execute", lambda job, backend, shards: calls.append(job))
    runner._compile_first(_planned_grid(), said.append)
    assert said == [] and calls == []
