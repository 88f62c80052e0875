"""A problem whose users are the rows of a table: a linear model's loss on each
user's record, read in place by the shard that holds the user (shared/DESIGN.md
§2, "Data sets").

What the driver does: it opens the table's metadata and, once per table and
process, scans it in batches to refuse bad input before any run (missing or
non-numeric columns, NaN or infinite values, labels outside the loss's domain,
too few rows) and to fingerprint its bytes. It never keeps a row: with a user
column it groups that column once (a few numbers per user, `Users`, sent to the
shards with the problem). Shards read their own rows (`read_users`,
`read_user_records`), and the metrics that need every row (empirical risk,
held-out loss and accuracy, the empirical optimum) are sums that the shards
compute per block (`metric_sums`, `objective_sums`).

Preprocessing is data-independent only: a declared constant factor
(`problem.scale`), then each row clipped to ‖x‖₂ ≤ B (`problem.rows: clip`) or
scaled to ‖x‖₂ = B (`normalize`; a zero row stays zero), B = problem.feature_bound.
Nothing is fitted to the data (no standardisation by the data's mean or spread,
which would leak about every user into every other's record).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from typing import Any, Callable, ClassVar

import numpy as np

from pipeline.errors import ConfigError
from pipeline.numerics import column_norms
from pipeline.options import Option, choice, integer, real, text
from pipeline.problems.base import Problem, ball_projection
from pipeline.problems.losses import LOSSES, Loss
from pipeline.problems.records import offsets_of
from pipeline.problems.tables import NO_MORE, Table, TableError

ROW_MODES = ("clip", "normalize")
PREPARE_ROWS = 8192  # rows preprocessed at once: (d + 1) × 8192 floats stay in cache

# (source, size, mtime, columns, label checks) → (rows, fingerprint): each table is scanned once per process.
_SCANNED: dict[tuple, tuple[int, str]] = {}
# (source, size, mtime, user column) → its Users: grouped once per process, or received with a
# pickled Dataset from the process that planned the run.
_GROUPED: dict[tuple, "Users"] = {}
SHIPPED_USERS = 1 << 20  # a pickled Dataset carries its grouping up to this many users (24 bytes each)
CODE_SLACK = 1 << 16  # integer keys get dense codes when they span at most rows + this many values


@dataclasses.dataclass(frozen=True, eq=False)
class Users:
    """A user column grouped: each distinct value one user, users in order of their first row.
    O(users) numbers, all a shard needs to find its users' rows (never a row index per record).

    Attributes:
      counts: the records each user holds (int64).
      first_rows: each user's first row (int64, increasing).
      low, codes: integer keys spanning few values: user u's key is low + codes[u] (codes int64).
      values: other keys (strings, or integers spread too widely): user u's key is values[u] (a
        pyarrow array); None with codes.
      contiguous: whether each user's rows are one run of rows (users one after the other, as
        experiments/make_datasets.py writes its client partitions).
    """

    counts: np.ndarray
    first_rows: np.ndarray
    low: int = 0
    codes: np.ndarray | None = None
    values: Any = None
    contiguous: bool = False

    def slots(self, users: np.ndarray) -> Callable[[Any], np.ndarray]:
        """A function of a piece of the user column: each row's position in `users` (−1: none of them).

        Args:
          users: user indices, distinct.
        """
        if self.codes is None:
            import pyarrow as pa
            import pyarrow.compute as pc

            wanted = self.values.take(pa.array(users))

            def hashed(keys) -> np.ndarray:
                found = pc.index_in(pa.array(keys) if isinstance(keys, np.ndarray) else keys, value_set=wanted)
                return found.fill_null(-1).to_numpy().astype(np.int32, copy=False)

            return hashed
        span = int(self.codes.max()) + 1 if self.codes.size else 0
        slot = np.full(span, -1, dtype=np.int32)
        slot[self.codes[users]] = np.arange(users.size, dtype=np.int32)
        low = self.low

        def coded(keys: np.ndarray) -> np.ndarray:
            codes = keys if low == 0 and keys.dtype == np.int64 else keys.astype(np.int64, copy=False) - low
            if codes.size and int(codes.view(np.uint64).max()) >= span:  # below low too: a key not grouped
                raise RuntimeError("a user column has values it did not have when the run was planned")
            return slot[codes]

        return coded


def forget_users() -> None:
    """Drops every user column this process has grouped or received: it then reads as a new
    shard process does (benchmarks)."""
    _GROUPED.clear()


class _Spread(Exception):
    """Integer keys spanning too many values for dense codes."""


def _group_coded(pieces, rows: int) -> Users:
    """Users of integer keys spanning at most rows + CODE_SLACK values, in one pass over the
    column's pieces (key − low is the code; memory 16 bytes per code while grouping).

    Raises:
      _Spread: keys that are not integers, or span more values.
    """
    limit = rows + CODE_SLACK
    low, span, first, counts = 0, 0, np.zeros(0, np.int64), np.zeros(0, np.int64)
    least = most = None  # the keys seen
    runs, last = 0, None  # runs of equal keys, and the last key seen
    for start, keys in pieces:
        if not isinstance(keys, np.ndarray):
            raise _Spread
        if not keys.size:
            continue
        runs += int(np.count_nonzero(keys[1:] != keys[:-1])) + int(last is None or keys[0] != last)
        last = keys[-1]
        piece_least, piece_most = int(keys.min()), int(keys.max())
        if piece_most >= 1 << 63:
            raise _Spread
        below, above = span and piece_least < low, span and piece_most >= low + span
        least = piece_least if least is None else min(least, piece_least)
        most = piece_most if most is None else max(most, piece_most)
        if not span or below or above:
            needed = most - least + 1
            if needed > limit:
                raise _Spread
            room = min(needed, limit - needed) if span else 0  # grown at least twofold, within the limit
            new_low = least - (room // (1 + bool(above)) if below else 0)
            new_high = most + (room // (1 + bool(below)) if above else 0)
            grown_first = np.full(new_high - new_low + 1, np.iinfo(np.int64).max, dtype=np.int64)
            grown_counts = np.zeros(new_high - new_low + 1, dtype=np.int64)
            both = slice(max(low, new_low), min(low + span, new_high + 1))  # every key seen lies in both
            if both.start < both.stop:
                grown_first[both.start - new_low: both.stop - new_low] = first[both.start - low: both.stop - low]
                grown_counts[both.start - new_low: both.stop - new_low] = counts[both.start - low: both.stop - low]
            low, span, first, counts = new_low, new_high - new_low + 1, grown_first, grown_counts
        codes = keys.astype(np.int64, copy=False) - low
        np.minimum.at(first, codes, np.arange(start, start + keys.size, dtype=np.int64))
        if span <= 4 * keys.size:
            counts += np.bincount(codes, minlength=span)
        else:
            np.add.at(counts, codes, 1)
    present = np.flatnonzero(counts)
    order = np.argsort(first[present])  # users in order of their first row (distinct rows)
    codes = present[order]
    return Users(counts[codes], first[codes], low, codes, contiguous=runs == codes.size)


def _group_hashed(pieces) -> Users:
    """Users of any keys (strings, integers spread widely): the column hashed as a whole
    (memory: the column and a code per row while grouping)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = [pa.array(keys) if isinstance(keys, np.ndarray) else keys for _, keys in pieces]
    if not chunks:
        return Users(np.zeros(0, np.int64), np.zeros(0, np.int64), values=pa.array([], pa.int64()))
    encoded = pc.dictionary_encode(pa.chunked_array(chunks))  # codes in order of first appearance
    values = encoded.chunk(0).dictionary
    counts = np.zeros(len(values), dtype=np.int64)
    first = np.full(len(values), np.iinfo(np.int64).max, dtype=np.int64)
    start, runs, last = 0, 0, None
    for chunk in encoded.chunks:
        codes = chunk.indices.to_numpy()
        if not codes.size:
            continue
        counts += np.bincount(codes, minlength=counts.size)
        np.minimum.at(first, codes, np.arange(start, start + codes.size, dtype=np.int64))
        runs += int(np.count_nonzero(codes[1:] != codes[:-1])) + int(last is None or codes[0] != last)
        start, last = start + codes.size, codes[-1]
    return Users(counts, first, values=values, contiguous=runs == counts.size)


