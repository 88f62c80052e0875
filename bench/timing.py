"""Interleaved, repeated timing: the minimum over repetitions of each of
several functions, run in turn so that load drifts hit all of them alike."""
from __future__ import annotations

import time
from typing import Callable


def best_times(functions: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """The fastest of `repeats` runs of each function, interleaved.

    Args:
      functions: name → a function to time.
      repeats: runs per function.

    Returns:
      name → seconds.
    """
    best = {name: float("inf") for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            began = time.perf_counter()
            function()
            best[name] = min(best[name], time.perf_counter() - began)
    return best
