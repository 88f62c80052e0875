"""Ctrl-C and SIGTERM during a grid: raised only where nothing is half-written, and a watchdog
for a driver the signal left blocked in native code."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Callable


class Terminated(KeyboardInterrupt):
    """SIGTERM (Slurm, Kubernetes, `ray job stop`): handled as Ctrl-C is, so the
    runs in flight are marked failed; the CLI exits 143 (128 + 15) instead of 130."""


def _interrupt(signum: int) -> KeyboardInterrupt:
    """The exception a signal stops the grid with."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


class Interrupts:
    """Ctrl-C and SIGTERM during a grid: raised at once only while the driver waits for a run
    (`raising`), where nothing is half-written; anywhere else (starting a run, recording one
    in MLflow and Parquet, marking runs failed) remembered and raised at the next run
    boundary by `check`. A KeyboardInterrupt inside MLflow's log_batch left SQLite's write
    transaction open, so marking the runs failed met "database is locked" and they stayed
    RUNNING. A signal raised where Python swallows it (a finalizer: "Exception ignored in …")
    is remembered too.

    Used as a context manager: the handlers are installed inside it (on the main thread only,
    and not for a signal the caller ignores, as SIGINT in a background job).

    A Python handler runs only when the main thread runs Python: one blocked in native code
    (a Ray call on a Ray the signal killed with the driver, as Slurm's SIGTERM to the process
    group does: Ray's client waits 60 s for its GCS, then ends the process, exit 1) never sees
    it. So the signal also wakes a watchdog thread (`signal.set_wakeup_fd`), which, if the grid
    has not stopped STUCK_S seconds later, calls `on_stuck` (the runs in flight marked failed)
    and ends the process with the signal's status.

    Args:
      on_stuck: called from the watchdog with the signal's exception, before the process ends.
    """

    STUCK_S = 30.0

    def __init__(self, on_stuck: Callable[[BaseException], None] = lambda stop: None):
        self.arrived: list[int] = []
        self._raising = False
        self._previous: dict = {}
        self._on_stuck = on_stuck
        self._stopped = threading.Event()
        self._wakeup: tuple[int, int] | None = None  # (our write end, the wakeup fd it replaced)

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._handler)
            if self._previous:
                read_end, write_end = os.pipe()
                os.set_blocking(write_end, False)
                self._wakeup = (write_end, signal.set_wakeup_fd(write_end, warn_on_full_buffer=False))
                threading.Thread(target=self._watch, args=(read_end,), name="signal-watchdog", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopped.set()
        for signum, action in self._previous.items():
            signal.signal(signum, action)
        if self._wakeup is not None:
            write_end, replaced = self._wakeup
            signal.set_wakeup_fd(replaced)
            os.close(write_end)  # the watchdog's read ends

    def _watch(self, read_end: int) -> None:
        """Waits for a signal; ends the process if the grid has not stopped STUCK_S seconds after it."""
        try:
            while True:
                data = os.read(read_end, 1)
                if not data:
                    return  # the grid ended
                if data[0] in (signal.SIGINT, signal.SIGTERM):
                    break
            if self._stopped.wait(self.STUCK_S):
                return
            stop = _interrupt(data[0])
            with contextlib.suppress(BaseException):
                self._on_stuck(stop)
            sys.stderr.write(f"{'terminated (SIGTERM)' if isinstance(stop, Terminated) else 'interrupted'}: the driver "
                             f"was blocked {self.STUCK_S:.0f} s in native code (a Ray the signal ended): the runs in "
                             "flight are marked failed; rerun the same command to resume\n")
            sys.stderr.flush()
            os._exit(128 + data[0])
        finally:
            os.close(read_end)

    def _handler(self, signum, frame) -> None:
        self.arrived.append(signum)
        if self._raising:
            raise _interrupt(signum)

    @contextlib.contextmanager
    def raising(self):
        """A block in which a signal raises at once (the driver waiting for its runs)."""
        self.check()
        with self.raising_new():
            yield

    @contextlib.contextmanager
    def raising_new(self):
        """A block in which a new signal raises at once, one that came before still waiting for the
        next run boundary (the wait for a run's separate ledger check, before it is recorded)."""
        self._raising = True
        try:
            yield
        except KeyboardInterrupt:
            # Ray's wait checks signals itself and raises a plain KeyboardInterrupt for any
            # exception the handler raised: the signal that arrived says which it was.
            if self.arrived:
                raise _interrupt(self.arrived[0]) from None
            raise
        finally:
            self._raising = False

    def check(self) -> None:
        """Raises the first signal that arrived, if any."""
        if self.arrived:
            raise _interrupt(self.arrived[0])


# What `keep` holds: never freed.
_KEPT: list = []


def keep(*objects) -> None:
    """Holds objects for the life of the process. Freeing a Ray reference calls the raylet (its
    object store), and Ray terminates a process whose raylet is gone, status 1: after a signal that
    ended a local Ray with the driver (Slurm's SIGTERM to the process group), the stopped grid's
    references, its exception's frames among them, are kept until the process ends."""
    _KEPT.extend(objects)


def bounded(call: Callable[[], None], seconds: float = 5.0) -> None:
    """call(), given `seconds` to return (in a daemon thread): the executor's clean-up talks to Ray,
    which may be gone, and nothing the grid recorded depends on it."""
    def quietly() -> None:
        with contextlib.suppress(Exception):  # a Ray already gone: there is nothing left to clean
            call()

    worker = threading.Thread(target=quietly, name="executor-clean-up", daemon=True)
    worker.start()
    worker.join(seconds)
