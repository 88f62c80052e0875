"""A table held as one array per column, or one value for a column that is the same in
every row, read as DataFrames a slice at a time: a run's rounds table (2·10⁷ rows for
10⁹ users) is written and logged without ever being a whole DataFrame, whose string
columns alone would take 3 values a row."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd


class ColumnTable:
    """Rows as columns: arrays of one length, and constants broadcast where rows are read.

    Args:
      columns: name → a 1-D array or a scalar (the same in every row), in the table's order.

    Raises:
      ValueError: no array, or arrays of different lengths.
    """

    def __init__(self, columns: dict[str, Any]):
        lengths = {len(value) for value in columns.values() if isinstance(value, np.ndarray)}
        if len(lengths) != 1:
            raise ValueError(f"a ColumnTable needs arrays of one length; got lengths {sorted(lengths)}")
        self._columns = dict(columns)
        self._length = lengths.pop()

    def __len__(self) -> int:
        return self._length

    @property
    def names(self) -> list[str]:
        """The column names, in order."""
        return list(self._columns)

    def column(self, name: str) -> np.ndarray:
        """One column for every row (a constant's: filled)."""
        value = self._columns[name]
        return value if isinstance(value, np.ndarray) else np.full(self._length, value)

    def take(self, positions: Sequence[int] | np.ndarray) -> "ColumnTable":
        """The rows at `positions`, in that order (constants stay constants)."""
        positions = np.asarray(positions, np.int64)
        return ColumnTable({name: value[positions] if isinstance(value, np.ndarray) else value
                            for name, value in self._columns.items()})

    def frame(self, start: int = 0, stop: int | None = None) -> pd.DataFrame:
        """Rows [start, stop) as a DataFrame indexed from 0."""
        stop = self._length if stop is None else min(stop, self._length)
        start = min(start, stop)
        return pd.DataFrame({name: value[start:stop] if isinstance(value, np.ndarray) else value
                             for name, value in self._columns.items()}, index=pd.RangeIndex(stop - start))
