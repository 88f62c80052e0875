"""Users who hold several records (issue #26): the laws of records_per_user and of the records a
round uses, a user-level input is the mean of its records, results are bit-identical for any
sharding and on both backends (1 to 1,000 records per user), the unit is stated everywhere, and
bad input is one line before any work."""
from __future__ import annotations

import dataclasses

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline import cli, engine
from pipeline.config import expand
from pipeline.engine.shard import Shard
from pipeline.problems.records import choose_records, parse_records_per_user
from pipeline.planning import plan_run

DIM = 3


def _clients_table(path: Path, counts: list[int], seed: int = 0, shuffled: bool = True,
                   user_values=None) -> Path:
    """A logistic table whose user `client` holds counts[u] records, rows in a random order."""
    rng = np.random.default_rng(seed)
    clients = np.repeat(np.arange(len(counts)), counts) if user_values is None else user_values
    rows = len(clients)
    features = rng.normal(size=(rows, DIM))
    features /= np.maximum(1.0, np.linalg.norm(features, axis=1, keepdims=True))  # inside the declared bound 1
    labels = (rng.random(rows) < 1 / (1 + np.exp(-features @ np.array([1.0, -0.5, 0.25])))).astype(np.int64)
    order = rng.permutation(rows) if shuffled else np.arange(rows)
    columns = {f"x{k}": features[order, k] for k in range(DIM)}
    pq.write_table(pa.table({**columns, "label": labels[order], "client": pa.array(np.asarray(clients)[order])}),
                   path, row_group_size=500)
    return path


def _dataset(source: Path, **options) -> dict:
    return {"name": "dataset", "source": str(source), "dim": DIM, "loss": "logistic", "radius": 1.0,
            "features": "x*", "user_column": "client", **options}


def _config(problem: dict, optimizer: dict, privacy: dict, n: int, **extra) -> dict:
    return {"experiment": "records", "problem": problem, "n_users": n, "optimizer": optimizer,
            "privacy": {"epsilon": 2.0, "delta": 1e-6, **privacy},
            "execution": {"backend": "local", "shards": 1, "block_size": 64}, **extra}


# --------------------------------------------------------------------------- laws


def test_poisson_and_zipf_record_counts_follow_their_laws():
    """1 + Poisson(λ − 1) has mean λ, variance λ − 1; the truncated Zipf has P(m = j) = j^−a / H_{M,a}.
    Each sample frequency within 5 standard errors of its exact value."""
    users = 200_000
    rng = np.random.default_rng(11)
    poisson = parse_records_per_user({"poisson": 20}).draw(rng, users)
    assert poisson.min() >= 1 and abs(poisson.mean() - 20) <= 5 * math.sqrt(19 / users)
    zipf = parse_records_per_user({"zipf": 1.5, "max": 1000})
    drawn = zipf.draw(rng, users)
    assert drawn.min() >= 1 and drawn.max() <= 1000
    harmonic = (np.arange(1, 1001, dtype=float) ** -1.5).sum()
    for j in (1, 2, 10):
        p = j**-1.5 / harmonic
        assert abs((drawn == j).mean() - p) <= 5 * math.sqrt(p * (1 - p) / users), j
    # The declared mean (the memory rule's bytes per user) against the exact sum.
    assert zipf.mean == pytest.approx((np.arange(1, 1001) ** -0.5).sum() / harmonic, rel=1e-12)


def test_a_round_uses_s_distinct_records_of_each_user_uniformly():
    """choose_records: min(s, m) distinct records of each user; a record is used with probability
    min(s, m)/m (5 standard errors over 40,000 users of each size)."""
    sizes, s, repeats = np.array([1, 2, 5, 10]), 2, 40_000
    counts = np.tile(sizes, repeats)
    within, owners = choose_records(np.random.default_rng(3), counts, s)
    assert np.all(np.diff(owners) >= 0)  # grouped by user, in user order
    per_user = np.bincount(owners, minlength=counts.size)
    assert np.array_equal(per_user, np.minimum(counts, s))
    assert np.all(within < counts[owners])
    assert len(set(zip(owners.tolist(), within.tolist()))) == owners.size  # no record twice
    for position, m in enumerate(sizes):
        mine = owners % sizes.size == position
        frequency = np.bincount(within[mine], minlength=m) / repeats
        p = min(s, m) / m
        assert np.all(np.abs(frequency - p) <= 5 * math.sqrt(p * (1 - p) / repeats) + 1e-12), m


