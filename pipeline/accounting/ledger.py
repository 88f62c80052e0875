"""The privacy ledger: every mechanism call of a run, and what they add up to.

Paper mode (this module) composes as seed 000's theorems do:
  sequential        each user answers in one round only (Algorithm 3, 4, ...);
                    the transcript is (max_r ε_r, max_r δ_r)-DP (parallel
                    composition over disjoint batches, proof of Theorem 4.1);
                    the ledger asserts the batches are disjoint.
  fully_interactive every round sees every user (Algorithm 5); rounds compose
                    by advanced composition (Lemma B.6 / Theorem 4.9).
"""
from __future__ import annotations

import bisect
import dataclasses

import attr

from pipeline.accounting import paper
from pipeline.accounting.events import PvecDpEvent

SEQUENTIAL = "sequential"
FULLY_INTERACTIVE = "fully_interactive"
COMPOSITIONS = (SEQUENTIAL, FULLY_INTERACTIVE)

_RULES = {
    SEQUENTIAL: "parallel composition over disjoint batches (seed 000, proof of Theorem 4.1)",
    FULLY_INTERACTIVE: "advanced composition, Dwork-Rothblum-Vadhan 2010 (seed 000, Lemma B.6 / Theorem 4.9)",
}


class LedgerError(ValueError):
    """A recorded call breaks the composition the run claims."""


@dataclasses.dataclass
class _Entry:
    """Consecutive rounds with the same event."""

    first_round: int
    rounds: int
    event: PvecDpEvent


class PrivacyLedger:
    """Records a run's P_vec calls and composes them in paper mode.

    Args:
      composition: SEQUENTIAL or FULLY_INTERACTIVE.
      epsilon, delta: the run's target.
      slack: δ' of advanced composition (fully interactive only).
    """

    def __init__(self, composition: str, epsilon: float, delta: float, slack: float | None = None):
        if composition not in COMPOSITIONS:
            raise ValueError(f"composition {composition!r}: must be one of {COMPOSITIONS}")
        if composition == FULLY_INTERACTIVE and not (slack and 0.0 < slack < 1.0):
            raise ValueError(f"fully interactive composition needs a slack δ' in (0, 1), got {slack}")
        self.composition = composition
        self.target = (epsilon, delta)
        self.slack = slack
        self._entries: list[_Entry] = []
        self._user_starts: list[int] = []  # disjoint [start, stop) batches, sorted
        self._user_stops: list[int] = []
        self._rounds = 0

    @property
    def rounds(self) -> int:
        """Rounds recorded so far."""
        return self._rounds

    def record(self, round_index: int, first_user: int, stop_user: int, event: PvecDpEvent) -> None:
        """Records one round's P_vec call.

        Args:
          round_index: must be the next round.
          first_user, stop_user: the round's users [first_user, stop_user); kept
            only in memory for the disjointness check, never serialized.
          event: the call.

        Raises:
          LedgerError: out-of-order round, overlapping batches in a sequential
            run, or a call outside Theorem 3.2.
        """
        if round_index != self._rounds:
            raise LedgerError(f"round {round_index} recorded after {self._rounds} rounds")
        if event.users != stop_user - first_user:
            raise LedgerError(f"round {round_index}: a call over {event.users} users for {stop_user - first_user} users")
        paper.pvec_analysis_bound(event)  # raises outside the theorem
        if self.composition == SEQUENTIAL:
            self._claim_users(first_user, stop_user)
        last = self._entries[-1] if self._entries else None
        if last is not None and last.event == event:
            last.rounds += 1
        else:
            self._entries.append(_Entry(round_index, 1, event))
        self._rounds += 1

    def _claim_users(self, start: int, stop: int) -> None:
        at = bisect.bisect_right(self._user_starts, start)
        overlaps_before = at > 0 and self._user_stops[at - 1] > start
        overlaps_after = at < len(self._user_starts) and self._user_starts[at] < stop
        if overlaps_before or overlaps_after:
            raise LedgerError(f"users [{start}, {stop}) already answered in an earlier round of a sequential run")
        self._user_starts.insert(at, start)
        self._user_stops.insert(at, stop)

    def spent_after(self, round_index: int) -> tuple[float, float]:
        """(ε, δ) spent by rounds 0..round_index, by the paper's composition.

        Args:
          round_index: a recorded round.

        Returns:
          (ε, δ).
        """
        covered = [e for e in self._entries if e.first_round <= round_index]
        if self.composition == SEQUENTIAL:
            return max(e.event.epsilon for e in covered), max(e.event.delta for e in covered)
        budgets = {(e.event.epsilon, e.event.delta) for e in covered}
        if len(budgets) != 1:
            raise LedgerError("advanced composition here needs one per-round budget; got several")
        epsilon0, delta0 = budgets.pop()
        return paper.advanced_composition(epsilon0, delta0, round_index + 1, self.slack)

    def total(self) -> tuple[float, float]:
        """(ε, δ) of the whole run so far (0, 0 before any round)."""
        return self.spent_after(self._rounds - 1) if self._rounds else (0.0, 0.0)

    def within_target(self) -> bool:
        """Whether the total meets the run's (ε, δ) target."""
        epsilon, delta = self.total()
        return epsilon <= self.target[0] and delta <= self.target[1]

    def to_dict(self) -> dict:
        """The ledger as JSON-ready data (no user ids or ranges)."""
        epsilon, delta = self.total()
        events = []
        for entry in self._entries:
            bound_epsilon, bound_delta = paper.pvec_analysis_bound(entry.event)
            events.append(
                {
                    "rounds": [entry.first_round, entry.first_round + entry.rounds],
                    "mechanism": "P_vec",
                    "theorem": "seed 000 Theorem 3.2 / A.6",
                    **attr.asdict(entry.event),
                    "analysis_bound": {"epsilon": bound_epsilon, "delta": bound_delta},
                }
            )
        return {
            "target": {"epsilon": self.target[0], "delta": self.target[1]},
            "composition": self.composition,
            "rounds": self._rounds,
            "events": events,
            "accounting": {
                "paper": {
                    "epsilon": epsilon,
                    "delta": delta,
                    "rule": _RULES[self.composition],
                    **({"slack": self.slack} if self.composition == FULLY_INTERACTIVE else {}),
                    "checks": {
                        # record() refuses overlapping batches, so this holds when present.
                        **({"disjoint_batches": True} if self.composition == SEQUENTIAL else {}),
                        "within_target": self.within_target(),
                        "exact_noise_sampler": all(e.event.noise_sampler == "binomial" for e in self._entries),
                    },
                }
            },
        }

