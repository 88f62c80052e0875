"""Shards as Ray actors: data generated and kept in each actor, θ broadcast,
O(d) statistics (or, in literal mode, shuffled messages) gathered."""
from __future__ import annotations

import logging
import math
import os
import sys
import time
import types

import ray
from ray import cloudpickle
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from pipeline.engine.job import RunJob
from pipeline.engine.pool import ShardPool
from pipeline.engine.shard import Shard



def ship_plugins(job: RunJob) -> None:
    """Makes the job's plug-in classes (defined outside this package) travel
    with it by value, so that workers need not import their modules: a
    one-file plug-in runs on a cluster without being installed there.

    Called wherever the job is pickled again (driver, run task, shard actors):
    a class that arrived by value has no module there, so a stand-in module is
    registered under its name to keep it travelling by value."""
    for obj in (job.problem.unsmoothed, job.optimizer, job.protocol):
        name = type(obj).__module__
        if name.split(".")[0] == __name__.split(".")[0]:
            continue
        module = sys.modules.setdefault(name, types.ModuleType(name))
        cloudpickle.register_pickle_by_value(module)


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


def ensure_ray() -> None:
    """Connects to the cluster in RAY_ADDRESS (e.g. under `ray job submit`),
    or starts a local Ray instance, once per process."""
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False,
                 logging_level=logging.ERROR, configure_logging=True)


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
            # Wait for every actor to have generated its users, so a failure in
            # data generation surfaces here and rounds time only rounds.
            ray.get([actor.users.remote() for actor in self.actors])
        except BaseException:
            self.close()  # release the reservation, or later runs could starve
            raise

    def run_rounds(self, shard, state, start, stop):
        return ray.get(self.actors[shard].run_rounds.remote(state, start, stop))

    def total_counts(self, plan, params, theta):
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
        for actor in self.actors:
            ray.kill(actor)
        remove_placement_group(self._group)


@ray.remote(num_cpus=0, max_retries=0)  # a failed run is redone by a rerun, not behind the driver's back
def _execute(job: RunJob, shards: int):
    """A whole run as one task; its shard actors hold the CPUs.

    Returns:
      (state, records, seconds), the seconds counted from when the run's
      shards were placed (queueing behind other runs is not the run's time).
    """
    pool = RayPool(job, shards)
    began = time.perf_counter()
    try:
        return (*pool.run(), time.perf_counter() - began)
    finally:
        pool.close()


class RayExecutor:
    """Runs jobs concurrently on the cluster, each as one task."""

    def __init__(self):
        ensure_ray()
        self._pending: dict = {}

    def capacity(self) -> int:
        """How many runs to keep in flight: the cluster's CPUs, at least 2."""
        return max(2, int(ray.cluster_resources().get("CPU", 1)))

    def submit(self, key, job: RunJob, shards: int) -> None:
        ship_plugins(job)
        self._pending[_execute.remote(job, shards)] = key

    def next_done(self):
        """Waits for a run: (key, (state, records, seconds)) or (key, the exception)."""
        (ref,), _ = ray.wait(list(self._pending), num_returns=1)
        key = self._pending.pop(ref)
        try:
            return key, ray.get(ref)
        except Exception as err:  # the run's error, reported for that run only
            return key, getattr(err, "cause", None) or err

    def in_flight(self) -> int:
        return len(self._pending)

    def cancel(self) -> None:
        for ref in self._pending:
            ray.cancel(ref, force=True)
        self._pending.clear()
