"""Users in fixed-size blocks, shards as groups of blocks, and the random
streams keyed by (round, block): what makes results bit-identical for any
number of shards and for local vs Ray (shared/DESIGN.md §4)."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

# Users per chunk: about 2^16 user-coordinates, so a chunk's buffers stay in
# cache. Depends on d only, so the random draws do not depend on the sharding.
CHUNK_ELEMENTS = 1 << 16


def chunk_users(dim: int) -> int:
    """Users per chunk for dimension d."""
    return max(1, CHUNK_ELEMENTS // dim)


# Independent streams of one run, by key.
DATA_STREAM = 0  # (DATA_STREAM, block): the block's users' data points
ROUND_STREAM = 1  # (ROUND_STREAM, round, block): the randomizers of a round
SCATTER_STREAM = 2  # (SCATTER_STREAM, round, shard): literal shuffle, stage 1
PERMUTE_STREAM = 3  # (PERMUTE_STREAM, round, shard): literal shuffle, stage 2
SAMPLE_STREAM = 4  # (SAMPLE_STREAM, round[, block]): who of a sampled round's population answers
NOISE_STREAM = 5  # (NOISE_STREAM, round): a central curator's noise, added to the merged total
RECORDS_STREAM = 6  # (RECORDS_STREAM, block): how many records each of the block's users holds
RECORD_STREAM = 7  # (RECORD_STREAM, round, block): which of their records the round's users use


@functools.lru_cache(maxsize=64)
def run_key(seed: int) -> np.ndarray:
    """The Philox key of a run: 128 bits of the run's SeedSequence (the one hash per run).

    Args:
      seed: the run's seed (the entropy of its SeedSequence).

    Returns:
      Two uint64 words (read-only: shared by every stream of the run).
    """
    key = np.random.SeedSequence(seed).generate_state(2, np.uint64)
    key.flags.writeable = False
    return key


def counter(*key: int, out: np.ndarray | None = None) -> np.ndarray:
    """The first Philox counter of a stream: word 0 counts the stream's draws from 0, and
    words 1–3 hold its key, so distinct keys own disjoint counter ranges (word 0 would
    need 2⁶⁴ blocks of four draws to carry into word 1).

    Args:
      *key: the stream's key, e.g. (ROUND_STREAM, round, block): a kind and up to two
        indices in [0, 2⁶⁴).
      out: four uint64 words to write it into (a new array if None).

    Returns:
      Four uint64 words: (0, len(key)·2³² + kind, key[1], key[2]), absent indices 0
      (the length keeps (kind, r) apart from (kind, r, 0)).

    Raises:
      ValueError: a key too long, or an index out of range.
    """
    words = np.zeros(4, dtype=np.uint64) if out is None else out
    if 1 <= len(key) <= 3 and 0 <= key[0] < 1 << 32:
        try:
            words[:] = (0, (len(key) << 32) + key[0], *key[1:], *(0,) * (3 - len(key)))
            return words
        except OverflowError:  # numpy refuses an index outside uint64
            pass
    raise ValueError(f"stream key {key}: a kind in [0, 2³²) and at most two indices in [0, 2⁶⁴)")


def stream(seed: int, *key: int) -> np.random.Generator:
    """A new generator of one stream of the run seeded by `seed`.

    Counter-based (Philox4x64-10, Salmon et al. 2011): every stream of a run shares the
    run's key, and each starts at its own counter, so the streams are independent and any
    one of them is addressed directly, in any process, without hashing its key.

    Args:
      seed: the run's seed.
      *key: the stream's key, e.g. (ROUND_STREAM, round, block).

    Returns:
      A generator of its own (what `Streams` re-keys in place, draw for draw).
    """
    return np.random.Generator(np.random.Philox(key=run_key(seed), counter=counter(*key)))


class Streams:
    """The streams of one run in one process, for the rounds' hot paths: one generator per
    stream kind, re-keyed in place (about 2.5 µs) instead of built (10 µs; and in a 51-user
    round, the numpy calls after building one ran about 15 µs slower, measured).

    A generator it returns is valid until the next call for the same kind: what the engine
    passes to a plug-in (`Problem.sample`, `Protocol.encode_block`, `Protocol.finish`) is
    valid during that call only. Drawing from it later could not be bit-identical for every
    sharding anyway, since it would depend on which blocks a shard ran before.

    Args:
      seed: the run's seed.
    """

    def __init__(self, seed: int):
        self._key = run_key(seed)
        self._kinds: dict[int, tuple[np.random.Generator, dict]] = {}  # kind → (generator, its state to set)

    def __call__(self, *key: int) -> np.random.Generator:
        """The generator of one stream at its first draw: the same draws as `stream(seed, *key)`.

        Args:
          *key: the stream's key, e.g. (ROUND_STREAM, round, block).

        Returns:
          This object's generator for the key's kind, re-keyed.
        """
        if key[0] not in self._kinds:
            # buffer_pos 4 and has_uint32 0: the next draw computes a fresh block, as a new generator's
            self._kinds[key[0]] = (np.random.Generator(np.random.Philox(key=self._key)), {
                "bit_generator": "Philox", "state": {"counter": np.zeros(4, dtype=np.uint64), "key": self._key},
                "buffer": np.zeros(4, dtype=np.uint64), "buffer_pos": 4, "has_uint32": 0, "uinteger": 0})
        generator, state = self._kinds[key[0]]
        counter(*key, out=state["state"]["counter"])
        generator.bit_generator.state = state  # copied into the generator
        return generator


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


def sampled_users(layout: BlockLayout, streams: Streams, plan, blocks: range) -> dict[int, np.ndarray]:
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
      streams: the run's streams.
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
        counts = dict(zip(population, streams(SAMPLE_STREAM, plan.round).multivariate_hypergeometric(
            sizes, plan.sample_size, method="marginals" if sizes.sum() > 10**6 else "count")))
    chosen = {}
    for block in blocks:
        if block not in population:
            continue
        first, stop = span(block)
        rng = streams(SAMPLE_STREAM, plan.round, block)
        count = counts[block] if plan.sampling == "uniform" else rng.binomial(stop - first, plan.rate)
        if count:
            chosen[block] = first + np.sort(rng.choice(stop - first, size=count, replace=False))
    return chosen
