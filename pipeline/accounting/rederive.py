"""A run's ledger checked where no plug-in reaches: its JSON is rebuilt from the events it
lists and composed again in a separate Python process that imports this package's
accountants and nothing else (no plug-in module, no config), so that a plug-in that
patches the ledger or an accountant in the driver cannot make a run report less than it
spent, or pass its target unchecked (issue 29, item 1).

The process is started once per driver, when a grid with runs to record starts (or at the
first check), and answers each ledger for the driver's life: its start-up (about 1.5 s of
imports) is paid once, beside the grid's own planning. It runs isolated
(`python -I`: no PYTHONPATH, no user site, no current folder on its path, so no
`sitecustomize` a caller's environment slips in), and answers on a pipe of its own, each
answer carrying the question's random nonce: a line printed on its stdout by anything else
is never taken for a verdict (issue 46). The driver waits for an answer a bounded time
(`TIMEOUT_S`) and kills a process that gives none.

What it promises: a ledger that a plug-in (or a bug) changed in the driver is caught, as
long as the driver's own check runs. A hostile plug-in runs in the driver and can disable
that check too; `pipeline.results.load` (`verify`) re-derives a results folder's ledgers
the same way in a process of its own, where no plug-in runs.

Run as `python -I -m pipeline.accounting.rederive FD`: framed questions on stdin, answers on
file descriptor FD.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import secrets
import select
import subprocess
import sys
import threading
import time
from pathlib import Path


def verdict(data: dict) -> dict:
    """A ledger JSON's verdict, computed here (call it in the separate process).

    Args:
      data: a `PrivacyLedger.to_dict()` as read back from JSON.

    Returns:
      {"same": whether the rebuilt ledger writes this JSON again, "epsilon", "delta": its
      total in the run's mode, "within_target": whether that meets the target}; or
      {"error": why it cannot be rebuilt}.
    """
    from pipeline.accounting.ledger import LedgerError, PrivacyLedger

    try:
        ledger = PrivacyLedger.from_dict(data)
    except (LedgerError, KeyError, TypeError, ValueError) as error:
        return {"error": f"{type(error).__name__}: {error}"}
    epsilon, delta = ledger.total()
    again = json.loads(json.dumps(ledger.to_dict()))
    return {"same": again == data, "epsilon": epsilon, "delta": delta,
            "within_target": epsilon <= ledger.target[0] and delta <= ledger.target[1]}


TIMEOUT_S = 600.0  # a verdict takes seconds (the ledgers' curves, once per process); a stalled process ends here


class Rederiver:
    """The driver's side: sends a ledger to the separate process and reads its verdict."""

    def __init__(self):
        self._process: subprocess.Popen | None = None
        self._answers = None  # the read end of the process's answer pipe
        self._asked = False  # whether the running process was asked anything (else it is killed on close)
        self._lock = threading.Lock()  # one question at a time on the pipe

    def start(self) -> None:
        """Starts the process now unless it runs, so that its imports overlap the caller's work
        (a grid's planning and runs) instead of delaying the first check."""
        with self._lock:
            self._started()

    def _started(self) -> None:
        """The process, started if it is not running (the caller holds the lock)."""
        if self._process is None or self._process.poll() is not None:
            self._start()
            self._asked = False

    def __call__(self, data: dict, timeout: float = TIMEOUT_S) -> dict:
        """The separate process's verdict on a ledger JSON (see `verdict`).

        Args:
          data: a `PrivacyLedger.to_dict()`.
          timeout: seconds to wait for the answer.

        Raises:
          RuntimeError: the process died, answered nothing within `timeout` (it is killed), or
            answered another question.
          KeyboardInterrupt: a signal handler raised while waiting (the process is ended).
        """
        with self._lock:
            self._started()
            self._asked = True
            nonce = secrets.token_hex(16)
            try:
                self._process.stdin.write(json.dumps({"nonce": nonce, "ledger": data}) + "\n")
                self._process.stdin.flush()
                line = self._answer(timeout)
            except BaseException:  # a half-asked question: the pipe's state is unknown, start afresh next time
                self.close(kill=True)
                raise
        tag, _, answer = line.partition(" ")
        if tag != nonce:
            self.close(kill=True)
            raise RuntimeError("the ledger's re-derivation process answered another question")
        return json.loads(answer)

    def _answer(self, timeout: float) -> str:
        """The next line on the answer pipe, waiting at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        buffered = b""
        while not buffered.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"the ledger's re-derivation process gave no answer within {timeout:g} s")
            ready, _, _ = select.select([self._answers], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self._answers, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"the ledger's re-derivation process ended (exit {self._process.wait()})")
                buffered += chunk
        return buffered.decode()

    def _start(self) -> None:
        # The package's own folder first on the path: the process imports this copy of it (a Ray
        # job's working directory included), and no module the driver has loaded.
        root = str(Path(__file__).resolve().parents[2])
        read_end, write_end = os.pipe()
        code = f"import sys; sys.path.insert(0, {root!r}); from pipeline.accounting.rederive import main; main({write_end})"
        try:
            self._process = subprocess.Popen([sys.executable, "-I", "-c", code], stdin=subprocess.PIPE,
                                             stdout=subprocess.DEVNULL, text=True, cwd=root, pass_fds=(write_end,))
        finally:
            os.close(write_end)
        self._answers = read_end

    def close(self, kill: bool = False) -> None:
        """Ends the process: its stdin closed, it exits after its last answer (killed at once if
        `kill`, or if it was never asked: started ahead for a grid that recorded nothing)."""
        process, self._process = self._process, None
        answers, self._answers = self._answers, None
        if process is not None and process.poll() is None:
            if kill or not self._asked:
                process.kill()
            else:
                process.stdin.close()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if answers is not None:
            os.close(answers)


rederive = Rederiver()
atexit.register(rederive.close)


def main(answer_fd: int) -> None:
    """Answers each question on stdin ({"nonce", "ledger"}) with "nonce verdict-JSON" on `answer_fd`.

    A verdict is a function of the ledger's JSON alone, so one already given is given again without
    composing the ledger again (a grid point's seeds write the same ledger), its answer marked
    `answered_before`: kept here, in the process no plug-in reaches, by the SHA-256 of the JSON's
    canonical text (a grid of thousands of points keeps a small verdict each, not its ledger).
    """
    import pipeline.accounting.ledger  # noqa: F401  (its imports, about 1.5 s, before the first question)

    given: dict[str, dict] = {}
    with os.fdopen(answer_fd, "w") as answers:
        for line in sys.stdin:
            question = json.loads(line)
            key = hashlib.sha256(json.dumps(question["ledger"], sort_keys=True).encode()).hexdigest()
            before = key in given
            if not before:
                given[key] = verdict(question["ledger"])
            answers.write(f"{question['nonce']} {json.dumps({**given[key], 'answered_before': before})}\n")
            answers.flush()


if __name__ == "__main__":
    main(int(sys.argv[1]))
