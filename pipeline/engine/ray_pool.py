"""Shards as Ray actors: data generated and kept in each actor, θ broadcast,
O(d) statistics (or, in literal mode, shuffled messages) gathered."""
from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import sys
import time
import types

import ray
from ray import cloudpickle
from ray.util.queue import Queue
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from pipeline.engine.job import EXACT, RunJob
from pipeline.engine.local import LocalPool
from pipeline.engine.pool import ShardPool
from pipeline.engine.shard import Shard
from pipeline.errors import ConfigError
from pipeline.uris import first_line



def ship_plugins(job: RunJob) -> None:
    """Makes the job's plug-in classes (defined outside this package) travel
    with it by value, so that workers need not import their modules: a
    one-file plug-in runs on a cluster without being installed there.

    Called wherever the job is pickled again (driver, run task, shard actors):
    a class that arrived by value has no module there, so a stand-in module is
    registered under its name to keep it travelling by value. The optimizer's compiled
    stages and the problem's compiled twin are named too, and the classes the plug-ins' methods
    name (a protocol's fused encoding): numba's cached kernel that calls them loads by their
    module's name, and its key names the twin's and the encoding's classes in that module."""
    updates = (stepper.compiled_update() for stepper in job.optimizer.steppers())
    stages = (stage for update in updates if update is not None for stage in (update.query, update.step, update.release))
    twin = job.problem.unsmoothed.compiled_problem()
    ship_by_value((job.problem.unsmoothed, job.optimizer, job.protocol, *stages, *(() if twin is None else (twin,))))


def ship_by_value(objects) -> None:
    """Makes the classes of `objects` (or the functions among them) that are defined outside
    this package travel by value."""
    for obj in objects:
        kind = obj if isinstance(obj, types.FunctionType) else type(obj)
        if kind.__module__.split(".")[0] == __name__.split(".")[0]:
            continue
        module = sys.modules.setdefault(kind.__module__, types.ModuleType(kind.__module__))
        cloudpickle.register_pickle_by_value(module)
        for name, named in {kind.__qualname__: kind, **_module_classes(kind)}.items():
            if "." not in name and not hasattr(module, name):
                setattr(module, name, named)  # a stand-in: what pickles by name (numba's keys) finds it


def _module_classes(kind: type) -> dict[str, type]:
    """The classes of `kind`'s module that its methods name (a protocol's fused encoding, whose
    kernel's cache key names it): arrived by value in their globals where the module is a stand-in."""
    found = {}
    for attribute in vars(kind).values():
        for name, value in getattr(getattr(attribute, "__func__", attribute), "__globals__", {}).items():
            if isinstance(value, type) and value.__module__ == kind.__module__:
                found[name] = value
    return found


class _RayShard(Shard):
    """A shard in a Ray actor: it keeps plug-in classes travelling by value."""

    def __init__(self, job: RunJob, first_block: int, stop_block: int, heldout_blocks: tuple[int, int]):
        ship_plugins(job)
        super().__init__(job, first_block, stop_block, heldout_blocks)


# A shard actor that dies (node loss, OOM kill) is restarted: its constructor
# regenerates the users from the run's seed, and the interrupted call is
# retried. Rounds are pure functions of (state, rounds) and of streams keyed by
# (round, block), so the retried result is bit-identical.
ShardActor = ray.remote(max_restarts=3, max_task_retries=3)(_RayShard)


# ray.init's address for a Ray instance of the run's own, whatever else runs on the machine.
LOCAL = "local"
# (address given to ray.init, GCS address reached) when ensure_ray started or joined Ray; else None.
_joined: tuple[str, str] | None = None


def ray_address() -> str:
    """The Ray a run uses: the cluster that RAY_ADDRESS names (as `ray job submit`
    sets it), else LOCAL, a new instance of the run's own.

    Never None, which makes ray.init join any cluster that `ray start` left
    running on the machine (another user's, or one without the run's code).
    """
    return os.environ.get("RAY_ADDRESS", "").strip() or LOCAL


