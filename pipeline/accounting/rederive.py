"""A run's ledger checked where no plug-in reaches: its JSON is rebuilt from the events it
lists and composed again in a separate Python process that imports this package's
accountants and nothing else (no plug-in module, no config), so that a plug-in that
patches the ledger or an accountant in the driver cannot make a run report less than it
spent, or pass its target unchecked (issue 29, item 1).

The process is started once per driver, at the first check, and answers one JSON line
per ledger for the driver's life: its start-up (about 1.5 s of imports) is paid once.

Run as `python -m pipeline.accounting.rederive`: ledger JSON lines in, verdict lines out.
"""
from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
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


class Rederiver:
    """The driver's side: sends a ledger to the separate process and reads its verdict."""

    def __init__(self):
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()  # one question at a time on the pipe

    def __call__(self, data: dict) -> dict:
        """The separate process's verdict on a ledger JSON (see `verdict`).

        Raises:
          RuntimeError: the process died or answered nothing.
        """
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._process = self._start()
            process = self._process
            process.stdin.write(json.dumps(data) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        if not line:
            self.close()
            raise RuntimeError(f"the ledger's re-derivation process ended (exit {process.wait()})")
        return json.loads(line)

    @staticmethod
    def _start() -> subprocess.Popen:
        # The package's own folder first on the path: the process imports this copy of it
        # (a Ray job's working directory included), and no module the driver has loaded.
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
        return subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env, cwd=root)

    def close(self) -> None:
        """Ends the process (its stdin closed: it exits after its last answer)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.stdin.close()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()


rederive = Rederiver()
atexit.register(rederive.close)


def main() -> None:
    for line in sys.stdin:
        print(json.dumps(verdict(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
