"""One round end to end, wherever it runs: query → users' statistic →
analyzer → optimizer update → metrics (shared/DESIGN.md §2)."""
from __future__ import annotations

import math
import time
import weakref
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import numpy as np

from pipeline.errors import NonFiniteError, value_class
from pipeline.optimizers.base import stage_arrays, stage_query, stage_round
from pipeline.protocols.base import RoundPlan

# (plan, protocol parameters, θ) → the analyzer's statistic of the round.
Collect = Callable[[RoundPlan, Any, np.ndarray], Any]


class RoundRecord(NamedTuple):
    """What a round leaves behind: which round and users, the protocol parameters
    it ran with (for the ledger), and the released model's loss.

    On a dataset (a problem without exact losses) the losses are NaN until the
    run is over; a round to be measured then carries its released model in
    `released` (pipeline.engine.evaluation), and gets the held-out metrics and the
    optimum's Frank–Wolfe gap too."""

    round: int
    first_user: int
    stop_user: int
    params: Any
    users: int
    excess_loss: float
    population_loss: float
    seconds: float
    released: np.ndarray | None = None
    test_loss: float = math.nan
    test_accuracy: float = math.nan
    optimum_gap: float = math.nan


# The numeric fields of a record, held in one array each (int64 or float64).
COLUMNS = {"round": np.int64, "first_user": np.int64, "stop_user": np.int64, "users": np.int64,
           "excess_loss": np.float64, "population_loss": np.float64, "seconds": np.float64,
           "test_loss": np.float64, "test_accuracy": np.float64, "optimum_gap": np.float64}
_DEFAULTS = {name: RoundRecord._field_defaults.get(name) for name in COLUMNS}


