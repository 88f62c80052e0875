"""A problem whose users are the rows of a table: a linear model's loss on each
user's record, read in place by the shard that holds the user (shared/DESIGN.md
§2, "Data sets").

What the driver does: it opens the table's metadata and, once per table and
process, scans it in batches to refuse bad input before any run (missing or
non-numeric columns, NaN or infinite values, labels outside the loss's domain,
too few rows) and to fingerprint its bytes. It never keeps a row. Shards read
their own rows (`read_users`), and the metrics that need every row (empirical
risk, held-out loss and accuracy, the empirical optimum) are sums that the
shards compute per block (`metric_sums`, `objective_sums`).

Preprocessing is data-independent only: a declared constant factor
(`problem.scale`), then each row clipped to ‖x‖₂ ≤ B (`problem.rows: clip`) or
scaled to ‖x‖₂ = B (`normalize`; a zero row stays zero), B = problem.feature_bound.
Nothing is fitted to the data (no standardisation by the data's mean or spread,
which would leak about every user into every other's record).
"""
from __future__ import annotations

import hashlib
import json
import math
from typing import ClassVar

import numpy as np

from pipeline.errors import ConfigError
from pipeline.options import Option, choice, integer, real, text
from pipeline.problems.base import Problem, ball_projection
from pipeline.problems.losses import LOSSES, Loss
from pipeline.problems.records import group_rows
from pipeline.problems.tables import Table, TableError

ROW_MODES = ("clip", "normalize")
PREPARE_ROWS = 8192  # rows preprocessed at once: (d + 1) × 8192 floats stay in cache

# (source, size, mtime, columns, label checks) → (rows, fingerprint): each table is scanned once per process.
_SCANNED: dict[tuple, tuple[int, str]] = {}
# (source, size, mtime, user column) → (rows user by user, records per user): grouped once per process.
_GROUPED: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