def test_rows_group_by_user_in_order_of_first_row_each_in_file_order(tmp_path):
    """String user ids b a b c a b: users b, a, c (first rows 0, 1, 3) holding rows 0 2 5, 1 4, 3."""
    source = tmp_path / "s.parquet"
    pq.write_table(pa.table({"x0": np.arange(6.0) / 10, "x1": np.zeros(6), "x2": np.zeros(6), "label": np.ones(6),
                             "client": ["b", "a", "b", "c", "a", "b"]}), source)
    problem = plan_run(expand(_config(_dataset(source), {"name": "seq_sgd"}, {"protocol": "cjmp_vec"}, 3))[0]).job.problem
    records, counts = problem.read_user_records(3, 0, 3)
    assert counts.tolist() == [3, 2, 1] and np.allclose(records[0] * 10, [0, 2, 5, 1, 4, 3])


# --------------------------------------------------------------------------- what users send


@pytest.mark.parametrize("kind, records", [("l2", 1), ("l2", 3), ("linf", 40), ("l1", 7), ("l1", 1000)])
def test_a_clients_bits_with_the_histogram_trick_lie_within_seed_001s_bounds(kind, records):
    """Thm 4.3.1's histogram trick: per stream, C(s + B − 1, s) histograms of s messages over B = 2^b,
    so (s + B − 1)/s)^s ≤ C ≤ (e(s + B − 1)/s)^s bound its ⌈log2⌉; never more than s·b naive bits."""
    from pipeline.protocols import girgis

    params = girgis.plan_girgis(kind, 500, 6, 1.0, 2.0)
    streams = 1 if kind == "l1" else params.levels * params.messages
    b = girgis.bits_per_user(params) // streams
    bits = girgis.histogram_bits_per_user(params, records) / streams
    ratio = (records + 2**b - 1) / records
    assert bits <= records * b
    assert min(records * b, records * math.log2(ratio)) <= bits <= records * (math.log2(math.e) + math.log2(ratio)) + 1
    assert girgis.histogram_bits_per_user(params, 1) == girgis.bits_per_user(params)  # one record: b bits per stream


def test_a_user_level_input_is_the_mean_of_the_users_records_and_a_record_level_one_each(tmp_path):
    counts = [1, 7, 3, 40, 2] * 20
    source = _clients_table(tmp_path / "c.parquet", counts)
    user = plan_run(expand(_config(_dataset(source), {"name": "seq_sgd", "batch_size": 30},
                                   {"protocol": "cjmp_vec"}, len(counts)))[0]).job
    shard, theta = Shard(user, 0, user.layout.n_blocks), np.array([0.3, -0.2, 0.1])
    table = pq.read_table(source).to_pandas()
    plan = user.schedule.plan(1)
    inputs = shard._inputs(plan, theta, slice(plan.first_user, plan.stop_user), 0)
    assert inputs.shape == (DIM, plan.stop_user - plan.first_user)
    users_in_order = table["client"].drop_duplicates().to_numpy()  # user u: the u-th client to appear
    for column, u in enumerate(range(plan.first_user, plan.stop_user)):
        rows = table[table["client"] == users_in_order[u]]  # in file order
        data = np.vstack([rows[[f"x{k}" for k in range(DIM)]].to_numpy().T,
                          user.problem.loss.code(rows["label"].to_numpy().astype(float))])
        expected = user.problem.gradients(theta, data).mean(axis=1)
        assert np.allclose(inputs[:, column], expected, rtol=1e-12, atol=1e-15), u
    record = plan_run(expand(_config(_dataset(source), {"name": "cldp_sgd", "records_per_round": 3},
                                     {"protocol": "girgis_l2", "unit": "record"}, len(counts)))[0]).job
    plan = record.schedule.plan(0)
    assert plan.per_record and plan.records_per_round == 3
    held = table["client"].value_counts()[users_in_order[:10]].to_numpy()
    inputs = Shard(record, 0, record.layout.n_blocks)._inputs(plan, theta, np.arange(10), 0)
    assert inputs.shape[1] == np.minimum(held, 3).sum()  # one input per record used


