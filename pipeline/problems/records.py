"""Users who hold several records: how many each holds and which of them a round
uses (shared/DESIGN.md §5, "Users with several records"; a table's user column is
grouped by pipeline.problems.dataset).

A run's records are laid out user by user: user u holds records
offsets[u] … offsets[u + 1] − 1 of its shard, so a user's records never split
across blocks or shards, and every draw below is keyed by a block's stream.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

FIXED, POISSON, ZIPF = "fixed", "poisson", "zipf"
MAX_RECORDS = 1 << 20  # records one user may hold (a fixed m, or a Zipf's max)


@dataclasses.dataclass(frozen=True)
class RecordsPerUser:
    """How many records each synthetic user holds: a fixed m, or a distribution.

    Attributes:
      kind: FIXED (every user m), POISSON (1 + Poisson(λ − 1): mean λ, never 0) or
        ZIPF (P(m = j) ∝ j^−a for j = 1 … max, the truncated Zipf law).
      value: m, λ or a.
      maximum: the Zipf's max (0 otherwise).
    """

    kind: str = FIXED
    value: float = 1
    maximum: int = 0

    @property
    def one_each(self) -> bool:
        """Whether every user holds exactly one record (the engine's plain path)."""
        return self.kind == FIXED and self.value == 1

    @property
    def minimum(self) -> int:
        """The records every user is guaranteed to hold, known before any data is drawn
        (what a record-level accountant may rely on: m for a fixed m, else 1)."""
        return int(self.value) if self.kind == FIXED else 1

    @property
    def mean(self) -> float:
        """E[records of a user]."""
        if self.kind == ZIPF:
            j = np.arange(1, self.maximum + 1, dtype=float)
            weights = j ** -self.value
            return float((j * weights).sum() / weights.sum())
        return float(self.value)

    def __str__(self) -> str:
        if self.kind == FIXED:
            return str(int(self.value))
        if self.kind == POISSON:
            return f"poisson:{self.value:g}"
        return f"zipf:{self.value:g},max:{self.maximum}"

    def draw(self, rng: np.random.Generator, users: int) -> np.ndarray:
        """How many records each of `users` users holds.

        Args:
          rng: the block's generator (pipeline.engine.layout.RECORDS_STREAM).
          users: how many users.

        Returns:
          int64 counts, each ≥ 1.
        """
        if self.kind == FIXED:
            return np.full(users, int(self.value), dtype=np.int64)
        if self.kind == POISSON:
            return 1 + rng.poisson(self.value - 1.0, users).astype(np.int64)
        cumulative = np.cumsum(np.arange(1, self.maximum + 1, dtype=float) ** -self.value)
        # Inverse CDF of the truncated law: exact, where numpy's zipf has no upper end.
        return 1 + np.searchsorted(cumulative, rng.random(users) * cumulative[-1], side="right").astype(np.int64)


def parse_records_per_user(value: Any) -> RecordsPerUser:
    """A records_per_user setting: an integer m, or {poisson: λ}, or {zipf: a, max: M}
    (also written "poisson:20" or "zipf:1.5,max:1000", as results files store it).

    Raises:
      ValueError: the rule the value breaks.
    """
    rule = ("must be an integer m ≥ 1, {poisson: λ} with λ ≥ 1, or {zipf: a, max: M} with a > 0 and "
            f"1 ≤ M ≤ {MAX_RECORDS}")
    if isinstance(value, str):
        text = value.replace(" ", "")
        if text.isdigit():
            value = int(text)
        else:
            try:
                value = {key: float(number) for key, number in (part.split(":") for part in text.split(","))}
            except ValueError:
                raise ValueError(rule) from None
    if isinstance(value, bool):
        raise ValueError(rule)
    if isinstance(value, (int, np.integer)) or (isinstance(value, float) and value.is_integer()):
        if not 1 <= value <= MAX_RECORDS:
            raise ValueError(rule)
        return RecordsPerUser(FIXED, int(value))
    if not isinstance(value, dict):
        raise ValueError(rule)
    try:
        numbers = {key: float(number) for key, number in value.items()}
    except (TypeError, ValueError):
        raise ValueError(rule) from None
    if set(numbers) == {POISSON} and math.isfinite(numbers[POISSON]) and numbers[POISSON] >= 1:
        return RecordsPerUser(POISSON, numbers[POISSON])
    if set(numbers) == {ZIPF, "max"} and 0 < numbers[ZIPF] < math.inf and numbers["max"].is_integer() \
            and 1 <= numbers["max"] <= MAX_RECORDS:
        return RecordsPerUser(ZIPF, numbers[ZIPF], int(numbers["max"]))
    raise ValueError(rule)


ONE_EACH = RecordsPerUser()


def offsets_of(counts: np.ndarray) -> np.ndarray:
    """Where each user's records start, and the end: (users + 1,) int64."""
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def choose_records(rng: np.random.Generator, counts: np.ndarray, per_user: int) -> tuple[np.ndarray, np.ndarray]:
    """Which records some users use in a round: `per_user` of each user's records, uniformly
    without replacement (all of them when the user holds fewer).

    Args:
      rng: the round's and block's generator (pipeline.engine.layout.RECORD_STREAM).
      counts: how many records each of the users holds.
      per_user: s ≥ 1.

    Returns:
      (records, users): each chosen record's index within its user, and its user's position
      in `counts`; grouped by user, in user order.
    """
    if per_user == 1:  # one uniform record each: one draw per user
        return np.floor(rng.random(counts.size) * counts).astype(np.int64), np.arange(counts.size)
    owners = np.repeat(np.arange(counts.size), counts)
    within = np.arange(owners.size) - np.repeat(offsets_of(counts)[:-1], counts)
    # Random keys: the s smallest of each user's records are a uniform s-subset.
    order = np.lexsort((rng.random(owners.size), owners))
    rank = np.empty_like(order)
    rank[order] = within
    kept = np.sort(order[rank[order] < per_user])
    return within[kept], owners[kept]