class RoundRecords:
    """A run's round records, in columns: one array per numeric field of RoundRecord (80
    bytes a round), the protocol parameters as runs of rounds sharing one object, and the
    released models of the few rounds that carry one (a dataset's measured rounds).

    A 10⁸-user seq_sgd has 2·10⁶ rounds: as RoundRecord tuples they took about 850 bytes
    a round in the process that records the run (and pickled at 4 µs a record). It reads
    as a sequence of RoundRecord (`records[i]`, iteration: a tuple made on request);
    `column` and `params_runs` read it without one. Records appended one by one (the
    Python rounds) wait in a list until the next read.

    Args:
      records: RoundRecord to start with.
    """

    def __init__(self, records: Iterable[RoundRecord] = ()):
        self._chunks: list[dict[str, np.ndarray]] = []  # column arrays, chunk after chunk
        self._params: list[list] = []  # [params, rounds]: consecutive rounds sharing one object
        self._released: dict[int, np.ndarray] = {}  # position → the round's released model
        self._pending: list[RoundRecord] = []
        self._length = 0
        self.extend(records)

    @classmethod
    def from_columns(cls, params: Any, **columns: np.ndarray) -> "RoundRecords":
        """Records of rounds that share `params`, from their columns (the others at their defaults).

        Args:
          params: the rounds' protocol parameters.
          **columns: arrays of one length, named as COLUMNS.
        """
        records = cls()
        size = len(next(iter(columns.values())))
        records._add_chunk({name: np.asarray(columns[name], dtype) if name in columns
                            else np.full(size, _DEFAULTS[name], dtype) for name, dtype in COLUMNS.items()},
                           [[params, size]] if size else [], {})
        return records

    def _add_chunk(self, chunk: dict[str, np.ndarray], params: list[list], released: dict[int, np.ndarray]) -> None:
        for position, model in released.items():
            self._released[self._length + position] = model
        for run in params:
            if self._params and self._params[-1][0] is run[0]:
                self._params[-1][1] += run[1]
            else:
                self._params.append(list(run))
        self._chunks.append(chunk)
        self._length += len(chunk["round"])

    def _flush(self, join: bool = True) -> None:
        """Moves appended records into columns, and (join) the chunks into one."""
        if self._pending:
            pending, self._pending = self._pending, []
            fields = dict(zip(RoundRecord._fields, zip(*pending)))
            self._length -= len(pending)
            self._add_chunk({name: np.array(fields[name], dtype) for name, dtype in COLUMNS.items()},
                            [[params, 1] for params in fields["params"]],  # _add_chunk merges the runs
                            {position: model for position, model in enumerate(fields["released"])
                             if model is not None})
        if join and len(self._chunks) > 1:  # a column at a time, its chunks dropped: the copy's peak is one column
            chunks, joined = self._chunks, {}
            for name in COLUMNS:
                joined[name] = np.concatenate([chunk.pop(name) for chunk in chunks])
            self._chunks = [joined]

    def append(self, record: RoundRecord) -> None:
        """Adds one round's record after the others."""
        self._pending.append(record)
        self._length += 1

    def extend(self, records: Iterable[RoundRecord]) -> None:
        """Adds records after the others (another RoundRecords: column by column)."""
        if isinstance(records, RoundRecords):  # joined on the next read, not at every trip's extend
            records._flush()
            self._flush(join=False)
            if records._chunks:
                self._add_chunk(dict(records._chunks[0]), records._params, records._released)  # ours to join
            return
        for record in records:
            self.append(record)

    def __len__(self) -> int:
        return self._length

    def column(self, name: str) -> np.ndarray:
        """One numeric field for every round (read-only: `set` changes records)."""
        self._flush()
        if not self._chunks:
            return np.zeros(0, COLUMNS[name])
        view = self._chunks[0][name].view()
        view.flags.writeable = False
        return view

    def params_runs(self) -> list[tuple[Any, int]]:
        """(params, rounds) for consecutive runs of rounds sharing one parameters object."""
        self._flush()
        return [(params, rounds) for params, rounds in self._params]

    def released_positions(self) -> list[int]:
        """The positions of the records that carry a released model."""
        self._flush()
        return sorted(self._released)

    def copy(self) -> "RoundRecords":
        """A copy whose columns `set` may change without changing these."""
        self._flush()
        copied = RoundRecords()
        if self._chunks:
            copied._add_chunk({name: values.copy() for name, values in self._chunks[0].items()}, self._params,
                              self._released)
        return copied

    def set(self, position: int, **fields: Any) -> None:
        """Changes numeric fields of one record, or its released model (`released=None` drops it), in place."""
        self._flush()
        for name, value in fields.items():
            if name == "released":
                self._released.pop(position, None)
                if value is not None:
                    self._released[position] = value
            else:
                self._chunks[0][name][position] = value

    def _params_at(self, position: int) -> Any:
        for params, rounds in self._params:
            if position < rounds:
                return params
            position -= rounds
        raise IndexError(position)

    def __getitem__(self, position: int) -> RoundRecord:
        self._flush()
        if not -self._length <= position < self._length:
            raise IndexError(f"record {position} of {self._length}")
        position %= self._length
        values = {name: self._chunks[0][name][position].item() for name in COLUMNS}
        return RoundRecord(**values, params=self._params_at(position), released=self._released.get(position))

    def __iter__(self) -> Iterator[RoundRecord]:
        self._flush()
        if not self._length:
            return
        columns = [self._chunks[0][name].tolist() for name in COLUMNS]
        params = (value for value, rounds in self._params for _ in range(rounds))
        for position, values in enumerate(zip(*columns)):
            yield RoundRecord(**dict(zip(COLUMNS, values)), params=next(params),
                              released=self._released.get(position))

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (RoundRecords, list)) else NotImplemented

    def __reduce__(self):
        self._flush()
        return _unpickle_records, (self._chunks[0] if self._chunks else None, self._params, self._released)


def _unpickle_records(columns: dict | None, params: list, released: dict) -> RoundRecords:
    """RoundRecords from its pickled columns, parameter runs and released models."""
    records = RoundRecords()
    if columns is not None:
        records._add_chunk(columns, params, released)
    return records