def test_every_column_but_the_label_and_the_user_column_is_a_feature_by_default(tmp_path):
    source = _clients_table(tmp_path / "c.parquet", [2, 3] * 10)
    problem = plan_run(expand(_config(_dataset(source, features="*"), {"name": "seq_sgd"},
                                      {"protocol": "cjmp_vec"}, 20))[0]).job.problem
    assert problem.features == ["x0", "x1", "x2"]


# --------------------------------------------------------------------------- bit identity


def _synthetic(records, n=500):
    return {"name": "quadratic", "dim": DIM, "radius": 1.0, "records_per_user": records}


CASES = {
    # (problem, optimizer, privacy, n): user level on each engine path, record level on seed 001's two.
    "seq_sgd_zipf_user": (_synthetic({"zipf": 1.2, "max": 1000}), {"name": "seq_sgd", "batch_size": 37},
                          {"protocol": "cjmp_vec"}, 500),
    "full_gd_fixed_user": (_synthetic(4), {"name": "full_gd", "rounds": 4}, {"protocol": "cjmp_vec"}, 500),
    "mean_estimation_poisson_user": (_synthetic({"poisson": 6}), {"name": "mean_estimation"},
                                     {"protocol": "shuffle_gaussian"}, 500),
    "cldp_sgd_poisson_record": (_synthetic({"poisson": 5}), {"name": "cldp_sgd", "records_per_round": 2},
                                {"protocol": "girgis_l2", "unit": "record"}, 800),
    "dss_sgd_fixed_record": (_synthetic(3), {"name": "dss_sgd"}, {"protocol": "girgis_l2", "unit": "record"}, 800),
}


def _trace(job, backend, shards):
    state, records = engine.execute(job, backend, shards)
    return np.array([r.excess_loss for r in records]), job.optimizer.output(state)


def _assert_identical(job):
    reference = _trace(job, "local", 1)
    assert np.all(np.isfinite(reference[0]))
    for backend, shards in (("local", 3), ("ray", 3)):
        losses, theta = _trace(job, backend, shards)
        assert np.array_equal(losses, reference[0]) and np.array_equal(theta, reference[1]), (backend, shards)


@pytest.mark.parametrize("name", sorted(CASES))
def test_synthetic_users_with_several_records_are_bit_identical_on_any_sharding(ray_session, name):
    problem, optimizer, privacy, n = CASES[name]
    _assert_identical(plan_run(expand(_config(problem, optimizer, privacy, n))[0]).job)


@pytest.mark.parametrize("unit", ["user", "record"])
def test_a_table_of_users_with_1_to_1000_records_is_bit_identical_on_any_sharding(tmp_path, ray_session, unit):
    counts = np.random.default_rng(5).integers(1, 60, 300)
    counts[[0, 150, 299]] = [1000, 1, 1000]  # a user at each end of the range, at the first and last blocks
    source = _clients_table(tmp_path / "c.parquet", counts.tolist())
    optimizer = {"name": "cldp_sgd", **({"records_per_round": 2} if unit == "record" else {})}
    job = plan_run(expand(_config(_dataset(source), optimizer, {"protocol": "girgis_l2", "unit": unit},
                                  counts.size))[0]).job
    shards = [Shard(job, *bounds) for bounds in ((0, 2), (2, job.layout.n_blocks))]
    assert sum(shard.data.shape[1] for shard in shards) == counts.sum()  # every record, in one shard only
    _assert_identical(job)


# --------------------------------------------------------------------------- the public command