def _stable_order(values: np.ndarray, bound: int) -> np.ndarray:
    """np.argsort(values, kind="stable") of integers in [0, bound), as radix sorts of 16-bit digits
    (numpy sorts 16-bit integers by radix: linear time, where 64-bit ones take a comparison sort)."""
    order = np.argsort((values & 0xFFFF).astype(np.uint16), kind="stable")
    shift = 16
    while bound > 1 << shift:
        digit = ((values[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
        shift += 16
    return order


class TableChangedError(RuntimeError):
    """A table that is not the one the run was planned on: the shard refuses to read it."""


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
        # What shards check before reading (`_planned_table`): each table's size and modification time.
        self.planned_tables = {path: (table.size, table.mtime) for path in (source, test) if path is not None
                               for table in [self._table("problem.source" if path == source else "problem.test", path)]}
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
            # Column names a header could not have (a path, a passwd line) are not quoted: they are the file's data.
            plain = all(re.fullmatch(r"[\w .\-\[\]]{1,64}", name) for name in columns)
            listed = f"it has {', '.join(list(columns)[:12])}" + (" …" if len(columns) > 12 else "") if plain else \
                f"its {len(columns)} column names are not shown (not plain names: they may be the file's data)"
            raise ConfigError("problem.label", self.label, f"must be a column of {source}; {listed}")
        matched = table.match(pattern, exclude=(self.label, self.user_column))
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
        rows, codings = 0, set()
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
                    # The row and the rule, never the value: a table's contents stay out of error lines.
                    raise ConfigError("problem.label", self.label, f"row {rows + row} of {source} breaks the rule: "
                                                                   f"labels of loss {self.loss.name} "
                                                                   f"{self.loss.label_rule()}")
                codings |= self.loss.codings(batch[-1])
                if len(codings) > 1:
                    raise ConfigError("problem.label", self.label, f"{source} holds both 0 and −1 labels: labels of "
                                                                   f"loss {self.loss.name} are 0/1 or −1/+1, not both "
                                                                   "(0 and −1 would both be the negative class)")
                rows += batch.shape[1]
        except TableError as error:
            raise ConfigError(field, source, str(error)) from None
        _SCANNED[key] = rows, table.fingerprint()
        return _SCANNED[key]

    def _grouping_key(self, table: Table) -> tuple:
        return self.source, table.size, table.mtime, self.user_column

    def _users(self) -> Users:
        """The users of a table with a user column: once per process (a shard gets them with the
        problem), in one pass over the column, a piece at a time.

        Raises:
          TableError: the column is missing, has missing values or is neither integers nor strings.
        """
        table = Table(self.source)
        key = self._grouping_key(table)
        if key not in _GROUPED:
            try:
                _GROUPED[key] = _group_coded(table.key_pieces(self.user_column), self.source_rows)
            except _Spread:
                _GROUPED[key] = _group_hashed(table.key_pieces(self.user_column))
        return _GROUPED[key]

    def __getstate__(self) -> dict:
        """The problem, and its table's users when grouped here and few enough to travel: the
        shards it is sent to read their users' records without grouping the column again."""
        state = self.__dict__.copy()
        # The last grouping of this column (keyed by the table's size and mtime: a stale one is never used).
        grouped = [(key, users) for key, users in _GROUPED.items() if key[0] == self.source and key[3] == self.user_column]
        if self.user_column is not None and grouped and grouped[-1][1].counts.size <= SHIPPED_USERS:
            state["_shipped_users"] = grouped[-1]
        return state

    def __setstate__(self, state: dict) -> None:
        shipped = state.pop("_shipped_users", None)
        self.__dict__.update(state)
        if shipped is not None:
            _GROUPED.setdefault(*shipped)  # used only while the table's size and mtime are the same

    def _check_users(self) -> None:
        """Refuses a user column that cannot group the rows, or users below the declared minimum.

        Raises:
          ConfigError: naming problem.user_column or problem.min_records.
        """
        if self.user_column == self.label or self.user_column in self.features:
            raise ConfigError("problem.user_column", self.user_column, "must not be the label or a feature column "
                              "(set problem.features to exclude it)")
        try:
            counts = self._users().counts
        except TableError as error:
            raise ConfigError("problem.user_column", self.user_column, str(error)) from None
        if counts.size and counts.min() < self.min_records:
            raise ConfigError("problem.min_records", self.min_records,
                              f"every user must hold at least this many records; {int((counts < self.min_records).sum())} "
                              f"of the {counts.size} users of {self.source} hold fewer (the fewest: {int(counts.min())})")

    @property
    def users_available(self) -> int:
        """The training users the table holds (rows, or distinct values of the user column)."""
        if self.user_column is not None:
            return self._users().counts.size
        return self.source_rows - (self.test_rows if self.test is None else 0)

    def records_held(self, n_users: int) -> float | None:
        """The rows of the n users holding the most (all of them when the run takes every user), with
        a user column; else None (a row is a user: one record each)."""
        if self.user_column is None:
            return None
        counts = self._users().counts
        # Every user (the usual run) needs no sort: a table of 10⁶ users would sort per grid point.
        return float(counts.sum() if n_users >= counts.size else np.sort(counts)[::-1][:n_users].sum())

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

    def _planned_table(self, source: str) -> Table:
        """The table a shard reads, once it is known to be the one planned: the same size and
        modification time (to the nanosecond) as when the run was planned and scanned.

        Raises:
          TableChangedError: naming the file and what changed.
        """
        table = Table(source)
        planned = self.planned_tables[source]
        if (table.size, table.mtime) != planned:
            raise TableChangedError(f"{source} changed after the run was planned and its values checked (size "
                                    f"{planned[0]} → {table.size} bytes, modified {planned[1]} → {table.mtime} ns): "
                                    "run the command again to plan it anew")
        return table

    def _read(self, source: str, rows: np.ndarray | None, first: int, stop: int) -> np.ndarray:
        table = self._planned_table(source)
        columns = [*self.features, self.label]
        if rows is None:
            raw = table.read(columns, first, stop)
        else:
            chosen = rows[first:stop]
            raw = table.read(columns, int(chosen[0]), int(chosen[-1]) + 1, chosen) if chosen.size else \
                np.empty((len(columns), 0))
        return self._prepared(source, raw)

    def _prepared(self, source: str, raw: np.ndarray) -> np.ndarray:
        """raw, preprocessed in place (`_prepare`) a few rows at a time."""
        for first_row in range(0, raw.shape[1], PREPARE_ROWS):
            if not self._prepare(raw[:, first_row: first_row + PREPARE_ROWS]):  # changed since the preflight scan
                raise TableChangedError(f"{source} has non-finite values or labels outside the loss's domain that "
                                        "it did not have when the run was planned")
        return raw

    def _prepare(self, raw: np.ndarray) -> bool:
        """The data-independent preprocessing (module docstring), in place, on a few
        rows at a time (they stay in cache): scale, clip or normalise each row to B,
        labels in the loss's coding.

        Returns:
          Whether every value was finite and every label in the loss's domain.
        """
        features = raw[:-1]
        if self.scale != 1.0:
            features *= self.scale
        if not (np.isfinite(features).all() and np.isfinite(raw[-1]).all()) or self.loss.bad_labels(raw[-1]).any():
            return False
        norms = column_norms(features)
        large = ~np.isfinite(norms)  # finite values above ~1e154 overflow the squares: scale those rows first
        if large.any():
            peak = np.abs(features[:, large]).max(axis=0)
            norms[large] = peak * np.linalg.norm(features[:, large] / peak, axis=0)
        if self.rows == "normalize":
            factor = np.divide(self.feature_bound, norms, out=np.zeros_like(norms), where=norms > 0)
        else:
            factor = np.minimum(1.0, np.divide(self.feature_bound, norms, out=np.ones_like(norms), where=norms > 0))
        features *= factor
        raw[-1] = self.loss.code(raw[-1])
        return True

    def read_user_records(self, n_users: int, first: int, stop: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Users first … stop−1's records, user by user, and how many each holds.

        With a user column whose users' rows are runs one after the other (`Users.contiguous`),
        consecutive users' records are one range of rows, read as `read_users` reads its rows.
        Otherwise one pass over the table from the first user's first row, a piece (Parquet row
        group) at a time, until every record is read: each piece's user column says which of its
        rows are these users' and where each goes (user by user, in the users' order; each
        user's rows in file order), and its columns are copied there, one at a time. Memory: the
        records, a few numbers per user, and one piece's column and indices.

        Returns:
          (float64 array (d + 1, records), records per user or None when each row is one user).
        """
        if self.user_column is None:
            return self.read_users(n_users, first, stop), None
        grouped = self._users()
        chosen = self.training_rows(n_users)
        users = np.arange(first, stop) if chosen is None else chosen[first:stop]
        counts = grouped.counts[users]
        offsets = offsets_of(counts)
        if users.size and grouped.contiguous and users[-1] - users[0] + 1 == users.size:  # one run of rows
            start = int(grouped.first_rows[users[0]])
            return self._read(self.source, None, start, start + int(offsets[-1])), counts
        columns = [*self.features, self.label]
        records = np.empty((len(columns), int(offsets[-1])))
        if not users.size:
            return records, counts
        cursor = offsets[:-1].copy()  # where each user's next record goes
        slots = grouped.slots(users)
        left = [records.shape[1]]

        def place(start: int, keys) -> tuple | None:
            if not left[0]:
                return NO_MORE
            slot = slots(keys)
            wanted = slot >= 0
            low = int(wanted.argmax()) if wanted.size else 0
            if not wanted.size or not wanted[low]:
                return None
            high = wanted.size - int(wanted[::-1].argmax())
            block = bool(wanted[low:high].all())  # the rows kept are one run of the piece's rows
            kept = slice(low, high) if block else np.flatnonzero(wanted)
            slot = slot[kept]
            left[0] -= slot.size
            head = slot[:64]  # a cheap look first: shuffled rows are out of order at once
            if bool((head[1:] >= head[:-1]).all()) and bool((slot[1:] >= slot[:-1]).all()):
                # In order already: each user's rows together, users in order.
                first_user, last_user = int(slot[0]), int(slot[-1])
                lengths = np.bincount(slot - first_user)
                begin, end = int(cursor[first_user]), int(cursor[last_user]) + int(lengths[-1])
                if block and end - begin == slot.size:  # and so are their records: one block to copy
                    cursor[first_user: last_user + 1] += lengths
                    return slice(low, high), slice(begin, end)
                order, by_user = None, slot
            else:  # by user, each user's rows in file order
                order = _stable_order(slot, users.size)
                by_user = slot[order]
            starts = np.empty(by_user.size, dtype=bool)  # where each user's rows start
            starts[0] = True
            np.not_equal(by_user[1:], by_user[:-1], out=starts[1:])
            runs = np.flatnonzero(starts)
            lengths = np.diff(np.append(runs, by_user.size))
            owners = by_user[runs]
            to = np.arange(by_user.size)
            to += np.repeat(cursor[owners] - runs, lengths)  # each user's next places, in order
            cursor[owners] += lengths
            if order is None:
                return kept, to
            in_rows = np.empty_like(to)  # where each row goes, in row order: the piece is read in order
            in_rows[order] = to
            return kept, in_rows

        self._planned_table(self.source).read_keyed(columns, self.user_column, place, records,
                                                   int(grouped.first_rows[users[0]]))
        if left[0] or (cursor != offsets[1:]).any():
            raise RuntimeError(f"{self.source} has users' records it did not have when the run was planned")
        return self._prepared(self.source, records), counts

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