def compiled_stages(update: Any) -> tuple[Callable, Callable, Callable]:
    """An optimizer's stages compiled one by one (compiled.compiled_stages; numba loads there only)."""
    from pipeline import compiled

    return compiled.compiled_stages(update)


# The latest steppers' compiled updates and stages: asked once per optimizer, not once per round.
# A weak reference names the stepper (an id alone could be a later object's), and keeps no
# problem's data alive after its run.
_STEPPED: dict[int, tuple] = {}
_STEPPED_KEPT = 8


def _stages_of(stepper: Any) -> tuple[Any, tuple | None]:
    """The stepper's compiled update (Optimizer.compiled_update) and its stages compiled, or (None, None)."""
    kept = _STEPPED.get(id(stepper))
    if kept is None or kept[0]() is not stepper:
        update = stepper.compiled_update()
        try:
            ref = weakref.ref(stepper)
        except TypeError:  # a class with __slots__ and no weak references: kept, as one of eight
            ref = lambda: stepper  # noqa: E731
        kept = ref, update, None if update is None else compiled_stages(update)
        while len(_STEPPED) >= _STEPPED_KEPT:
            del _STEPPED[next(iter(_STEPPED))]
        _STEPPED[id(stepper)] = kept
    return kept[1], kept[2]


def execute_rounds(job: Any, state: Any, start: int, stop: int, collect: Collect) -> tuple[Any, RoundRecords]:
    """Runs rounds [start, stop) of a job.

    The optimizer only ever sees the analyzer's estimate: `collect` returns
    the shuffled-message statistic and `decode` turns it into a noisy sum.

    Args:
      job: the RunJob.
      state: the optimizer state before round `start`.
      start, stop: the rounds to run.
      collect: gathers the round's statistic from the users.

    Returns:
      (state after round stop − 1, one record per round).
    """
    records = RoundRecords()
    exact = job.problem.exact_loss
    for round_index in range(start, stop):
        began = time.perf_counter()
        plan = job.schedule.plan(round_index)
        params = job.protocol.planned(plan, job.problem.dim)
        # An optimizer whose round is its stages runs them compiled, one by one (the fused rounds run
        # the same functions in one loop); the others, and an empty round, their own functions.
        stepper, running = job.optimizer.stepping(state)
        update, stages = _stages_of(stepper)
        arrays = None if stages is None else stage_arrays(update, running)  # one copy, queried then advanced
        query = job.optimizer.query(state) if stages is None else stage_query(update, arrays, stages[0])
        counts = collect(plan, params, query)
        noisy_sum = job.protocol.decode(params, counts)
        # A Poisson or self-sampled round can be empty: the optimizer is told so (None).
        count = job.protocol.released_count(params, counts)
        mean = noisy_sum / count if count > 0 else None
        if stages is None or mean is None:
            state = job.optimizer.update(state, mean)
            released = job.optimizer.output(state)
        else:  # a release that is not finite leaves the state as it was, and is reported below
            after, released = stage_round(update, running, arrays, mean, stepper.problem.project, stages[1:])
            state = state if after is None else job.optimizer.advanced(state, after, 1)
        for name, value in (("the analyzer's estimate", noisy_sum), ("the model θ", released)):
            if not np.isfinite(value).all():
                raise NonFiniteError(f"round {round_index}: {name} holds {value_class(value)}")
        if exact:
            records.append(RoundRecord(round_index, plan.first_user, plan.stop_user, params, counts.users,
                                       *job.problem.excess_and_population_loss(released), time.perf_counter() - began))
        else:  # measured after the run, on the shards that hold the rows
            kept = np.array(released, copy=True) if round_index in job.evaluation_rounds else None
            records.append(RoundRecord(round_index, plan.first_user, plan.stop_user, params, counts.users,
                                       math.nan, math.nan, time.perf_counter() - began, kept))
    return state, records