def _write(folder: Path, tree: dict) -> Path:
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def test_the_unit_is_stated_in_the_ledger_runs_parquet_and_mlflow(tmp_path, new_mlflow_store):
    source = _clients_table(tmp_path / "c.parquet", [4, 6, 9] * 100)
    tree = _config(_dataset(source, min_records=4), {"name": "cldp_sgd", "records_per_round": 2},
                   {"protocol": "girgis_l2"}, 300, grid={"privacy.unit": ["record", "user"]},
                   tracking={"mlflow_uri": new_mlflow_store(tmp_path / "mlflow.db"), "out": str(tmp_path / "out")})
    # records_per_round applies at record level only: the user-level point runs without it.
    tree["optimizer"].pop("records_per_round")
    assert cli.main(["run", str(_write(tmp_path, tree))]) == 0
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert sorted(runs["privacy.unit"]) == ["record", "user"] and set(runs["status"]) == {"finished"}
    for row in runs.to_dict("records"):
        ledger = json.loads((tmp_path / "out" / "artifacts" / row["run_id"] / "ledger.json").read_text())
        assert ledger["unit"]["name"] == row["privacy.unit"] and 0 < row["epsilon"] <= 2.0
    from mlflow.tracking import MlflowClient  # not mlflow.set_tracking_uri: it would outlive this test

    client = MlflowClient(tree["tracking"]["mlflow_uri"])
    experiment = client.get_experiment_by_name("records")
    found = client.search_runs([experiment.experiment_id])
    assert sorted(run.data.params["privacy.unit"] for run in found) == ["record", "user"]


def test_results_recorded_before_the_unit_existed_load_at_its_default(tmp_path, new_mlflow_store):
    """A runs part written before privacy.unit and records_per_user were columns (simulated by
    dropping them) loads with their defaults: such a run had one record per user."""
    from pipeline import results

    tree = _config(_synthetic(1), {"name": "seq_sgd"}, {"protocol": "cjmp_vec"}, 300,
                   tracking={"mlflow_uri": new_mlflow_store(tmp_path / "mlflow.db"), "out": str(tmp_path / "out")})
    assert cli.main(["run", str(_write(tmp_path, tree))]) == 0
    (part,) = (tmp_path / "out" / "runs.parquet").glob("*.parquet")
    pq.write_table(pq.read_table(part).drop_columns(["privacy.unit", "problem.records_per_user"]), part)
    runs, _ = results.load(tmp_path / "out")
    assert runs[["privacy.unit", "problem.records_per_user"]].values.tolist() == [["user", "1"]]


