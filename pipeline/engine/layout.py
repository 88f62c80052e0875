"""Users in fixed-size blocks, shards as groups of blocks, and the random
streams keyed by (round, block): what makes results bit-identical for any
number of shards and for local vs Ray (shared/DESIGN.md §4)."""
from __future__ import annotations

import dataclasses

import numpy as np

# Independent streams of one run's SeedSequence, by spawn key.
DATA_STREAM = 0  # (DATA_STREAM, block): the block's users' data points
ROUND_STREAM = 1  # (ROUND_STREAM, round, block): the randomizers of a round
SCATTER_STREAM = 2  # (SCATTER_STREAM, round, shard): literal shuffle, stage 1
PERMUTE_STREAM = 3  # (PERMUTE_STREAM, round, shard): literal shuffle, stage 2


def stream(seed: int, *key: int) -> np.random.Generator:
    """The generator of one (stream, ...) key of the run seeded by `seed`.

    Args:
      seed: the run's seed (the entropy of its SeedSequence).
      *key: the spawn key, e.g. (ROUND_STREAM, round, block).

    Returns:
      A PCG64 generator independent of every other key's.
    """
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


@dataclasses.dataclass(frozen=True)
class BlockLayout:
    """Users 0..n−1 in blocks of `block_size` (the last may be shorter)."""

    n_users: int
    block_size: int

    @property
    def n_blocks(self) -> int:
        return -(-self.n_users // self.block_size)

    def block_users(self, block: int) -> tuple[int, int]:
        """The users [first, stop) of a block."""
        first = block * self.block_size
        return first, min(first + self.block_size, self.n_users)

    def blocks_overlapping(self, first_user: int, stop_user: int) -> range:
        """The blocks holding any of the users [first_user, stop_user)."""
        if stop_user <= first_user:
            return range(0)
        return range(first_user // self.block_size, (stop_user - 1) // self.block_size + 1)

    def shard_blocks(self, shards: int) -> list[tuple[int, int]]:
        """Splits the blocks into at most `shards` non-empty contiguous groups.

        Args:
          shards: the requested number of shards.

        Returns:
          [(first_block, stop_block), ...], in user order.
        """
        count = min(shards, self.n_blocks)
        bounds = [round(i * self.n_blocks / count) for i in range(count + 1)]
        return [(bounds[i], bounds[i + 1]) for i in range(count)]
