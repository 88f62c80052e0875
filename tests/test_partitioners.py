"""experiments/make_datasets.py's client partitions: the pure partition functions (sizes, label
mixes against their laws, failures) and the `sklearn --partition` command line (the client column,
the sort, the file names, the metadata, one-line refusals before anything is written)."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "make_datasets.py"


def _load():
    spec = importlib.util.spec_from_file_location("make_datasets_partitions", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


md = _load()

K, PER_CLASS = 10, 1000
BALANCED = np.repeat(np.arange(K), PER_CLASS)  # 10 classes × 1000 rows


def _histograms(ids: np.ndarray, labels: np.ndarray, clients: int) -> np.ndarray:
    """(clients, classes) counts of each class at each client."""
    _, codes = np.unique(labels, return_inverse=True)
    counts = np.zeros((clients, codes.max() + 1), dtype=np.int64)
    np.add.at(counts, (ids, codes), 1)
    return counts


def _metadata(path: Path) -> dict:
    return json.loads(pq.read_schema(path).metadata[md.METADATA_KEY])


# --------------------------------------------------------------------------- pure functions


def test_client_sizes_counts_every_client_even_the_empty_last_ones():
    assert md.client_sizes(np.array([0, 2, 2, 0, 0]), 5).tolist() == [3, 0, 2, 0, 0]


@pytest.mark.parametrize("rows, clients", [(1000, 7), (10, 10), (5, 1), (1001, 100)])
def test_iid_sizes_differ_by_at_most_one_and_sum_to_the_rows(rows, clients):
    ids = md.partition_iid(rows, clients, np.random.default_rng(3))
    assert ids.dtype == np.int64 and ids.shape == (rows,)
    sizes = md.client_sizes(ids, clients)
    assert sizes.sum() == rows and sizes.min() >= 1
    assert sizes.max() - sizes.min() <= 1


def test_iid_is_a_function_of_the_generator_and_refuses_more_clients_than_rows():
    first = md.partition_iid(500, 9, np.random.default_rng(11))
    assert np.array_equal(first, md.partition_iid(500, 9, np.random.default_rng(11)))
    assert not np.array_equal(first, md.partition_iid(500, 9, np.random.default_rng(12)))
    for clients in (0, 501):
        with pytest.raises(ValueError, match=f"{clients} clients for 500 rows"):
            md.partition_iid(500, clients, np.random.default_rng(0))


@pytest.mark.parametrize("alpha, min_records", [(0.1, 1), (0.5, 30), (1e4, 1)])
def test_dirichlet_gives_every_client_at_least_min_records(alpha, min_records):
    ids = md.partition_dirichlet(BALANCED, 40, alpha, np.random.default_rng(5), min_records=min_records)
    assert ids.dtype == np.int64 and ids.shape == BALANCED.shape
    sizes = md.client_sizes(ids, 40)
    assert sizes.sum() == len(BALANCED) and sizes.min() >= min_records


def test_dirichlet_with_a_large_alpha_gives_every_client_the_global_label_mix():
    """α = 10⁴, C = 20 clients, K = 10 classes of n_k = 1000 rows. Client c's share of class k
    is p ~ Beta(α, (C−1)α) (a Dirichlet marginal): mean 1/C, sd σ = √((1/C)(1−1/C)/(Cα+1))
    = 4.87e-4. Its count n_kc is n_k·p up to the floors of the cuts, |n_kc − n_k p| < 1, so
    outside an event of probability < C·K·P(|N(0,1)| > 6) ≈ 4e-7, |n_kc − n_k/C| ≤ d =
    6 n_k σ + 1 = 3.92 for every (k, c). Then the client's size m_c ≥ n/C − K d and its
    total variation from the global mix (uniform) is
    ½ Σ_k |n_kc/m_c − 1/K| ≤ ½ Σ_k (|n_kc − n_k/C| + |n_k/C − m_c/K|)/m_c ≤ K d/(n/C − K d)
    = 0.085. At α = 1 (σ = 0.05 of a share of 0.05) the same statistic is about 0.35."""
    clients, alpha = 20, 1e4
    ids = md.partition_dirichlet(BALANCED, clients, alpha, np.random.default_rng(7))
    counts = _histograms(ids, BALANCED, clients)
    sigma = math.sqrt((1 / clients) * (1 - 1 / clients) / (clients * alpha + 1))
    d = 6 * PER_CLASS * sigma + 1
    bound = K * d / (len(BALANCED) / clients - K * d)
    assert 0.08 < bound < 0.09
    shares = counts / counts.sum(axis=1, keepdims=True)
    tv = 0.5 * np.abs(shares - 1 / K).sum(axis=1)
    assert tv.max() <= bound, tv.max()
    # The same check at α = 1 fails: the bound separates the two regimes.
    loose = md.partition_dirichlet(BALANCED, clients, 1.0, np.random.default_rng(7))
    loose_counts = _histograms(loose, BALANCED, clients)
    assert (0.5 * np.abs(loose_counts / loose_counts.sum(axis=1, keepdims=True) - 1 / K).sum(axis=1)).mean() > 0.2


def test_dirichlet_with_a_small_alpha_gives_each_client_mostly_one_class():
    """α = 0.05, C = 100 clients, K = 10 classes of 1000 rows. Client c's weight for class k is
    p_k ~ Beta(α, (C−1)α), independent over k (one Dirichlet draw per class), and its largest
    class share is max_k p_k / Σ_k p_k (floors of the cuts aside: < 1 row per count). That
    law's mean, about 0.78 (uniform mixes would give 0.1), and sd s, about 0.19, are computed
    here from 10⁵ simulated clients (standard error 0.0006). The mean over the clients that
    hold rows (min_records 0, so the draw is not conditioned) is within 5 s/√(clients) of it
    (the clients' shares are nearly independent: one Dirichlet's components are only weakly,
    negatively, correlated); the floors and the empty clients move it by about 0.01 (seen over
    30 seeds), under half a standard error."""
    clients, alpha = 100, 0.05
    weights = np.random.default_rng(2024).beta(alpha, (clients - 1) * alpha, size=(100_000, K))
    law = weights.max(axis=1) / weights.sum(axis=1)
    mean, sd = law.mean(), law.std()
    assert 0.74 < mean < 0.82  # the "most clients hold mostly one class" regime
    ids = md.partition_dirichlet(BALANCED, clients, alpha, np.random.default_rng(9), min_records=0)
    counts = _histograms(ids, BALANCED, clients)
    held = counts[counts.sum(axis=1) > 0]
    top = (held.max(axis=1) / held.sum(axis=1)).mean()
    assert abs(top - mean) <= 5 * sd / math.sqrt(len(held)) + 3 * sd / math.sqrt(len(law)), (top, mean)


def test_dirichlet_refuses_a_min_records_no_draw_meets_naming_the_numbers():
    with pytest.raises(ValueError, match=r"40 clients × 251 min_records > 10000 rows"):
        md.partition_dirichlet(BALANCED, 40, 0.5, np.random.default_rng(0), min_records=251)
    # Possible in principle (40 × 200 ≤ 10000) but not at α = 0.05: every try fails.
    with pytest.raises(ValueError, match=r"none of 5 Dirichlet\(α = 0.05\) draws gave each of the 40 clients "
                                         r"≥ 200 of the 10000 rows"):
        md.partition_dirichlet(BALANCED, 40, 0.05, np.random.default_rng(0), min_records=200, max_tries=5)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="alpha"):
            md.partition_dirichlet(BALANCED, 4, bad, np.random.default_rng(0))


def test_dirichlet_is_a_function_of_the_generator():
    draw = lambda seed: md.partition_dirichlet(BALANCED, 30, 0.3, np.random.default_rng(seed))  # noqa: E731
    assert np.array_equal(draw(4), draw(4)) and not np.array_equal(draw(4), draw(5))


UNEVEN = np.repeat(np.arange(K) * 3 + 1, 40 + 7 * np.arange(K))  # labels 1, 4, …, 28; 40 … 103 rows


@pytest.mark.parametrize("clients, per_client", [(30, 3), (7, 2), (4, 3), (200, 1), (10, 10)])
def test_pathological_clients_hold_their_classes_each_split_evenly(clients, per_client):
    ids = md.partition_pathological(UNEVEN, clients, per_client, np.random.default_rng(13))
    assert ids.dtype == np.int64 and ids.shape == UNEVEN.shape  # one client per row
    assert ids.min() >= 0 and ids.max() < clients
    counts = _histograms(ids, UNEVEN, clients)
    assert counts.sum() == len(UNEVEN) and (counts.sum(axis=1) >= 1).all()
    # Every class has ≥ as many rows (40) as clients holding it here, so each holds exactly K classes.
    assert ((counts > 0).sum(axis=1) == per_client).all()
    for k in range(K):
        shares = counts[:, k][counts[:, k] > 0]
        assert len(shares) >= 1 and shares.max() - shares.min() <= 1


def test_pathological_refusals():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"3 clients × 3 classes_per_client < 10 classes"):
        md.partition_pathological(UNEVEN, 3, 3, rng)
    with pytest.raises(ValueError, match=r"classes_per_client = 11: need 1 … 10"):
        md.partition_pathological(UNEVEN, 30, 11, rng)
    with pytest.raises(ValueError, match=r"classes_per_client = 0"):
        md.partition_pathological(UNEVEN, 30, 0, rng)
    # Two classes of one row each, five clients holding one class: three clients get no row.
    with pytest.raises(ValueError, match=r"3 of the 5 clients hold no row"):
        md.partition_pathological(np.array([0, 1]), 5, 1, rng)


# --------------------------------------------------------------------------- command line


def test_sklearn_dirichlet_writes_a_sorted_client_column_and_records_the_partition(tmp_path):
    plain, parted = tmp_path / "plain", tmp_path / "parted"
    assert md.main(["sklearn", "--out", str(plain)]) == 0
    assert md.main(["sklearn", "--partition", "dirichlet", "--alpha", "0.5", "--clients", "20",
                    "--out", str(parted)]) == 0
    assert sorted(p.name for p in parted.iterdir()) == [
        "breast_cancer_dirichlet0.5_c20_train.parquet", "breast_cancer_test.parquet",
        "digits_dirichlet0.5_c20_train.parquet", "digits_test.parquet"]
    for name in ("digits", "breast_cancer"):
        # The held-out file is the unpartitioned run's, byte for byte.
        assert (parted / f"{name}_test.parquet").read_bytes() == (plain / f"{name}_test.parquet").read_bytes()
        path = parted / f"{name}_dirichlet0.5_c20_train.parquet"
        table = pq.read_table(path)
        assert table.schema.field("client").type == "int64" and table.column_names[-2:] == ["label", "client"]
        client = table.column("client").to_numpy()
        assert np.all(np.diff(client) >= 0) and len(np.unique(client)) == 20
        # The rows are the unpartitioned training file's, stably sorted by the partition of its labels.
        before = pq.read_table(plain / f"{name}_train.parquet")
        options = {"scheme": "dirichlet", "clients": 20, "alpha": 0.5, "min_records": 1}
        ids = md.partition_clients(before.column("label").to_numpy(), options, seed=0)
        order = np.argsort(ids, kind="stable")
        assert np.array_equal(client, ids[order])
        assert table.drop_columns(["client"]).select(before.column_names).to_pydict() == \
            before.take(order).to_pydict()
        meta = _metadata(path)
        sizes = np.bincount(client)
        assert meta["partition"] == {
            "scheme": "dirichlet", "clients": 20, "alpha": 0.5, "min_records": 1, "seed": 0, "user_column": "client",
            "generator": "numpy.random.default_rng([seed, 1885434484, clients])",
            "min_client_rows": int(sizes.min()), "max_client_rows": int(sizes.max())}
        assert meta["rows"] == len(client) and meta["split"] == "train"
        assert meta["row_order"] == "permuted, then stably sorted by client"


def test_sklearn_without_a_partition_writes_no_client_column_and_no_partition(tmp_path):
    assert md.main(["sklearn", "--out", str(tmp_path), "--datasets", "digits"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits_test.parquet", "digits_train.parquet"]
    for split in ("train", "test"):
        path = tmp_path / f"digits_{split}.parquet"
        assert "client" not in pq.read_schema(path).names
        assert set(_metadata(path)) == {"source", "preprocessing", "feature_range", "dataset", "split", "seed",
                                        "test_fraction", "source_rows", "rows", "row_order"}
        assert _metadata(path)["row_order"] == "permuted"


@pytest.mark.parametrize("scheme, extra, label", [
    ("iid", [], "iid_c50"),
    ("pathological", ["--classes-per-client", "2"], "pathological2_c50"),
    ("dirichlet", ["--alpha", "1e4", "--min-records", "5"], "dirichlet10000_c50"),
])
def test_sklearn_each_scheme_names_its_file_and_meets_min_records(tmp_path, scheme, extra, label):
    assert md.main(["sklearn", "--partition", scheme, "--clients", "50", *extra, "--out", str(tmp_path),
                    "--datasets", "digits", "--seed", "3"]) == 0
    path = tmp_path / f"digits_{label}_train.parquet"
    sizes = np.bincount(pq.read_table(path, columns=["client"]).column("client").to_numpy(), minlength=50)
    partition = _metadata(path)["partition"]
    assert partition["scheme"] == scheme and partition["seed"] == 3
    assert partition["min_client_rows"] == sizes.min() >= partition["min_records"] >= 1
    assert ("classes_per_client" in partition) == (scheme == "pathological")
    assert ("alpha" in partition) == (scheme == "dirichlet")


@pytest.mark.parametrize("argv, field", [
    (["--partition", "dirichlet", "--clients", "20"], "alpha="),
    (["--partition", "dirichlet", "--alpha", "0", "--clients", "20"], "alpha=0:"),
    (["--partition", "dirichlet", "--alpha", "nan", "--clients", "20"], "alpha=nan:"),
    (["--partition", "iid", "--alpha", "0.5", "--clients", "20"], "alpha=0.5:"),
    (["--alpha", "0.5"], "alpha=0.5:"),
    (["--partition", "iid"], "clients="),
    (["--partition", "iid", "--clients", "0"], "clients=0:"),
    (["--partition", "shards", "--clients", "5"], "partition=shards:"),
    (["--partition", "iid", "--clients", "2000", "--datasets", "digits"], "clients=2000:"),
    (["--partition", "iid", "--clients", "100", "--min-records", "15", "--datasets", "digits"], "min-records=15:"),
    (["--partition", "pathological", "--clients", "20", "--datasets", "digits", "--classes-per-client", "11"],
     "classes-per-client=11:"),
    (["--partition", "pathological", "--clients", "20"], "classes-per-client=3:"),  # breast_cancer: 2 classes
    (["--partition", "pathological", "--clients", "3", "--datasets", "digits"], "classes-per-client=3:"),
    (["--partition", "iid", "--clients", "5", "--classes-per-client", "2"], "classes-per-client=2:"),
    (["--partition", "dirichlet", "--alpha", "0.01", "--clients", "200", "--min-records", "5",
      "--datasets", "digits"], "min-records=5:"),
])
def test_bad_partition_input_is_one_line_naming_the_field_and_writes_nothing(tmp_path, capsys, argv, field):
    out = tmp_path / "out"
    assert md.main(["sklearn", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"make_datasets: {field}") and err.count("\n") == 1, err
    assert not out.exists() or not any(out.iterdir())