BAD = {
    # (problem options, optimizer, privacy) → the field the one line names
    "missing column": ({"user_column": "writer"}, {"name": "seq_sgd"}, {}, "problem.user_column"),
    "nulls": ({"user_column": "holes"}, {"name": "seq_sgd"}, {}, "problem.user_column"),
    "floats": ({"user_column": "score"}, {"name": "seq_sgd"}, {}, "problem.user_column"),
    "min_records above the fewest": ({"min_records": 3}, {"name": "seq_sgd"}, {}, "problem.min_records"),
    "record level without an accountant": ({}, {"name": "seq_sgd"}, {"unit": "record"}, "privacy.unit"),
    "record level on a one-message protocol": ({}, {"name": "cldp_sgd"}, {"unit": "record",
                                                                          "protocol": "shuffle_gaussian"},
                                               "privacy.unit"),
    "s at user level": ({}, {"name": "cldp_sgd", "records_per_round": 2}, {"unit": "user", "protocol": "girgis_l2"},
                        "optimizer.records_per_round"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_naming_the_field_before_any_work(tmp_path, capsys, case):
    options, optimizer, privacy, field = BAD[case]
    source = _clients_table(tmp_path / "c.parquet", [1, 2, 3] * 30)
    table = pq.read_table(source)
    holes = pa.array([None if i % 7 == 0 else i for i in range(table.num_rows)], pa.int64())
    scores = pa.array(np.linspace(0, 1, table.num_rows))
    pq.write_table(table.append_column("holes", holes).append_column("score", scores), source)
    problem = {**_dataset(source), **options}
    tree = _config(problem, optimizer, privacy, 90,
                   tracking={"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "out": str(tmp_path / "out")})
    assert cli.main(["run", str(_write(tmp_path, tree))]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"config error: {field} = "), lines
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("value", [0, -1, 1.5, {"poisson": 0.5}, {"zipf": 1.5}, "many"])
def test_records_per_user_outside_its_rule_is_one_line(tmp_path, capsys, value):
    tree = _config(_synthetic(value), {"name": "seq_sgd"}, {"protocol": "cjmp_vec"}, 100,
                   tracking={"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "out": str(tmp_path / "out")})
    assert cli.main(["run", str(_write(tmp_path, tree))]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error: problem.records_per_user = "), lines
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- the audit


def _one_user_changes(tmp_path: Path, m: int, users: int) -> tuple[Path, Path]:
    """Two tables of `users` users with m records (e₁, y) each, all y = +1, and the same with
    user 0's every record at y = −1: neighbours at user level (one user's whole dataset)."""
    paths = []
    for name, flipped in (("same", 0), ("changed", m)):
        labels = np.ones(users * m)
        labels[:flipped] = -1.0
        paths.append(tmp_path / f"{name}.parquet")
        pq.write_table(pa.table({"x0": np.ones(users * m), "x1": np.zeros(users * m), "x2": np.zeros(users * m),
                                 "label": labels, "client": np.repeat(np.arange(users), m)}), paths[-1])
    return tuple(paths)


def test_the_audit_of_one_user_changing_all_its_records_stays_below_the_user_level_ledger(tmp_path):
    """At θ = 0 a least-squares record (e₁, y) sends −y·e₁: the engine's first seq_sgd round on the
    two neighbours moves user 0's input from −e₁ to +e₁ (the mean of its m = 5 records). The
    distinguishing attack on the run's P_vec call stays at or below the ledger's ε (95%). The same
    attack on what a user-level bug would send (each record its own message: 5 moved inputs) goes
    above it: the audit can see the bug this test guards against."""
    from pipeline.audit import AuditedCall, attack

    m, users, epsilon = 5, 64, 4.0
    inputs, planned = [], None
    for source in _one_user_changes(tmp_path, m, users):
        problem = {**_dataset(source), "loss": "least_squares", "features": "x*"}
        # Tight noise and few users per round: where the attack gets near the ledger (tests/test_audit.py).
        planned = plan_run(expand(_config(problem, {"name": "seq_sgd", "batch_size": 16},
                                          {"protocol": "cjmp_vec", "accounting": "tight", "epsilon": epsilon,
                                           "delta": 0.01}, users))[0])
        job, plan = planned.job, planned.job.schedule.plan(0)
        shard = Shard(job, 0, job.layout.n_blocks)
        inputs.append(shard._inputs(plan, np.zeros(DIM), slice(plan.first_user, plan.stop_user), 0))
    assert np.array_equal(inputs[0][:, 0], [-1.0, 0, 0]) and np.array_equal(inputs[1][:, 0], [1.0, 0, 0])
    assert np.array_equal(inputs[0][:, 1:], inputs[1][:, 1:])
    protocol, plan = planned.job.protocol, planned.job.schedule.plan(0)
    params = protocol.plan(plan, DIM)
    spent, delta = planned.ledger.total()
    assert spent <= epsilon

    def attacked(pair, users):  # the run's own P_vec object on the given pair
        call = AuditedCall(protocol, plan, DIM, dataclasses.replace(params, users=users), 4096, False, pair)
        return attack(call, delta, trials=20_000)["epsilon_lower_bound"]

    honest = attacked(tuple(inputs), 16)
    assert honest <= spent, (honest, spent)
    per_record = [np.concatenate([x, np.repeat(x[:, :1], m - 1, axis=1)], axis=1) for x in inputs]
    bug = attacked(tuple(per_record), 16 + m - 1)
    assert bug > spent, (honest, bug, spent)


def test_the_lower_bound_audit_refuses_several_records_per_user(tmp_path, capsys):
    """The hard instances certify bounds for one record per user: a config with several is refused."""
    tree = _config(_synthetic(3), {"name": "seq_sgd"}, {"protocol": "cjmp_vec"}, 500)
    assert cli.main(["audit", str(_write(tmp_path, tree)), "--lower-bound", "--seeds", "3"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error: problem.records_per_user = '3': must be 1"), lines
