"""Progress lines: a grid's bar with its ETA, a long run's rounds and rate, planning's count."""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable


# Seconds of a run before its first note of progress, and between two notes.
RUN_NOTE_S = 5.0


# Seconds between two notes of planning's progress.
PLANNING_NOTE_S = 5.0


# Seconds of recording a run (its ledger re-derived, MLflow, Parquet) before it says so.
RECORD_NOTE_S = 2.0


def clock(seconds: float) -> str:
    """mm:ss, or --:-- for an unknown time."""
    return "--:--" if seconds != seconds else f"{int(seconds // 60):02d}:{int(seconds % 60):02d}"


def progress_bar(done: int, total: int, failed: int, elapsed: float) -> str:
    """A text progress bar with the rate so far (runs a second) and the ETA it gives."""
    width = 24
    filled = width * done // max(total, 1)
    rate = done / elapsed if done and elapsed > 0 else float("nan")
    eta = (total - done) / rate if rate > 0 else float("nan")
    shown = "--" if rate != rate else f"{rate:.3g}"
    return (f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} ({failed} failed) elapsed {clock(elapsed)}, "
            f"{shown}/s, ETA {clock(eta)}")


class RunProgress:
    """Says how far a long run got (rounds done, rate, ETA): first after RUN_NOTE_S seconds of
    the run, then every RUN_NOTE_S seconds, so that short runs stay one line each.

    Args:
      say: where the lines go.
    """

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self._noted: dict = {}  # run id → the run's seconds at its last line

    def __call__(self, run_id: str, done: int, total: int, seconds: float) -> None:
        if seconds - self._noted.get(run_id, 0.0) < RUN_NOTE_S or done >= total:
            return
        self._noted[run_id] = seconds
        rate = done / seconds
        eta = (total - done) / rate if rate > 0 else float("nan")
        self.say(f"  {run_id}: round {done:,} of {total:,} ({done / total:.0%}), {rate:,.0f} rounds/s, "
                 f"ETA {clock(eta)}")


@contextlib.contextmanager
def noted_if_long(line: str, say: Callable[[str], None], seconds: float | None = None):
    """A block that says `line` if it is still running after `seconds` (RECORD_NOTE_S)."""
    timer = threading.Timer(RECORD_NOTE_S if seconds is None else seconds, say, [line])
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def noted(items: list, work: Callable, what: str, say: Callable[[str], None]) -> list:
    """[work(item) for item in items], saying how far it got every PLANNING_NOTE_S seconds."""
    done, began = [], time.perf_counter()
    noted = began
    for item in items:
        done.append(work(item))
        if time.perf_counter() - noted >= PLANNING_NOTE_S and len(done) < len(items):
            noted = time.perf_counter()
            say(f"{what}: {progress_bar(len(done), len(items), 0, noted - began).replace(' (0 failed)', '')}")
    return done