class Dataset(Problem):
    """ℓ(θ, (x, y)) = φ(⟨θ, x⟩, y) + (μ/2)‖θ‖² on Θ = {‖θ‖₂ ≤ R}, each user one row (x, y)
    of `problem.source` (pipeline.problems.losses gives φ and its constants).

    Users: the table's rows in file order (write the file shuffled when its order
    means something: experiments/make_datasets.py does); or, with `user_column`, each
    distinct value of that column is one user holding its rows (users in order of their
    first row), and `min_records` is the number of records every user is declared to hold
    (checked when planned; the record-level accountant's m). With `test_fraction` f, a
    uniform subset of round(f·N) rows, drawn from `split_seed`, is held out; when
    n_users is below the rows left, the users are a uniform subset of them drawn
    from (split_seed, n_users). Both draws are the dataset's, not the run's: every
    seed of a grid runs on the same users, and only the protocol's randomness varies.

    The loss measured (`excess_loss`) is the excess empirical risk
    F(θ) − F(θ̂) of F(θ) = (1/n)Σᵢ ℓ(θ, xᵢ) (with several records per user, ℓ of a user is
    the mean over its records: every user weighs 1/n), θ̂ computed once per dataset by
    `pipeline.engine.evaluation` with scipy, to a Frank–Wolfe gap that is reported.

    Constants: B = feature_bound after preprocessing, scores |s| ≤ R·B, then
    L = sup|φ'|·B + μR, β = sup φ''·B² + μ, λ = μ, D = 2R (pipeline.problems.losses).

    Args:
      dim: d, the number of feature columns (the model has classes × d entries for multinomial).
      radius: R.
      The rest: the options below (config fields problem.<name>).
    """

    name: ClassVar[str] = "dataset"
    reads_rows: ClassVar[bool] = True
    exact_loss: ClassVar[bool] = False
    options: ClassVar[tuple[Option, ...]] = (
        Option("source", text, "the table of users' records: a .parquet, .csv or .npz path or URI (s3://, gs://, hdfs://)"),
        Option("loss", choice(tuple(LOSSES)), "the per-record loss of the linear model", "logistic"),
        Option("label", text, "the label's column", "label"),
        Option("features", text, "the feature columns: names or glob patterns, comma-separated", "*"),
        Option("test", text, "a held-out table with the same columns (test loss and accuracy)"),
        Option("test_fraction", real(0.0, 1.0, False, True), "the fraction of the source's rows held out "
               "(a uniform subset drawn from split_seed)", 0.0),
        Option("classes", integer(2), "K, the number of classes (loss multinomial)"),
        Option("feature_bound", real(0.0, math.inf, True, True), "B: each row's features are clipped to ‖x‖₂ ≤ B", 1.0),
        Option("scale", real(0.0, math.inf, True, True), "a declared constant every feature is multiplied by first", 1.0),
        Option("rows", choice(ROW_MODES), "clip each row to norm B, or normalize it to norm B", "clip"),
        Option("label_bound", real(0.0, math.inf, True, True), "Y: regression labels must lie in [−Y, Y]", 1.0),
        Option("huber_delta", real(0.0, math.inf, True, True), "δ of the huber loss", 1.0),
        Option("l2", real(0.0, math.inf, False, True), "μ: a ridge term (μ/2)‖θ‖², making the loss μ-strongly convex", 0.0),
        Option("split_seed", integer(0), "seeds the held-out split and the users' sample", 0),
        Option("evaluations", integer(1), "how many rounds' metrics are measured (log-spaced, the last always)", 64),
        Option("user_column", text, "the column naming each record's user (integers or strings): each distinct "
               "value is one user holding its rows; absent: each row is one user"),
        Option("min_records", integer(1), "m: every user is declared to hold at least m records (checked when "
               "planned; record-level accounting samples 1 of m)", 1),
    )

    def __init__(self, dim: int, radius: float, source: str | None = None, loss: str = "logistic",
                 label: str = "label", features: str = "*", test: str | None = None, test_fraction: float = 0.0,
                 classes: int | None = None, feature_bound: float = 1.0, scale: float = 1.0, rows: str = "clip",
                 label_bound: float = 1.0, huber_delta: float = 1.0, l2: float = 0.0, split_seed: int = 0,
                 evaluations: int = 64, user_column: str | None = None, min_records: int = 1):
        if source is None:
            raise ConfigError("problem.source", None, "is required for problem dataset: a table of the users' records")
        if loss == "multinomial" and classes is None:
            raise ConfigError("problem.classes", None, "is required for loss multinomial: the number of classes K")
        if loss != "multinomial" and classes is not None:
            raise ConfigError("problem.classes", classes, f"applies to loss multinomial only, not {loss}")
        if test is not None and test_fraction > 0:
            raise ConfigError("problem.test_fraction", test_fraction,
                              "give either problem.test (a held-out table) or problem.test_fraction, not both")
        if user_column is not None and test_fraction > 0:
            raise ConfigError("problem.test_fraction", test_fraction, "holds out rows, and problem.user_column groups "
                              "rows into users: give held-out records as problem.test instead")
        if user_column is None and min_records != 1:
            raise ConfigError("problem.min_records", min_records, "applies with problem.user_column only "
                              "(without it each row is one user)")
        self.user_column, self.min_records = user_column, min_records
        self.source, self.test, self.label, self.features_pattern = source, test, label, features
        self.test_fraction, self.split_seed, self.evaluations = test_fraction, split_seed, evaluations
        self.radius, self.feature_bound, self.scale, self.rows = radius, feature_bound, scale, rows
        self.l2 = l2
        self.loss: Loss = LOSSES[loss](classes or 1, label_bound, huber_delta)
        self.features = self._columns("problem.source", source, features)
        if len(self.features) != dim:
            raise ConfigError("problem.dim", dim, f"must equal the number of feature columns that problem.features "
                                                  f"({features!r}) matches in {source}: {len(self.features)}")
        self.source_rows, self.fingerprint = self._scan("problem.source", source)
        self.test_rows = self._scan("problem.test", test)[0] if test is not None else round(test_fraction * self.source_rows)
        self.dim = dim * self.loss.outputs
        if user_column is not None:
            self._check_users()

    # --- preflight: what makes bad input one line before any run ------------------------

    def _table(self, field: str, source: str) -> Table:
        try:
            return Table(source)
        except TableError as error:
            raise ConfigError(field, source, str(error)) from None

    def _columns(self, field: str, source: str, pattern: str) -> list[str]:
        """The feature columns, after checking them and the label against the table."""
        table = self._table(field, source)
        try:
            columns = table.columns
        except TableError as error:
            raise ConfigError(field, source, str(error)) from None
        if self.label not in columns:
            raise ConfigError("problem.label", self.label, f"must be a column of {source}; it has {', '.join(list(columns)[:12])}"
                                                           + (" …" if len(columns) > 12 else ""))
        matched = table.match(pattern, exclude=self.label)
        if not matched:
            raise ConfigError("problem.features", pattern, f"must match at least one column of {source} besides the label")
        for name in (*matched, self.label):
            if not columns[name]:
                raise ConfigError("problem.features" if name != self.label else "problem.label", name,
                                  f"must name a numeric column; {name!r} of {source} is not")
        return matched

    def _scan(self, field: str, source: str) -> tuple[int, str]:
        """Checks every value of a table (finite, labels in the loss's domain) in batches,
        and fingerprints its bytes; once per table and process.

        Returns:
          (rows, SHA-256 of the table's bytes).

        Raises:
          ConfigError: the first rule a value breaks, naming the field.
        """
        table = self._table(field, source)
        if field == "problem.test":  # the held-out table must have the training table's columns, by name
            try:
                columns = table.columns
            except TableError as error:
                raise ConfigError(field, source, str(error)) from None
            missing = [name for name in (*self.features, self.label) if not columns.get(name)]
            if missing:
                raise ConfigError(field, source, f"must have every feature and label column of problem.source, "
                                                 f"numeric; it lacks {', '.join(missing[:5])}"
                                                 + (" …" if len(missing) > 5 else ""))
        key = (source, table.size, table.mtime, tuple(self.features), self.label, self.loss.name,
               self.loss.classes, self.loss.label_bound)
        if key in _SCANNED:
            return _SCANNED[key]
        rows = 0
        try:
            for batch in table.scan([*self.features, self.label]):
                finite = np.isfinite(batch)
                if not finite.all():
                    column, row = np.argwhere(~finite)[0]
                    name = [*self.features, self.label][column]
                    raise ConfigError(field, source, f"column {name!r} row {rows + row} is {batch[column, row]}: "
                                                     "every value must be a finite number")
                bad = self.loss.bad_labels(batch[-1])
                if bad.any():
                    row = int(np.argmax(bad))
                    raise ConfigError("problem.label", self.label, f"row {rows + row} of {source} is "
                                                                   f"{batch[-1, row]:g}: labels of loss {self.loss.name} "
                                                                   f"{self.loss.label_rule()}")
                rows += batch.shape[1]
        except TableError as error:
            raise ConfigError(field, source, str(error)) from None
        _SCANNED[key] = rows, table.fingerprint()
        return _SCANNED[key]

    def _users(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows user by user, records per user) of a table with a user column; once per process.

        Raises:
          TableError: the column is missing, has missing values or is neither integers nor strings.
        """
        table = Table(self.source)
        key = (self.source, table.size, table.mtime, self.user_column)
        if key not in _GROUPED:
            _GROUPED[key] = group_rows(table.keys(self.user_column))
        return _GROUPED[key]

    def _check_users(self) -> None:
        """Refuses a user column that cannot group the rows, or users below the declared minimum.

        Raises:
          ConfigError: naming problem.user_column or problem.min_records.
        """
        if self.user_column == self.label or self.user_column in self.features:
            raise ConfigError("problem.user_column", self.user_column, "must not be the label or a feature column "
                              "(set problem.features to exclude it)")
        try:
            _, counts = self._users()
        except TableError as error:
            raise ConfigError("problem.user_column", self.user_column, str(error)) from None
        if counts.min() < self.min_records:
            raise ConfigError("problem.min_records", self.min_records,
                              f"every user must hold at least this many records; {int((counts < self.min_records).sum())} "
                              f"of the {counts.size} users of {self.source} hold fewer (the fewest: {int(counts.min())})")

    @property
    def users_available(self) -> int:
        """The training users the table holds (rows, or distinct values of the user column)."""
        if self.user_column is not None:
            return self._users()[1].size
        return self.source_rows - (self.test_rows if self.test is None else 0)

    def for_run(self, run) -> "Dataset":
        """Itself, once the table is known to hold the run's n users (training rows).

        Raises:
          ConfigError: naming n_users.
        """
        available = self.users_available
        if run["n_users"] > available:
            what = f"users (distinct {self.user_column!r} values)" if self.user_column else "training rows"
            raise ConfigError("n_users", run["n_users"], f"must be at most the {available} {what} of {self.source}")
        return self

    # --- which rows are whose -----------------------------------------------------------

    def _split(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(training rows, held-out rows) of the source, sorted; None for "all rows" / "none"."""
        if self.test is not None or self.test_rows == 0:
            return None, None
        held = np.random.default_rng([self.split_seed, self.source_rows]).choice(
            self.source_rows, self.test_rows, replace=False)
        mask = np.ones(self.source_rows, bool)
        mask[held] = False
        return np.flatnonzero(mask), np.sort(held)

    def training_rows(self, n_users: int) -> np.ndarray | None:
        """The source rows of users 0 … n−1, sorted; None when they are rows 0 … n−1
        (with a user column: the users' indices, in order of their first row)."""
        train, _ = self._split()
        available = self.users_available if self.user_column else (self.source_rows if train is None else train.size)
        if n_users == available:
            return train
        pool = np.arange(available) if train is None else train
        chosen = np.random.default_rng([self.split_seed, self.source_rows, n_users]).choice(
            available, n_users, replace=False)
        return pool[np.sort(chosen)]

    def _read(self, source: str, rows: np.ndarray | None, first: int, stop: int) -> np.ndarray:
        table = Table(source)
        columns = [*self.features, self.label]
        if rows is None:
            raw = table.read(columns, first, stop)
        else:
            chosen = rows[first:stop]
            raw = table.read(columns, int(chosen[0]), int(chosen[-1]) + 1, chosen) if chosen.size else \
                np.empty((len(columns), 0))
        for first_row in range(0, raw.shape[1], PREPARE_ROWS):
            if not self._prepare(raw[:, first_row: first_row + PREPARE_ROWS]):  # changed since the preflight scan
                raise RuntimeError(f"{source} has non-finite values in rows it did not have when the run was planned")
        return raw

    def _prepare(self, raw: np.ndarray) -> bool:
        """The data-independent preprocessing (module docstring), in place, on a few
        rows at a time (they stay in cache): scale, clip or normalise each row to B,
        labels in the loss's coding.

        Returns:
          Whether every value was finite.
        """
        features = raw[:-1]
        if self.scale != 1.0:
            features *= self.scale
        norms = np.sqrt(np.einsum("ij,ij->j", features, features))
        if not (np.isfinite(norms).all() and np.isfinite(raw[-1]).all()):
            return False
        if self.rows == "normalize":
            factor = np.divide(self.feature_bound, norms, out=np.zeros_like(norms), where=norms > 0)
        else:
            factor = np.minimum(1.0, np.divide(self.feature_bound, norms, out=np.ones_like(norms), where=norms > 0))
        features *= factor
        raw[-1] = self.loss.code(raw[-1])
        return True

    def read_user_records(self, n_users: int, first: int, stop: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Users first … stop−1's records, user by user, and how many each holds.

        Returns:
          (float64 array (d + 1, records), records per user or None when each row is one user).
        """
        if self.user_column is None:
            return self.read_users(n_users, first, stop), None
        rows, counts = self._users()
        chosen = self.training_rows(n_users)
        users = np.arange(first, stop) if chosen is None else chosen[first:stop]
        starts = np.concatenate([[0], np.cumsum(counts)])
        wanted = np.concatenate([rows[starts[user]: starts[user + 1]] for user in users]) if users.size else \
            np.zeros(0, np.int64)
        order = np.argsort(wanted, kind="stable")  # the table is read in row order, then put user by user
        raw = self._read(self.source, wanted[order], 0, wanted.size)
        records = np.empty_like(raw)
        records[:, order] = raw
        return records, counts[users]

    def read_users(self, n_users: int, first: int, stop: int) -> np.ndarray:
        """Users first … stop−1's records, read from the table (only their rows).

        Returns:
          float64 array (d + 1, users): features, then the coded label.
        """
        return self._read(self.source, self.training_rows(n_users), first, stop)

    @property
    def heldout_users(self) -> int:  # how many held-out records there are (0: none)
        return self.test_rows

    def read_heldout(self, first: int, stop: int) -> np.ndarray:
        """Held-out records first … stop−1, as read_users."""
        if self.test is not None:
            return self._read(self.test, None, first, stop)
        return self._read(self.source, self._split()[1], first, stop)

    # --- the loss --------------------------------------------------------------------------

    @property
    def data_dim(self) -> int:
        return len(self.features) + 1

    def _scores(self, thetas: np.ndarray, data: np.ndarray) -> np.ndarray:
        """Scores (K, T, rows) of T models (T, dim) on records (d + 1, rows)."""
        count, outputs, width = thetas.shape[0], self.loss.outputs, len(self.features)
        flat = thetas.reshape(count * outputs, width) @ data[:-1]
        return flat.reshape(count, outputs, -1).transpose(1, 0, 2)

    def gradients(self, theta: np.ndarray, data: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        slope = self.loss.derivative(self._scores(theta[None, :], data), data[-1])[:, 0]  # (K, rows)
        features = data[:-1]
        grads = (slope[:, None, :] * features[None, :, :]).reshape(self.dim, -1)
        if self.l2:
            grads += self.l2 * theta[:, None]
        if out is None:
            return grads
        np.copyto(out, grads)
        return out

    def metric_sums(self, thetas: np.ndarray, data: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Sums over records of the loss (and, for classifiers, of correct predictions), per model.

        Args:
          thetas: T models, (T, dim).
          data: records, (d + 1, rows).
          weights: each record's weight (1/(its user's records): every user counts once); None: 1.

        Returns:
          (2, T): loss sums (without the ridge term), then correct counts (0 for regressions).
        """
        scores = self._scores(thetas, data)
        labels = data[-1]
        correct = self.loss.correct(scores, labels) if self.loss.classifier else np.zeros((len(thetas), 1))
        values = self.loss.values(scores, labels)
        if weights is None:
            return np.stack([values.sum(axis=1), correct.sum(axis=1).astype(float)])
        return np.stack([values @ weights, correct.astype(float) @ weights if self.loss.classifier else
                         np.zeros(len(thetas))])

    def objective_sums(self, theta: np.ndarray, data: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """The loss sum and its gradient over records (without the ridge term), as one vector (1 + dim,);
        with `weights`, the weighted sums (see metric_sums)."""
        scores = self._scores(theta[None, :], data)
        labels = data[-1]
        slope = self.loss.derivative(scores, labels)[:, 0]
        values = self.loss.values(scores, labels)
        if weights is not None:
            slope, values = slope * weights, values * weights
        gradient = (slope @ data[:-1].T).reshape(-1)  # Σᵢ φ'ᵢ xᵢᵀ, row k for output k
        return np.concatenate([[values.sum()], gradient])

    def risk(self, loss_mean: float, theta: np.ndarray) -> float:
        """F(θ) from the mean loss: adds the ridge term."""
        return loss_mean + 0.5 * self.l2 * float(theta @ theta)

    def project(self, theta: np.ndarray) -> np.ndarray:
        return ball_projection(theta, self.radius)

    def population_loss(self, theta: np.ndarray) -> float:
        raise NotImplementedError("a dataset's risk is a sum over its rows, measured on the shards")

    @property
    def optimum(self) -> np.ndarray:
        raise NotImplementedError("a dataset's optimum is computed on the shards (pipeline.engine.evaluation)")

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        raise NotImplementedError("a dataset's users are read, not drawn: read_users")

    # --- constants ---------------------------------------------------------------------------

    @property
    def lipschitz(self) -> float:
        return self.loss.slope_bound(self.radius * self.feature_bound) * self.feature_bound + self.l2 * self.radius

    @property
    def smoothness(self) -> float:
        return self.loss.curvature_bound() * self.feature_bound**2 + self.l2

    @property
    def strong_convexity(self) -> float:
        return self.l2

    @property
    def diameter(self) -> float:
        return 2.0 * self.radius

    @property
    def data_norm_bound(self) -> float:
        return self.feature_bound

    def objective_key(self, n_users: int) -> str:
        """What the training objective depends on (the table's bytes, the users, the loss), hashed:
        the key of its cached optimum."""
        described = {"table": self.fingerprint, "features": self.features, "label": self.label,
                     "loss": self.loss.name, "classes": self.loss.classes, "label_bound": self.loss.label_bound,
                     "huber_delta": self.loss.huber_delta, "l2": self.l2, "radius": self.radius,
                     "feature_bound": self.feature_bound, "scale": self.scale, "rows": self.rows,
                     "test_fraction": self.test_fraction, "split_seed": self.split_seed, "n_users": n_users,
                     **({"user_column": self.user_column} if self.user_column else {})}
        return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()
