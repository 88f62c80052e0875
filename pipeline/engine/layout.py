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
SAMPLE_STREAM = 4  # (SAMPLE_STREAM, round[, block]): who of a sampled round's population answers
NOISE_STREAM = 5  # (NOISE_STREAM, round): a central curator's noise, added to the merged total


def stream(seed: int, *key: int) -> np.random.Generator:
    """The generator of one (stream, ...) key of the run seeded by `seed`.

    Args:
      seed: the run's seed (the entropy of its SeedSequence).
      *key: the spawn key, e.g. (ROUND_STREAM, round, block).

    Returns:
      A PCG64 generator independent of every other key's.
    """
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


class LazyStream:
    """`stream(seed, *key)`, built on first use: the curator's noise stream is passed to
    every round's `finish`, and most protocols draw nothing from it, while building a
    generator (SeedSequence, PCG64) costs about 20 µs, a tenth of a small sequential round.

    Args:
      seed: the run's seed.
      *key: the spawn key, e.g. (NOISE_STREAM, round).
    """

    __slots__ = ("_key", "generator")

    def __init__(self, seed: int, *key: int):
        self._key = (seed, *key)
        self.generator: np.random.Generator | None = None

    def __getattr__(self, name: str):
        # Called only for what the proxy itself lacks: the generator's methods and attributes.
        if self.generator is None:
            self.generator = stream(*self._key)
        return getattr(self.generator, name)


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


def sampled_users(layout: BlockLayout, seed: int, plan, blocks: range) -> dict[int, np.ndarray]:
    """The users of a sampled round that live in `blocks`, drawn so that the
    draw is the same whichever blocks (shard) ask.

    Uniform (k of the population, without replacement): how many fall in each
    block is one multivariate hypergeometric draw keyed by the round, shared by
    all shards; which users of a block is a uniform subset keyed by (round,
    block). Together a uniform k-subset. Poisson: a Binomial(block users, q)
    count and a uniform subset of that size per block, i.e. independent
    Bernoulli(q) memberships.

    Args:
      layout: the run's blocks.
      seed: the run's seed.
      plan: the round (sampling "uniform" or "poisson", population [first_user, stop_user)).
      blocks: the blocks asked about.

    Returns:
      block → sorted user ids of the sample in that block (absent: none).
    """
    population = layout.blocks_overlapping(plan.first_user, plan.stop_user)

    def span(block: int) -> tuple[int, int]:
        first, stop = layout.block_users(block)
        return max(first, plan.first_user), min(stop, plan.stop_user)

    if plan.sampling == "uniform":
        sizes = np.array([stop - first for first, stop in map(span, population)], dtype=np.int64)
        counts = dict(zip(population, stream(seed, SAMPLE_STREAM, plan.round).multivariate_hypergeometric(
            sizes, plan.sample_size, method="marginals" if sizes.sum() > 10**6 else "count")))
    chosen = {}
    for block in blocks:
        if block not in population:
            continue
        first, stop = span(block)
        rng = stream(seed, SAMPLE_STREAM, plan.round, block)
        count = counts[block] if plan.sampling == "uniform" else rng.binomial(stop - first, plan.rate)
        if count:
            chosen[block] = first + np.sort(rng.choice(stop - first, size=count, replace=False))
    return chosen