# Seconds to wait for a cluster's GCS port before calling it unreachable (ray.init itself
# waits minutes for an address nobody answers, and then hangs).
PROBE_S = 5.0


def _unreachable(address: str, seconds: float = PROBE_S) -> str | None:
    """Why a cluster address's GCS port refuses a TCP connection, or None (it answers, or the
    address is one Ray resolves itself: "auto", a name without a port)."""
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not port.isdigit():
        return None
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as error:
        return f"nothing answers at {host}:{port} within {seconds:g} s ({type(error).__name__})"
    return None


def _no_ray(address: str, cause: str) -> ConfigError:
    """The one line for a Ray that could not start, or a cluster that could not be reached."""
    if address == LOCAL:
        return ConfigError("execution.backend", "ray", f"a local Ray instance could not start: {cause}; run with "
                           "execution.backend: local, or set RAY_ADDRESS to a running Ray cluster")
    return ConfigError("RAY_ADDRESS", address, f"the Ray cluster could not be reached: {cause}; start it or correct "
                       "RAY_ADDRESS, or unset it and run with execution.backend: local")


def ensure_ray() -> None:
    """Starts or joins the Ray of ray_address(), once per process; a Ray the
    process already has (a notebook's, the tests') is used as it is.

    Raises:
      ConfigError: Ray could not start (a local instance) or be reached (RAY_ADDRESS), one line
        naming the two ways out.
    """
    global _joined
    if not ray.is_initialized():
        address = ray_address()
        cause = None if address == LOCAL else _unreachable(address)
        if cause is None:
            try:
                ray.init(address=address, include_dashboard=False, logging_level=logging.ERROR, configure_logging=True)
            except Exception as error:  # a start that timed out (under load), a cluster that refused the driver
                cause = f"{type(error).__name__}: {first_line(error)}"
                with contextlib.suppress(Exception):
                    ray.shutdown()
        if cause is not None:
            raise _no_ray(address, cause)
        _joined = (address, ray.get_runtime_context().gcs_address)


def describe() -> str:
    """One line saying which Ray the runs use and its CPUs, e.g.
    "Ray: a new local instance, 2 CPUs"; starts or joins it first if needed."""
    ensure_ray()
    cpus = int(ray.cluster_resources().get("CPU", 0))
    address, gcs_address = _joined or (None, None)
    if gcs_address is None or gcs_address != ray.get_runtime_context().gcs_address:
        where = "the instance this process had already started or joined"
    elif address == LOCAL:
        where = "a new local instance (set RAY_ADDRESS to use a cluster)"
    else:
        where = f"the cluster at RAY_ADDRESS={address}"
    return f"Ray: {where}, {cpus} CPU{'s' if cpus != 1 else ''}"


# Set SHUFFLE_SCO_COMPILED=0 to run fanned-out rounds as plain actor calls (same results).
COMPILED = os.environ.get("SHUFFLE_SCO_COMPILED", "1") != "0"
REBUILDS = 3  # a compiled round that fails (a shard died) is retried on a rebuilt graph this often
PLAIN_FANOUTS = 8  # fan-outs made with plain calls before compiling: a graph costs 0.2–0.6 s to build


