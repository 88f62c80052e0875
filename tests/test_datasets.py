"""Users' own data (pipeline.problems.dataset): the rows of a table are the users,
each shard reads only its own rows, metrics are sums over the rows, and bad
input is one line before any work. Expected values are computed here with
numpy from the file, independently of the pipeline's block sums."""
from __future__ import annotations

import json
import math
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import cli, config, engine
from pipeline.engine import evaluation
from pipeline.problems import Dataset
from pipeline.problems.losses import LOSSES
from pipeline.problems.tables import Table
from pipeline.planning import plan_run

D = 4


def _table(path: Path, features: np.ndarray, labels: np.ndarray, row_group: int = 100) -> Path:
    """Writes (rows, d) features as columns x0 … and the label column, in the path's format."""
    columns = {f"x{i}": features[:, i] for i in range(features.shape[1])}
    if path.suffix == ".npz":
        np.savez(path, X=features, label=labels)
    elif path.suffix == ".csv":
        pd.DataFrame({**columns, "label": labels}).to_csv(path, index=False)
    else:
        pq.write_table(pa.table({**columns, "label": labels}), path, row_group_size=row_group)
    return path


def _logistic_data(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    features = rng.standard_normal((rows, D)) * 0.8
    truth = np.linspace(1.0, -1.0, D)
    labels = (rng.random(rows) < 1 / (1 + np.exp(-features @ truth))).astype(np.int64)
    return features, labels


def _config(tmp_path: Path, problem: dict, **top) -> Path:
    body = {"experiment": "data", "n_users": 800, "problem": {"name": "dataset", "dim": D, "radius": 2.0, **problem},
            "optimizer": {"name": "seq_sgd"}, "privacy": {"epsilon": 4.0, "delta": 1e-6, "accounting": "tight"},
            "execution": {"backend": "local", "shards": 2, "block_size": 64},
            "tracking": {"out": str(tmp_path / "out"), "mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}, **top}
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(body))  # JSON is YAML
    return path


def _records(path: Path, backend: str = "local", shards: int = 2):
    run = config.expand(config.read_config(path, [f"execution.backend={backend}", f"execution.shards={shards}"]))[0]
    planned = plan_run(run)
    state, records = engine.execute(planned.job, backend, shards)
    return planned, planned.job.optimizer.output(state), records


def _trace(records) -> np.ndarray:
    return np.array([[r.excess_loss, r.population_loss, r.test_loss, r.test_accuracy] for r in records])


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Each test solves its optima afresh, in its own folder."""
    monkeypatch.setenv("SHUFFLE_SCO_CACHE", str(tmp_path / "cache"))


# --- losses and their constants -------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_each_loss_derivative_is_the_finite_difference_of_its_values(name):
    loss = LOSSES[name](classes=3, label_bound=2.0, huber_delta=0.7)
    rng = np.random.default_rng(1)
    scores = rng.uniform(-3, 3, (loss.outputs, 1, 50))
    labels = rng.integers(0, 3, 50).astype(float) if name == "multinomial" else loss.code(
        rng.uniform(-2, 2, 50) if name in ("least_squares", "huber") else rng.integers(0, 2, 50).astype(float))
    h = 1e-6
    for k in range(loss.outputs):
        step = np.zeros_like(scores)
        step[k] = h
        numeric = (loss.values(scores + step, labels) - loss.values(scores - step, labels)) / (2 * h)
        assert np.allclose(loss.derivative(scores, labels)[k], numeric, atol=1e-6)


def _problem(tmp_path: Path, loss: str, features: np.ndarray, labels: np.ndarray, **options) -> Dataset:
    source = _table(tmp_path / f"{loss}.parquet", features, labels)
    return Dataset(dim=features.shape[1], radius=options.pop("radius", 3.0), source=str(source), loss=loss, **options)


CONSTANT_CASES = {  # loss → (options, labels of the worst records): the sup of ‖∇ℓ‖ is met at θ = −R·y·x/‖x‖
    "logistic": ({}, np.array([1, 0, 1])),
    "smoothed_hinge": ({}, np.array([1, 0, 1])),
    "least_squares": ({"label_bound": 2.0}, np.array([2.0, -2.0, 2.0])),
    "huber": ({"label_bound": 2.0, "huber_delta": 0.5}, np.array([2.0, -2.0, 2.0])),
    "multinomial": ({"classes": 3}, np.array([0, 1, 2])),
}


@pytest.mark.parametrize("name", sorted(CONSTANT_CASES))
def test_the_declared_lipschitz_constant_bounds_every_gradient_and_is_nearly_met(tmp_path, name):
    options, worst_labels = CONSTANT_CASES[name]
    rng = np.random.default_rng(2)
    features = rng.standard_normal((300, D)) * 2.0  # most rows clipped to B = 1
    labels = (rng.integers(0, 3, 300) if name == "multinomial" else
              rng.uniform(-2, 2, 300) if name in ("least_squares", "huber") else rng.integers(0, 2, 300))
    problem = _problem(tmp_path, name, features, labels, l2=0.1, **options)
    data = problem.read_users(300, 0, 300)
    assert np.linalg.norm(data[:-1], axis=0).max() <= 1.0 + 1e-12  # rows clipped to B
    for theta in rng.standard_normal((20, problem.dim)):
        theta = problem.project(theta * 5)
        assert np.linalg.norm(problem.gradients(theta, data), axis=0).max() <= problem.lipschitz * (1 + 1e-12)
    # The other side: records on the unit sphere, θ on the boundary against them.
    x = np.eye(D)[:, :3]
    worst = np.vstack([x, np.asarray(worst_labels, float)[None, :]])
    worst[-1] = problem.loss.code(worst[-1])
    if name == "multinomial":  # class scores: the wrong class high, the true one low
        theta = np.zeros((3, D))
        theta[1, 0], theta[0, 0] = 1.0, -1.0
        theta = problem.project(theta.ravel() * 10)
    else:
        theta = problem.project(-x[:, 0] * worst[-1, 0] * 10)
    norms = np.linalg.norm(problem.gradients(theta, worst[:, :1]), axis=0)
    assert norms.max() >= 0.9 * problem.lipschitz


def test_the_declared_smoothness_bounds_the_logistic_hessian_and_is_met_at_zero_margin(tmp_path):
    features, labels = _logistic_data(200)
    problem = _problem(tmp_path, "logistic", features, labels)
    data = problem.read_users(200, 0, 200)
    direction = data[:-1, :1] / np.linalg.norm(data[:-1, 0])  # along the first record
    h = 1e-5
    curvature = np.linalg.norm(problem.gradients(h * direction[:, 0], data[:, :1])
                               - problem.gradients(-h * direction[:, 0], data[:, :1])) / (2 * h)
    norm_sq = float(np.sum(data[:-1, 0] ** 2))
    assert curvature == pytest.approx(norm_sq / 4, rel=1e-6) and curvature <= problem.smoothness


# --- reading in place ---------------------------------------------------------------------------


def test_every_format_gives_the_same_run_bit_identical_for_any_sharding_and_backend(tmp_path, ray_session):
    features, labels = _logistic_data(1000)
    traces = {}
    for suffix in (".parquet", ".csv", ".npz"):
        source = _table(tmp_path / f"t{suffix}", features, labels)
        pattern = "X*" if suffix == ".npz" else "x*"
        path = _config(tmp_path, {"source": str(source), "features": pattern, "test_fraction": 0.2})
        for backend, shards in (("local", 1), ("local", 3), ("ray", 2)) if suffix == ".parquet" else (("local", 2),):
            traces[suffix, backend, shards] = _trace(_records(path, backend, shards)[2])
    reference = traces[".parquet", "local", 1]
    measured = np.isfinite(reference[:, 0])  # the evaluation rounds; the others are not measured
    assert measured.sum() > 10 and np.isfinite(reference[measured]).all() and measured[-1]
    for key, trace in traces.items():
        assert np.array_equal(trace, reference, equal_nan=True), key


def test_each_shard_reads_only_the_row_groups_that_hold_its_users(tmp_path, monkeypatch):
    features, labels = _logistic_data(1000)
    source = _table(tmp_path / "t.parquet", features, labels, row_group=50)
    groups_read: list[list[int]] = [[]]  # per Table.read call, the row groups it read
    ranges: list[tuple[int, int]] = []
    read_group, read = pq.ParquetFile.read_row_group, Table.read

    def spy_group(self, index, *args, **kwargs):
        if not groups_read[-1] or groups_read[-1][-1] != index:  # a group is read a column at a time
            groups_read[-1].append(index)
        return read_group(self, index, *args, **kwargs)

    def spy_read(self, columns, first, stop, rows=None):
        ranges.append((first, stop))
        groups_read.append([])
        return read(self, columns, first, stop, rows)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spy_group)
    monkeypatch.setattr(Table, "read", spy_read)
    path = _config(tmp_path, {"source": str(source)}, n_users=1000)
    run = config.expand(config.read_config(path))[0]
    planned = plan_run(run)
    assert groups_read == [[]] and not ranges  # planning scans in batches, it never keeps a row
    from pipeline.engine.local import LocalPool

    pool = LocalPool(planned.job, 3)
    assert ranges == pool.user_ranges  # one read per shard, of its own users' rows
    expected = [list(range(first // 50, (stop - 1) // 50 + 1)) for first, stop in pool.user_ranges]
    assert groups_read[1:] == expected  # each shard's groups overlap its rows (a boundary group is read twice)


def test_the_driver_never_reads_a_row_when_shards_are_ray_actors(tmp_path, monkeypatch, ray_session):
    features, labels = _logistic_data(1000)
    source = _table(tmp_path / "t.parquet", features, labels)

    def refuse(*args, **kwargs):
        raise AssertionError("the driver read rows")

    monkeypatch.setattr(Table, "read", refuse)  # in this process only; actors read
    path = _config(tmp_path, {"source": str(source), "test_fraction": 0.2}, n_users=700)
    assert cli.main(["run", str(path), "--set", "execution.backend=ray"]) == 0
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert list(runs["status"]) == ["finished"] and 0.5 < runs["final_test_accuracy"][0] <= 1.0


def test_the_optimum_cache_holds_only_the_reference_loss_owner_only(tmp_path):
    """The cache keeps F(θ̂) and its gap, not θ̂ (an exact statistic of the rows: with one row it was
    the row), in an owner-only folder and files; an entry written with θ̂ is scrubbed when read."""
    features, labels = _logistic_data(400)
    path = _config(tmp_path, {"source": str(_table(tmp_path / "t.parquet", features, labels))}, n_users=400)
    assert cli.main(["run", str(path)]) == 0
    folder = tmp_path / "cache" / "optima"
    (entry,) = folder.glob("*.json")
    stored = json.loads(entry.read_text())
    assert set(stored) == {"loss", "gap", "solver"}
    assert folder.stat().st_mode & 0o777 == 0o700 and entry.stat().st_mode & 0o777 == 0o600
    entry.write_text(json.dumps({**stored, "theta": [0.5] * D}))  # as versions before 0.3 wrote it
    assert cli.main(["run", str(path), "--out", str(tmp_path / "again")]) == 0
    assert set(json.loads(entry.read_text())) == {"loss", "gap", "solver"}


def test_no_value_of_a_record_reaches_the_parquet_files_or_mlflow(tmp_path):
    features, labels = _logistic_data(600)
    source = _table(tmp_path / "t.parquet", features, labels)
    path = _config(tmp_path, {"source": str(source), "test_fraction": 0.25}, n_users=450)
    assert cli.main(["run", str(path)]) == 0
    run = config.expand(config.read_config(path))[0]
    problem = plan_run(run).job.problem
    secrets = set(features.ravel()) | set(problem.read_users(450, 0, 450)[:-1].ravel())
    secrets.discard(0.0)
    found = []
    parts = [path for path in (tmp_path / "out").rglob("*.parquet") if path.is_file()]  # the tables' part files
    assert sorted(path.parent.name for path in parts) == ["rounds.parquet", "runs.parquet"]
    for parquet in parts:
        table = pd.read_parquet(parquet)
        assert not [c for c in table.columns if re.search(r"(user|row)_?(id|index)", c)], parquet
        found += [float(v) for v in table.select_dtypes("number").to_numpy().ravel()]
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        found += [float(v) for (v,) in db.execute("SELECT value FROM metrics")]
    assert len(found) > 100 and not secrets.intersection(found)


# --- metrics ---------------------------------------------------------------------------------------


def _risk(theta: np.ndarray, x: np.ndarray, y: np.ndarray, l2: float) -> float:
    """The logistic training objective from scratch: x (rows, d) clipped to 1, y in {0, 1}."""
    signs = np.where(y > 0, 1.0, -1.0)
    return float(np.mean(np.logaddexp(0.0, -signs * (x @ theta)))) + 0.5 * l2 * float(theta @ theta)


def _clipped(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(1.0, np.linalg.norm(x, axis=1))[:, None]


def test_measured_metrics_equal_a_direct_computation_from_the_file(tmp_path):
    features, labels = _logistic_data(1000, seed=3)
    source = _table(tmp_path / "t.parquet", features, labels)
    path = _config(tmp_path, {"source": str(source), "test_fraction": 0.3, "l2": 0.05}, n_users=500)
    planned, theta, records = _records(path)
    problem = planned.job.problem
    held = np.sort(np.random.default_rng([0, 1000]).choice(1000, 300, replace=False))
    train = np.setdiff1d(np.arange(1000), held)
    users = train[np.sort(np.random.default_rng([0, 1000, 500]).choice(700, 500, replace=False))]
    x, x_test = _clipped(features[users]), _clipped(features[held])
    final = records[-1]
    optimum, gap = evaluation.empirical_optimum(problem, 500, None)  # cached by the run
    assert final.population_loss == pytest.approx(_risk(theta, x, labels[users], 0.05), rel=1e-12)
    assert final.excess_loss == pytest.approx(final.population_loss - optimum, rel=1e-9)
    signs = np.where(labels[held] > 0, 1.0, -1.0)
    assert final.test_loss == pytest.approx(float(np.mean(np.logaddexp(0, -signs * (x_test @ theta)))), rel=1e-12)
    assert final.test_accuracy == np.mean(np.where(x_test @ theta > 0, 1.0, -1.0) == signs)
    assert final.optimum_gap == gap
    # The optimum, against projected gradient descent written here (β = 1/4 + μ, 20000 steps).
    theta_star = np.zeros(D)
    signs_train = np.where(labels[users] > 0, 1.0, -1.0)
    for _ in range(20000):
        slope = -signs_train / (1 + np.exp(signs_train * (x @ theta_star)))
        theta_star -= (x.T @ slope / 500 + 0.05 * theta_star) / (0.25 + 0.05)
        theta_star *= min(1.0, 2.0 / np.linalg.norm(theta_star))
    assert optimum == pytest.approx(_risk(theta_star, x, labels[users], 0.05), abs=1e-9)
    assert 0 <= gap <= 1e-8
    measured = [r.round for r in records if not math.isnan(r.excess_loss)]
    assert measured == sorted(planned.job.evaluation_rounds) and measured[-1] == len(records) - 1


def test_the_least_squares_optimum_on_an_active_ball_meets_its_kkt_conditions(tmp_path):
    rng = np.random.default_rng(4)
    features = rng.standard_normal((600, D)) * 0.4
    labels = np.clip(features @ np.array([3.0, -2.0, 1.0, 0.5]), -2, 2)
    source = _table(tmp_path / "t.parquet", features, labels)
    path = _config(tmp_path, {"source": str(source), "loss": "least_squares", "label_bound": 2.0}, n_users=600)
    planned, _, records = _records(path)
    optimum, gap = evaluation.empirical_optimum(planned.job.problem, 600, None)
    x, y = _clipped(features), labels
    free = np.linalg.lstsq(x, y, rcond=None)[0]
    assert np.linalg.norm(free) > 2.0  # the unconstrained minimiser is outside Θ: the ball is active
    # On the sphere ‖θ‖ = R the KKT point is θ = (XᵀX/n + νI)⁻¹Xᵀy/n with ν ≥ 0 making ‖θ‖ = R.
    from scipy.optimize import brentq

    solve = lambda nu: np.linalg.solve(x.T @ x / 600 + nu * np.eye(D), x.T @ y / 600)  # noqa: E731
    nu = brentq(lambda nu: np.linalg.norm(solve(nu)) - 2.0, 0.0, 100.0, xtol=1e-15)
    expected = 0.5 * float(np.mean((x @ solve(nu) - y) ** 2))
    assert optimum == pytest.approx(expected, abs=1e-9) and 0 <= gap <= 1e-8
    assert records[-1].excess_loss > 0


# --- bad input ------------------------------------------------------------------------------------------


def _bad_tables(tmp_path: Path) -> dict[str, Path]:
    features, labels = _logistic_data(100)
    nan = features.copy()
    nan[37, 2] = np.nan
    inf = features.copy()
    inf[5, 0] = np.inf
    text = pa.table({**{f"x{i}": features[:, i] for i in range(D - 1)}, "x3": pa.array(["a"] * 100),
                     "label": labels})
    pq.write_table(text, tmp_path / "text.parquet")
    (tmp_path / "broken.parquet").write_bytes(b"not parquet")
    return {"good": _table(tmp_path / "good.parquet", features, labels),
            "narrow": _table(tmp_path / "narrow.parquet", features[:, :-1], labels),  # lacks x3
            "nan": _table(tmp_path / "nan.parquet", nan, labels), "inf": _table(tmp_path / "inf.parquet", inf, labels),
            "label2": _table(tmp_path / "label2.parquet", features, np.where(labels > 0, 2, 0)),
            "text": tmp_path / "text.parquet", "broken": tmp_path / "broken.parquet"}


BAD = [  # (what, problem fields, top-level fields, the field the error names, a phrase of its rule)
    ("missing file", {"source": "{tmp}/nowhere.parquet"}, {}, "problem.source", "no such file"),
    ("unreachable URI", {"source": "file:///nonexistent/dir/t.parquet"}, {}, "problem.source", "no such file"),
    ("unknown format", {"source": "{tmp}/good.xlsx"}, {}, "problem.source", "must end in one of"),
    ("not parquet", {"source": "{broken}"}, {}, "problem.source", "not a readable Parquet"),
    ("missing label", {"source": "{good}", "label": "y"}, {}, "problem.label", "must be a column"),
    ("no features", {"source": "{good}", "features": "z*"}, {}, "problem.features", "must match"),
    ("non-numeric", {"source": "{text}"}, {}, "problem.features", "numeric"),
    ("NaN", {"source": "{nan}"}, {}, "problem.source", "row 37 is nan"),
    ("infinity", {"source": "{inf}"}, {}, "problem.source", "row 5 is inf"),
    ("label outside", {"source": "{label2}"}, {}, "problem.label", "must be 0 or 1"),
    ("class outside", {"source": "{label2}", "loss": "multinomial", "classes": 2, "dim": D}, {}, "problem.label",
     "integer class 0 … 1"),
    ("too few rows", {"source": "{good}"}, {"n_users": 101}, "n_users", "at most the 100 training rows"),
    ("too few after split", {"source": "{good}", "test_fraction": 0.5}, {"n_users": 60}, "n_users", "at most the 50"),
    ("dimension", {"source": "{good}", "dim": 3}, {}, "problem.dim", "must equal the number of feature columns"),
    ("statistics", {"source": "{good}", "rows": "standardize"}, {}, "problem.rows", "must be one of clip, normalize"),
    ("no source", {}, {}, "problem.source", "is required"),
    ("test lacks a column", {"source": "{good}", "test": "{narrow}"}, {}, "problem.test", "it lacks x3"),
]


@pytest.mark.parametrize("what, problem, top, field, phrase", BAD, ids=[case[0] for case in BAD])
def test_bad_input_is_one_line_naming_the_field_before_anything_is_written(tmp_path, capsys, what, problem, top,
                                                                          field, phrase):
    tables = _bad_tables(tmp_path)
    filled = {key: value.format(tmp=tmp_path, **tables) if isinstance(value, str) else value
              for key, value in problem.items()}
    path = _config(tmp_path, filled, **{"n_users": 80, **top})
    assert cli.main(["run", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"config error: {field} = ") and phrase in lines[0], lines
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()


# --- real data in the box ---------------------------------------------------------------------------------


def test_the_digits_grids_run_small_and_the_report_draws_accuracy_against_epsilon(tmp_path):
    """experiments/digits/ at ε ∈ {1, 15}, on the files make_datasets.py writes.
    Chance is 0.1; with 359 held-out images one accuracy's standard error is at most
    √(0.25/359) = 0.026, so 5 SE is 0.13. That SE leaves out the training's own noise
    (Poisson batches, Gaussian sums): one DP-SGD model's accuracy varies by about 0.08
    between seeds, so DP-SGD's ε = 15 is set against ε = 1 over 24 seeds each, with the
    SE of the gap from the seeds' own spread (about 0.024, against a gap of about 0.2)."""
    repo = Path(__file__).resolve().parents[1]
    data = tmp_path / "data"
    made = subprocess.run([sys.executable, str(repo / "experiments" / "make_datasets.py"), "sklearn", "--out", str(data)],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    out, uri = tmp_path / "results", f"sqlite:///{tmp_path / 'mlflow.db'}"
    for name in ("dp_sgd", "cldp_sgd", "nonprivate"):
        args = ["run", str(repo / "experiments" / "digits" / f"{name}.yaml"), "--out", str(out),
                "--set", f"tracking.mlflow_uri={uri}", "--set", "execution.backend=local",
                "--set", f"seeds={list(range(24)) if name == 'dp_sgd' else [0]}",
                "--set", f"problem.source={data / 'digits_train.parquet'}",
                "--set", f"problem.test={data / 'digits_test.parquet'}"]
        if name != "nonprivate":
            args += ["--set", "grid.privacy.epsilon=[1.0, 15.0]", "--set", "grid.privacy.accounting=[tight]"]
        assert cli.main(args) == 0
    assert cli.main(["report", str(out)]) == 0
    assert (out / "report" / "accuracy_vs_epsilon.png").stat().st_size > 10_000
    table = pd.read_csv(out / "report" / "accuracy.csv").set_index(["optimizer.name", "privacy.epsilon"])
    accuracy = table["accuracy"]  # the mean over seeds
    chance, five_se = 0.1, 5 * math.sqrt(0.25 / 359)
    assert accuracy["sgd", 15.0] > 0.8  # logistic regression on digits: about 0.9 in one pass
    dp_sgd = table.loc["dp_sgd"]
    assert (dp_sgd["seeds"] == 24).all()
    gap_se = math.sqrt(((dp_sgd["spread"] ** 2) / dp_sgd["seeds"]).sum())
    assert accuracy["dp_sgd", 15.0] > accuracy["dp_sgd", 1.0] + 5 * gap_se
    assert accuracy["dp_sgd", 1.0] > chance + five_se
    assert accuracy["dp_sgd", 15.0] < accuracy["sgd", 15.0] + five_se
    runs = pd.read_parquet(out / "runs.parquet")
    private = runs["privacy.protocol"] != "none"  # exact sums spend ε = ∞ by design
    assert (runs["epsilon"][private] <= runs["privacy.epsilon"][private]).all()
    assert (runs["final_optimum_gap"] < 1e-8).all()
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        logged = {key for (key,) in db.execute("SELECT DISTINCT key FROM metrics")}
    assert {"test_accuracy", "test_loss", "final_test_accuracy", "excess_loss"} <= logged


def test_a_column_named_exactly_is_matched_literally_not_as_a_glob(tmp_path):
    """An .npz block's columns are `X[0]` …: as a glob, `[0]` would be a character class."""
    features, labels = _logistic_data(20)
    table = Table(str(_table(tmp_path / "t.npz", features, labels)))
    assert table.match("X[0],X[3]", exclude=("label",)) == ["X[0]", "X[3]"]
    assert table.match("X*", exclude=("label",)) == [f"X[{i}]" for i in range(D)]


def test_a_compressed_npz_member_is_read_once_per_table_and_refused_above_its_cap(tmp_path, monkeypatch, capsys):
    """zip's deflate has no random access: a compressed member is decompressed whole, so it is
    refused above COMPRESSED_NPZ_MAX with the reason (issue #29 item 5: 2.8 MB holding 2·10⁷ × 3
    took 1.67 GiB a run), and what a Table read dies with it (no process-wide cache)."""
    import gc
    import weakref

    from pipeline.problems import tables

    features, labels = _logistic_data(20_000)
    source = tmp_path / "t.npz"
    np.savez_compressed(source, X=features, label=labels)
    table = Table(str(source))
    read = table.read(["X[0]", "label"], 0, 20_000)
    assert np.array_equal(read, np.vstack([features[:, 0], labels]))
    held = weakref.ref(table._npz_array("X"))
    del table, read
    gc.collect()
    assert held() is None  # the decompressed member went with its table
    monkeypatch.setattr(tables, "COMPRESSED_NPZ_MAX", 100_000)  # X is 20,000 × 3 × 8 = 480,000 bytes
    path = _config(tmp_path, {"source": str(source), "features": "X*"}, n_users=500)
    assert cli.main(["run", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "member X.npy is compressed" in lines[0] and "numpy.savez" in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_an_unreachable_gcs_source_is_one_line_in_seconds(tmp_path, monkeypatch, capsys):
    """gs:// retried for 15 minutes (issue #29 item 6): a source retries for GCS_RETRY_LIMIT_S (here
    1 s, a closed port) and is refused in one line naming problem.source, nothing written."""
    from pipeline import uris

    monkeypatch.setattr(uris, "GCS_RETRY_LIMIT_S", 1)
    source = "gs://bucket/t.parquet?endpoint_override=127.0.0.1:9&scheme=http"
    path = _config(tmp_path, {"source": source}, n_users=100)
    assert cli.main(["run", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"config error: problem.source = '{source}': cannot be"), lines
    assert not (tmp_path / "out").exists()


def test_what_a_table_spent_over_its_runs_is_stated(tmp_path, capsys):
    """Issue 46: six runs of one grid (3 seeds × ε ∈ {1, 4}) read the same users, and no output said
    that together they spend their sum. `run` says it, `report` writes it, and
    results.privacy_by_source gives it: basic composition, Σε and Σδ of the runs' own ledgers."""
    from pipeline import results

    source = _table(tmp_path / "users.parquet", *_logistic_data(800))
    path = _config(tmp_path, {"source": str(source), "loss": "logistic"}, seeds=[0, 1, 2],
                   grid={"privacy.epsilon": [1.0, 4.0]})
    assert cli.main(["run", str(path)]) == 0
    printed = capsys.readouterr().out
    runs, _ = results.load(tmp_path / "out")
    assert len(runs) == 6
    (row,) = results.privacy_by_source(runs).to_dict("records")
    assert row["source"] == str(source) and row["runs"] == 6 and row["unit"] == "user"
    assert row["epsilon"] == pytest.approx(runs["epsilon"].sum()) and 12.0 < row["epsilon"] <= 15.0
    assert row["delta"] == pytest.approx(runs["delta"].sum()) and row["delta"] <= 6e-6
    assert f"the 6 runs in this folder that read {source} spend (ε, δ) = ({row['epsilon']:.4g}," in printed
    assert cli.main(["report", str(tmp_path / "out")]) == 0
    written = pd.read_csv(tmp_path / "out" / "report" / "privacy_by_source.csv")
    assert written["runs"].tolist() == [6] and written["epsilon"].iloc[0] == pytest.approx(row["epsilon"])


def test_a_refused_label_names_its_row_and_rule_never_its_value(tmp_path, capsys):
    """Issue 46: `problem.label = 'label': row 1234 of … is 3.14159: …` quoted a user's value."""
    features, labels = _logistic_data(200)
    labels = labels.astype(float)
    labels[123] = 3.14159
    source = _table(tmp_path / "users.parquet", features, labels)
    path = _config(tmp_path, {"source": str(source), "loss": "logistic"}, n_users=200)
    assert cli.main(["run", str(path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("config error: problem.label = 'label': row 123 of ") and "must be 0 or 1" in line
    assert "3.14" not in line
