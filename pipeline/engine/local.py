"""In-process shards: bit-identical to Ray, for tests and small runs."""
from __future__ import annotations

from pipeline.engine.job import RunJob
from pipeline.engine.pool import ShardPool
from pipeline.engine.shard import Shard


class LocalPool(ShardPool):
    """Shards as plain objects in the driver's process."""

    def __init__(self, job: RunJob, shards: int):
        super().__init__(job, shards)
        self.shards = [Shard(job, first, stop, heldout)
                       for (first, stop), heldout in zip(self.shard_blocks, self.heldout_blocks)]

    def call_all(self, method, *args):
        return [getattr(shard, method)(*args) for shard in self.shards]

    def run_rounds(self, shard, state, start, stop):
        return self.shards[shard].run_rounds(state, start, stop)

    def total_counts(self, plan, params, theta):
        return self.shards[0].merge(*[shard.partial_counts(plan, params, theta) for shard in self.shards])

    def shuffle_messages(self, plan, params, theta):
        destinations = len(self.shards)
        scattered = [shard.literal_scatter(plan, params, theta, destinations) for shard in self.shards]
        return [
            shard.literal_gather(plan.round, *[sent[d] for sent in scattered])
            for d, shard in enumerate(self.shards)
        ]