class CompiledRound:
    """The exact-mode fan-out round as a Ray Compiled Graph, compiled once per run:
    θ and the round plan go to every shard, each returns its partial statistic,
    the partials are added in a tree among the shards, and the driver receives the
    total. Executing it costs a fraction of a millisecond, against a few for the
    same plain actor calls (bench/scaling.py, `fanout_round_overhead_ms`).

    A shard that dies mid-round (restarted by Ray, max_restarts) breaks the graph's
    channels: the graph is torn down, rebuilt once every shard answers again, and
    the round runs again. A round is a pure function of (state, round) and of
    streams keyed by (round, block), so the retried round is bit-identical.

    Args:
      actors: the run's shard actors, in shard order.
    """

    def __init__(self, actors: list):
        self.actors = actors
        self.graph = None
        self.builds = 0  # how often the graph was compiled (1, plus one per rebuild)

    def build(self) -> None:
        """Compiles the graph (Ray sets up a channel per edge, in the actors)."""
        from ray.dag import InputNode

        with InputNode() as round_input:
            level = [(index, actor.partial_counts.bind(round_input[0], round_input[1], round_input[2]))
                     for index, actor in enumerate(self.actors)]
            while len(level) > 1:  # a tree: shard i adds its partial to shard i + stride's
                level = [(level[i][0], self.actors[level[i][0]].merge.bind(level[i][1], level[i + 1][1]))
                         if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
            total = level[0][1] if len(self.actors) > 1 else self.actors[0].merge.bind(level[0][1])
        self.graph = total.experimental_compile()
        self.builds += 1

    def __call__(self, plan, params, theta):
        """The round's total over every shard.

        Raises:
          ray.exceptions.RayError: the round still failed after REBUILDS rebuilt graphs.
        """
        for attempt in range(REBUILDS + 1):
            if self.graph is None:
                self.build()
            try:
                return ray.get(self.graph.execute(plan, params, theta))
            except ray.exceptions.RayError:
                if attempt == REBUILDS:
                    raise
                self.close()
                ray.get([actor.users.remote() for actor in self.actors])  # waits out a restarting shard

    def close(self) -> None:
        """Tears the graph down (the actors stay)."""
        if self.graph is not None:
            graph, self.graph = self.graph, None
            logger = logging.getLogger("ray.dag.compiled_dag_node")
            level = logger.level
            logger.setLevel(logging.CRITICAL)  # a broken graph's teardown logs each dead channel
            try:
                graph.teardown()
            except Exception:
                pass  # a dead shard's channels cannot be closed cleanly; the graph is dropped anyway
            finally:
                logger.setLevel(level)


class RayPool(ShardPool):
    """One actor per shard; each asks for an equal share of the cluster's CPUs
    (at most one), so any shard count can be scheduled. The shares are
    reserved together in a placement group: runs sharing a cluster get all
    their shards or wait, never half of them (which could deadlock)."""

    def __init__(self, job: RunJob, shards: int):
        super().__init__(job, shards)
        ensure_ray()
        ship_plugins(job)
        cpus = ray.cluster_resources().get("CPU", 1.0)
        # Ray resolves fractions to 1e-4; round down so the shares fit the cluster.
        per_actor = math.floor(min(1.0, cpus / len(self.shard_blocks)) * 1e4) / 1e4
        self._group = placement_group([{"CPU": per_actor}] * len(self.shard_blocks), strategy="SPREAD")
        self.actors = []
        try:
            ray.get(self._group.ready())
            self.actors = [
                ShardActor.options(
                    num_cpus=per_actor,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(self._group, placement_group_bundle_index=index),
                ).remote(job, first, stop, heldout)  # the job is small: inline, so a restart never loses it
                for index, ((first, stop), heldout) in enumerate(zip(self.shard_blocks, self.heldout_blocks))
            ]
            # Wait for every actor to have generated (or read) the users it holds, so a failure
            # there surfaces here; a sequential run's shards draw each block when its round asks.
            ray.get([actor.users.remote() for actor in self.actors])
            self._fanouts = 0
            self.compiled_round = CompiledRound(self.actors) if COMPILED and job.simulation == EXACT else None
            if (self.compiled_round is not None and job.schedule.rounds > PLAIN_FANOUTS
                    and self.owner(job.schedule.plan(0)) is None):
                # Fully interactive from the first round: compile with the shards' set-up. A short run,
                # or one whose rounds are carried (sequential), compiles only if it fans out often.
                self.compiled_round.build()
        except BaseException:
            self.close()  # release the reservation, or later runs could starve
            raise

    def run_rounds(self, shard, state, start, stop):
        state, records = ray.get(self.actors[shard].run_rounds.remote(state, start, stop))
        # The columns arrive as views of the object store's copy: copied out, the store frees the
        # trip's object now instead of holding every trip's until the records are joined (at 10⁹
        # users that doubled the records' memory, 3.3 GB of shared memory).
        return state, records.copy()

    def total_counts(self, plan, params, theta):
        self._fanouts += 1
        if self.compiled_round is not None and (self.compiled_round.graph is not None or self._fanouts > PLAIN_FANOUTS):
            return self.compiled_round(plan, params, theta)
        theta_ref = ray.put(theta)
        # The partials stay in the object store; one shard adds them up.
        partials = [actor.partial_counts.remote(plan, params, theta_ref) for actor in self.actors]
        return ray.get(self.actors[0].merge.remote(*partials))

    def call_all(self, method, *args):
        refs = [ray.put(arg) for arg in args]
        return ray.get([getattr(actor, method).remote(*refs) for actor in self.actors])

    def shuffle_messages(self, plan, params, theta):
        destinations = len(self.actors)
        theta_ref = ray.put(theta)
        scattered = [
            actor.literal_scatter.options(num_returns=destinations).remote(plan, params, theta_ref, destinations)
            for actor in self.actors
        ]
        if destinations == 1:
            scattered = [[refs] for refs in scattered]
        gathered = [
            actor.literal_gather.remote(plan.round, *[sent[d] for sent in scattered])
            for d, actor in enumerate(self.actors)
        ]
        return ray.get(gathered)

    def close(self) -> None:
        if getattr(self, "compiled_round", None) is not None:
            self.compiled_round.close()
        for actor in self.actors:
            ray.kill(actor)
        remove_placement_group(self._group)


# A run whose users send fewer user-coordinates than this, over all its rounds, and hold fewer,
# runs in its own task, its shards as objects there (pipeline.engine.local: the same results),
# instead of on shard actors of its own: starting them took 1.3–2.2 s of a run whose compute
# takes milliseconds. 2²² is about a second of numpy. SHUFFLE_SCO_TASK_WORK sets it (0: always actors).
TASK_WORK = int(os.environ.get("SHUFFLE_SCO_TASK_WORK", 2**22))
# A run below this runs in the driver: a task's own cost (the job serialised, scheduled, its records
# returned: about 10 ms on 2 cores) is more than its compute, a few ms. SHUFFLE_SCO_DRIVER_WORK sets it
# (0: every run in a task).
DRIVER_WORK = int(os.environ.get("SHUFFLE_SCO_DRIVER_WORK", 2**16))


def _work(job: RunJob) -> float:
    """A run's size: the user-coordinates its users send over all its rounds, or hold if more."""
    sent = sum(group.rounds * group.users for group in job.schedule.groups)
    return max(sent, job.n_users * job.records.mean) * job.problem.data_dim


def in_one_task(job: RunJob) -> bool:
    """Whether a run is small enough to run in one task (TASK_WORK), not on shard actors."""
    return _work(job) <= TASK_WORK


def in_driver(job: RunJob) -> bool:
    """Whether a run is small enough to run in the driver (DRIVER_WORK), not in a task."""
    return _work(job) < DRIVER_WORK


def _run_job(job: RunJob, shards: int, key=None, progress: Queue | None = None, in_task: bool = False):
    """A whole run (as one task: `_execute`): its shard actors hold the CPUs, or with `in_task` its
    shards are objects in this process (a task then asks for a CPU itself: submit).

    Args:
      job, shards: the run.
      key: the run's key, sent with its progress.
      progress: where (key, rounds done, rounds, seconds) go, about once a second.
      in_task: the run's shards live in this task (`in_one_task`, decided by the driver).

    Returns:
      (state, records, seconds), the seconds counted from when the run's
      shards were placed (queueing behind other runs is not the run's time).
    """
    ship_plugins(job)  # the plug-ins' stand-in modules, here too: a cached kernel loads by their names
    pool = (LocalPool if in_task else RayPool)(job, shards)
    began = time.perf_counter()
    told = None if progress is None else _BestEffort(
        lambda done, total: progress.put_nowait((key, done, total, time.perf_counter() - began)))
    try:
        return (*pool.run(told), time.perf_counter() - began)
    finally:
        pool.close()


# A failed run is redone by a rerun, not behind the driver's back.
_execute = ray.remote(num_cpus=0, max_retries=0)(_run_job)


class _BestEffort:
    """Calls `tell` until the first Ray error, then never again: progress is a note to
    the user, and a lost note (its queue's node died) must not fail a run or the grid."""

    def __init__(self, tell):
        self.tell = tell

    def __call__(self, *args) -> None:
        if self.tell is None:
            return
        try:
            self.tell(*args)
        except ray.exceptions.RayError as err:
            self.tell = None
            logging.getLogger(__name__).warning("progress notes stopped: %s", first_line(err))


# Ray objects of this process's stopped grids, never freed: freeing a reference calls the raylet (its
# object store), and Ray terminates a process whose raylet is gone, status 1, as after a signal that
# ended a local Ray with the driver (Slurm's SIGTERM to the process group). See interrupts.keep.
_KEPT: list = []


class RayExecutor:
    """Runs jobs concurrently on the cluster, each as one task.

    Args:
      progress: told how far each run in flight got; the runs send it through a queue
        actor that the driver drains while it waits.
    """

    CAPACITY_S = 10.0  # an autoscaled cluster's new nodes are used within this

    def __init__(self, progress=None):
        ensure_ray()
        self._pending: dict = {}
        self._done: list = []  # (key, outcome) of the runs executed in the driver, not yet asked for
        self._capacity, self._capacity_until = 2, 0.0
        self._queue = self._drain = None
        if progress is not None:
            # The queue lives on the driver's node: a worker node that dies takes its runs'
            # shards (restarted by Ray) but never the driver's way of hearing from them.
            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            self._queue = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": here})
            self._drain = _BestEffort(lambda: [progress(*told) for told in
                                               self._queue.get_nowait_batch(self._queue.qsize())])

    def capacity(self) -> int:
        """How many runs to keep in flight: the cluster's CPUs, at least 2, asked of the GCS at most
        every CAPACITY_S seconds (a GCS call on a Ray that a signal ended blocks in native code)."""
        if time.monotonic() >= self._capacity_until:
            self._capacity = max(2, int(ray.cluster_resources().get("CPU", 1)))
            self._capacity_until = time.monotonic() + self.CAPACITY_S
        return self._capacity

    def submit(self, key, job: RunJob, shards: int) -> None:
        """Starts a run: a tiny one here and now (`in_driver`), a small one in a task of one CPU
        (`in_one_task`), else on shard actors (the task itself holds no CPU: its actors do). Ray
        packs the grid's tasks onto the cluster's nodes by the CPUs they ask for."""
        if in_driver(job):
            try:
                self._done.append((key, _run_job(job, shards, in_task=True)))
            except Exception as err:  # the run's error, reported for that run only
                self._done.append((key, err))
            return
        ship_plugins(job)
        in_task = in_one_task(job)
        task = _execute.options(num_cpus=1 if in_task else 0)
        self._pending[task.remote(job, shards, key, self._queue, in_task)] = key

    def next_done(self):
        """Waits for a run: (key, (state, records, seconds)) or (key, the exception); meanwhile
        passes the runs' progress on."""
        if self._done:
            return self._done.pop(0)
        while True:
            ready, _ = ray.wait(list(self._pending), num_returns=1, timeout=None if self._queue is None else 0.5)
            if self._drain is not None:
                self._drain()
            if ready:
                break
        ref = ready[0]
        key = self._pending.pop(ref)
        try:
            return key, ray.get(ref)
        except Exception as err:  # the run's error, reported for that run only
            return key, getattr(err, "cause", None) or err

    def in_flight(self) -> int:
        return len(self._pending) + len(self._done)

    def cancel(self) -> None:
        """Cancels the runs in flight; their references are never freed (`_KEPT`)."""
        pending, self._pending, self._done = self._pending, {}, []
        _KEPT.append(pending)
        for ref in pending:
            ray.cancel(ref, force=True)

    def close(self) -> None:
        """Ends the progress queue's actor (a process of its own); its handle is kept as cancel's are."""
        if self._queue is not None:
            _KEPT.append(self._queue)
            self._queue.shutdown(force=True)
            self._queue = None
