"""One driver at a time on a results folder of an object store: a lease object, renewed.

An object store has no file lock and no create-if-absent in pyarrow.fs, so a
driver writes OUT/.lease.json naming itself, waits SETTLE_S, and reads it back:
a rival that found no lease has written its own by then, and of two writers
the store keeps the last, so both read the same holder and one goes on. The
holder renews the lease every RENEW_S; a lease not renewed for TTL_S is a dead
driver's and may be taken over. This is a lease, not consensus: a driver that
stalls more than SETTLE_S between finding no lease and writing its own could
still meet a rival, and clocks that differ by more than TTL_S misjudge staleness.

A driver that loses its lease (stalled past TTL_S, a rival took over) writes nothing more:
its renewer reads the lease before rewriting it and stops once another holds it, and the
results store checks `held` before every write (`LeaseLost`).
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid

from pipeline.errors import ConfigError, LeaseLost
from pipeline.tracking.location import Location
from pipeline.uris import first_line

LEASE_NAME = ".lease.json"
TTL_S = 120.0  # seconds without renewal after which a lease is a dead driver's
RENEW_S = 20.0  # the holder rewrites its lease this often
SETTLE_S = 1.0  # from writing the lease to reading it back
_READS = 5  # reads of a lease whose body does not parse before it counts as none (Lease._read)


class Lease:
    """The lease of one results folder for this driver.

    Args:
      location: the results folder.
      ttl_s, renew_s, settle_s: see the module's constants (their values when the lease is made).
    """

    def __init__(self, location: Location, ttl_s: float | None = None, renew_s: float | None = None,
                 settle_s: float | None = None):
        self.location, self.path = location, location.path(LEASE_NAME)
        self.ttl_s = TTL_S if ttl_s is None else ttl_s
        self.renew_s = RENEW_S if renew_s is None else renew_s
        self.settle_s = SETTLE_S if settle_s is None else settle_s
        self.holder = uuid.uuid4().hex
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._renewer: threading.Thread | None = None

    def _read(self) -> dict | None:
        """The lease as written, or None if there is none (or it is not one).

        A body that does not parse is read again, up to _READS times: an S3-compatible server
        without atomic overwrites (moto's served 3% of reads torn while a holder renewed) would
        otherwise show a held lease as free.
        """
        for _ in range(_READS):
            try:
                with self.location.filesystem.open_input_stream(self.path) as stream:
                    lease = json.loads(stream.read())
                break
            except FileNotFoundError:
                return None
            except ValueError:
                time.sleep(0.01)
        else:
            return None
        if not isinstance(lease, dict) or "holder" not in lease:
            return None
        renewed = lease.get("renewed")
        if isinstance(renewed, bool) or not isinstance(renewed, (int, float)):
            raise ConfigError("tracking.out", self.location.shown,
                              f"its lease {LEASE_NAME} is not one this pipeline writes (renewed: {type(renewed).__name__}, "
                              "not a time): if no driver records here, delete it and rerun")
        return lease

    def _write(self) -> None:
        lease = {"holder": self.holder, "host": socket.gethostname(), "pid": os.getpid(), "renewed": time.time()}
        self.location.write(self.path, json.dumps(lease).encode())

    def _refuse(self, lease: dict) -> ConfigError:
        return ConfigError("tracking.out", self.location.shown,
                           f"another driver holds this results folder (lease {LEASE_NAME}: host {lease.get('host')}, "
                           f"pid {lease.get('pid')}, renewed {time.time() - lease.get('renewed', 0):.0f} s ago; "
                           f"it is taken over {self.ttl_s:.0f} s after its last renewal); wait for it to end, "
                           "or record into another folder (--out)")

    def live(self) -> dict | None:
        """The lease of a live driver (renewed within TTL_S), or None."""
        held = self._read()
        return held if held is not None and time.time() - held["renewed"] < self.ttl_s else None

    def held(self) -> None:
        """Checks, before a write, that the lease is still this driver's.

        Raises:
          LeaseLost: another driver holds it now (this one stalled past TTL_S), it is gone, or the
            store cannot be reached.
        """
        if self._lost.is_set():
            raise self._lost_error()
        try:
            held = self._read()
        except OSError as error:  # a store that died: nothing can be written there, and none of it is confirmed
            raise LeaseLost(f"results folder {self.location.shown}: its store cannot be reached to confirm this "
                            f"driver's lease ({first_line(error)}); "
                            "nothing more is written there") from None
        if held is None or held["holder"] != self.holder:
            self._lost.set()
            raise self._lost_error()

    def _lost_error(self) -> LeaseLost:
        return LeaseLost(f"results folder {self.location.shown}: this driver lost its lease {LEASE_NAME} (not renewed "
                         f"for {self.ttl_s:.0f} s, another driver took the folder over); it wrote nothing there after "
                         "that, and its runs in flight are the other driver's to record")

    def acquire(self) -> None:
        """Takes the lease and renews it in the background until `release`.

        Raises:
          ConfigError: another live driver holds it.
        """
        held = self.live()
        if held is not None:
            raise self._refuse(held)
        self._write()
        time.sleep(self.settle_s)
        held = self._read()
        if held is None or held["holder"] != self.holder:
            raise self._refuse(held or {})
        self._renewer = threading.Thread(target=self._renew, name="results-lease", daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.renew_s):
            try:
                held = self._read()  # read first: a driver woken past TTL_S must not overwrite its successor's
                if held is None or held["holder"] != self.holder:
                    self._lost.set()
                    return
                self._write()
            except Exception:  # a store that is briefly unreachable: the next renewal tries again
                pass

    def release(self) -> None:
        """Stops renewing and deletes the lease if it is still this driver's."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        if self._lost.is_set():
            return  # the successor's lease: not ours to delete
        try:
            held = self._read()
            if held is not None and held["holder"] == self.holder:
                self.location.filesystem.delete_file(self.path)
        except (OSError, ConfigError):  # a store that died: the lease expires by itself after TTL_S
            pass
