"""The privacy ledger: every mechanism call of a run, and what they add up to.

Two accountants read the same events:
  paper  Theorem 3.2's analysis bound per P_vec call (the call must satisfy its
         conditions; Corollary A.9 with dropouts), composed as seed 000's
         theorems do; for the companion mechanisms, the seed's own bound
         (pipeline.accounting.mechanisms);
  tight  the proven δ-approximate RDP bound of pipeline.accounting.pvec_tight
         per call, or the minimum of every valid bound of a companion call,
         composed by adding RDP curves (or exactly / by PLD), converted once.
and four compositions:
  sequential        each user answers in one round only (Algorithm 3, 4, ...):
                    parallel composition over disjoint batches (proof of
                    Theorem 4.1): the worst round; the ledger asserts disjointness.
  fully_interactive every round may see every user (Algorithm 5, sampled SGD):
                    paper mode by advanced composition (Lemma B.6 / Theorem 4.9)
                    for P_vec, tight mode by adding the rounds' RDP curves.
  phased            disjoint groups of users, each fully interactive (Lemma B.7):
                    the worst group.
  final_iterate     only the last iterate is released (seed 002): nothing is
                    spent before it, its release is accounted whole.
The run's accounting mode decides which total is checked against the target
and reported; the other is recorded beside it.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import math

import attr
import numpy as np

from pipeline.accounting import events as event_classes
from pipeline.accounting import mechanisms, paper, pvec_tight
from pipeline.accounting.compositions import (  # noqa: F401 (the ledger's names, as before)
    ACCOUNTING_MODES, COMPOSITIONS, FINAL_ITERATE, FULLY_INTERACTIVE, PAPER, PHASED, SEQUENTIAL, TIGHT)
from pipeline.accounting.events import PvecDpEvent

UNITS = ("user", "record")  # the unit of privacy: what a neighbouring dataset changes
UNIT_MEANING = {
    "user": "neighbouring datasets differ in one user's whole dataset (every record it holds): each user's "
            "contribution per round is one bounded input, the mean over its records",
    "record": "neighbouring datasets differ in one record; with several records per user, a user's other records "
              "are not protected by this ledger's ε (seed 001 Lemma 4.3.1 / Thm 4.4.1 sampling rates)",
}


_RULES = {
    (PAPER, SEQUENTIAL): "parallel composition over disjoint batches (seed 000, proof of Theorem 4.1)",
    (PAPER, FULLY_INTERACTIVE): "advanced composition, Dwork-Rothblum-Vadhan 2010 (seed 000, Lemma B.6 / Theorem 4.9)",
    (TIGHT, SEQUENTIAL): "parallel composition over disjoint batches: the worst round's RDP bound, converted",
    (TIGHT, FULLY_INTERACTIVE): "RDP composition: the rounds' curves added, then converted once",
    (PAPER, PHASED): "parallel over disjoint groups (Lemma B.7); within a group advanced composition (Lemma B.6)",
    (TIGHT, PHASED): "parallel over disjoint groups; within a group the rounds' RDP curves added, converted once",
}
_COMPANION_RULES = {
    PHASED: "parallel over disjoint groups; within a group the calls' curves added, converted once",
    FINAL_ITERATE: "only the final iterate is released: nothing is spent before it, its release is accounted whole",
    SEQUENTIAL: "parallel composition over disjoint batches: the worst call's bound, at the run's δ",
    FULLY_INTERACTIVE: "RDP composition: the calls' curves added, then converted once (CKS20 Prop. 12)",
}
_TIGHT_METHOD = ("δ-approximate RDP of the count vector: shifted binomials bounded exactly per coordinate, "
                 "summed under the worst shift vector (pipeline.accounting.pvec_tight); converted by "
                 "Canonne-Kamath-Steinke 2020 Prop. 12")


def paper_bound(event: PvecDpEvent) -> tuple[float, float] | None:
    """Theorem 3.2's (ε, δ) for a call, or None when the call is outside its conditions.

    With dropouts, Corollary A.9: (ε/γ, δ) for γ = honest/users ∈ [1/3, 1] and ε ≤ 1.
    """
    try:
        bound = paper.pvec_analysis_bound(event)
    except ValueError:
        return None
    if event.honest_users is None:
        return bound
    honest = event.honest_users / event.users
    if not (1 / 3 <= honest <= 1 and event.epsilon <= 1):
        return None
    return event.epsilon / honest, event.delta


@functools.lru_cache(maxsize=4096)
def tight_bound(event: PvecDpEvent) -> pvec_tight.PvecRdp:
    """The proven δ-approximate RDP bound of one call (pipeline.accounting.pvec_tight); with
    dropouts, of the honest users' noise only (the dropped users send nothing)."""
    return pvec_tight.pvec_rdp(event.honest_users or event.users, event.dim, event.g, event.b_noise, event.p)


class LedgerError(ValueError):
    """A recorded call breaks the composition the run claims."""


class UnsupportedEventError(LedgerError):
    """A recorded event that no accountant bounds (refused when the ledger is planned)."""


@dataclasses.dataclass
class _Entry:
    """Consecutive rounds with the same event."""

    first_round: int
    rounds: int
    event: PvecDpEvent
    group: tuple[int, int] | None = None  # PHASED: the users [first, stop) the entry's rounds ask


class PrivacyLedger:
    """Records a run's P_vec calls and composes them in both accounting modes.

    Args:
      composition: SEQUENTIAL or FULLY_INTERACTIVE.
      epsilon, delta: the run's target.
      slack: δ' of paper-mode advanced composition (fully interactive only).
      accounting: PAPER or TIGHT, the mode the run is calibrated, checked and reported in.
      unit: what neighbouring datasets differ in: "user" (one user's whole dataset) or
        "record" (one record); the same when every user holds one record.
    """

    def __init__(self, composition: str, epsilon: float, delta: float, slack: float | None = None,
                 accounting: str = PAPER, release=None, final_round: int | None = None, unit: str = UNITS[0]):
        if composition not in COMPOSITIONS:
            raise ValueError(f"composition {composition!r}: must be one of {COMPOSITIONS}")
        if accounting not in ACCOUNTING_MODES:
            raise ValueError(f"accounting {accounting!r}: must be one of {ACCOUNTING_MODES}")
        if composition == FINAL_ITERATE and (release is None or final_round is None):
            raise ValueError("a final-iterate ledger needs the release event and its round")
        if slack is not None and not 0.0 < slack < 1.0:
            raise ValueError(f"the slack δ' must be in (0, 1), got {slack}")
        if unit not in UNITS:
            raise ValueError(f"unit {unit!r}: must be one of {UNITS}")
        self.composition = composition
        self.accounting = accounting
        self.unit = unit
        self.target = (epsilon, delta)
        self.slack = slack
        self.release = release  # FINAL_ITERATE: the event the final iterate's release is accounted by
        self.final_round = final_round
        self._entries: list[_Entry] = []
        self._user_starts: list[int] = []  # disjoint [start, stop) batches, sorted
        self._user_stops: list[int] = []
        self._rounds = 0

    @property
    def rounds(self) -> int:
        """Rounds recorded so far."""
        return self._rounds

    def _state(self) -> tuple:
        return (self.composition, self.accounting, self.unit, self.target, self.slack, self.release, self.final_round,
                self._rounds, self._entries)

    def same_calls(self, other: "PrivacyLedger") -> bool:
        """Whether two ledgers hold the same calls under the same rules, so that they compose, and
        write (`to_dict`), the same: a comparison of the events, without composing either."""
        return self._state() == other._state()

    def record(self, round_index: int, first_user: int, stop_user: int, event: PvecDpEvent) -> None:
        """Records one round's call (P_vec, a companion event, or a plug-in's event).

        Args:
          round_index: must be the next round.
          first_user, stop_user: the round's users [first_user, stop_user); kept
            only in memory for the disjointness check, never serialized.
          event: the call.

        Raises:
          LedgerError: an event no accountant supports, out-of-order round,
            overlapping batches in a sequential run, or (paper mode) a call
            outside Theorem 3.2.
        """
        self._check_call(round_index, first_user, stop_user, event)
        group = (first_user, stop_user) if self.composition == PHASED else None
        last = self._entries[-1] if self._entries else None
        if self.composition in (SEQUENTIAL, FINAL_ITERATE) or (
                self.composition == PHASED and (last is None or last.group != group)):
            self._claim_users(first_user, stop_user)  # a phase's group of users is fresh
        self._append(round_index, 1, event, group)

    def record_rounds(self, first_round: int, rounds: int, first_user: int, stride: int, users: int,
                      event: PvecDpEvent) -> None:
        """Records `rounds` consecutive calls of one event, as `record` would one by one: round
        first_round + k asks users [first_user + k·stride, … + users). O(1) where the rounds'
        batches are consecutive (stride = users) in a sequential run, or nothing is claimed
        (fully interactive); otherwise round by round.

        Raises:
          LedgerError: as `record`.
        """
        claims = self.composition in (SEQUENTIAL, FINAL_ITERATE)
        if rounds <= 1 or self.composition == PHASED or (claims and stride != users):
            for k in range(rounds):
                start = first_user + k * stride
                self.record(first_round + k, start, start + users, event)
            return
        self._check_call(first_round, first_user, first_user + users, event)
        if claims:
            self._claim_users(first_user, first_user + rounds * users)  # the union of the rounds' batches
        self._append(first_round, rounds, event, None)

    def _check_call(self, round_index: int, first_user: int, stop_user: int, event) -> None:
        """`record`'s rules for one call (see its Raises)."""
        if not (isinstance(event, PvecDpEvent) or mechanisms.supports(event)):
            raise UnsupportedEventError(f"no accountant supports {type(event).__name__} events: its class must name a "
                              "pipeline.accounting.mechanisms.CallAccountant as `accountant`, or one must be registered")
        if round_index != self._rounds:
            raise LedgerError(f"round {round_index} recorded after {self._rounds} rounds")
        users = event.population if hasattr(event, "population") else event.users
        if users != stop_user - first_user:
            raise LedgerError(f"round {round_index}: a call over {users} users for {stop_user - first_user} users")
        if self.accounting == PAPER and isinstance(event, PvecDpEvent):
            try:
                paper.pvec_analysis_bound(event)
            except ValueError as error:
                raise LedgerError(f"round {round_index}: {error}") from None

    def _append(self, first_round: int, rounds: int, event, group: tuple[int, int] | None) -> None:
        """Adds calls to the last entry when they continue it (same event and group), else a new one."""
        last = self._entries[-1] if self._entries else None
        if last is not None and last.event == event and last.group == group:
            last.rounds += rounds
        else:
            self._entries.append(_Entry(first_round, rounds, event, group))
        self._rounds += rounds

    def _claim_users(self, start: int, stop: int) -> None:
        at = bisect.bisect_right(self._user_starts, start)
        overlaps_before = at > 0 and self._user_stops[at - 1] > start
        overlaps_after = at < len(self._user_starts) and self._user_starts[at] < stop
        if overlaps_before or overlaps_after:
            raise LedgerError(f"users [{start}, {stop}) already answered in an earlier round of a sequential run")
        self._user_starts.insert(at, start)
        self._user_stops.insert(at, stop)

    def _covered(self, round_index: int) -> list[tuple[PvecDpEvent, int]]:
        """(event, how many of its rounds are ≤ round_index) for the entries that started by then."""
        return [(e.event, min(e.rounds, round_index + 1 - e.first_round))
                for e in self._entries if e.first_round <= round_index]

    def spent_after(self, round_index: int, accounting: str | None = None) -> tuple[float, float]:
        """(ε, δ) spent by rounds 0..round_index.

        Args:
          round_index: a recorded round.
          accounting: PAPER or TIGHT; the run's own mode by default.

        Returns:
          (ε, δ); ε = inf in paper mode when a call is outside Theorem 3.2,
          and for a non-private run.
        """
        mode = accounting or self.accounting
        if self.composition == PHASED:
            # Disjoint groups compose in parallel: the worst group, each composed fully interactively.
            groups: dict = {}
            for entry in self._entries:
                if entry.first_round <= round_index:
                    groups.setdefault(entry.group, []).append(
                        (entry.event, min(entry.rounds, round_index + 1 - entry.first_round)))
            return max((self._spent(covered, mode, FULLY_INTERACTIVE) for covered in groups.values()),
                       key=lambda spent: spent[0])
        covered = self._covered(round_index)
        if self.composition == FINAL_ITERATE:
            # Nothing is released before the final iterate (seed 002: the others stay secret).
            if round_index < self.final_round:
                return 0.0, 0.0
            return mechanisms.pnsgd_release_epsilon(self.release, covered[0][0], self.target[1], mode)[0], self.target[1]
        return self._spent(covered, mode, self.composition)

    def _spent(self, covered: list[tuple[object, int]], mode: str, composition: str) -> tuple[float, float]:
        """(ε, δ) of (event, calls) pairs composed sequentially or fully interactively."""
        if not isinstance(covered[0][0], PvecDpEvent):
            return self._companion_spent(covered, mode, composition)
        if mode == TIGHT:
            return self._tight_spent(covered, composition)
        bounds = [paper_bound(event) for event, _ in covered]
        if any(bound is None for bound in bounds):
            return math.inf, max(event.delta for event, _ in covered)
        # Each call claims its target (Theorem 3.2), or ε/γ with dropouts (Corollary A.9).
        claims = [bound if event.honest_users is not None else (event.epsilon, event.delta)
                  for (event, _), bound in zip(covered, bounds)]
        if composition == SEQUENTIAL:
            return max(c[0] for c in claims), max(c[1] for c in claims)
        budgets = set(claims)
        if len(budgets) != 1:
            raise LedgerError("advanced composition here needs one per-round budget; got several")
        epsilon0, delta0 = budgets.pop()
        if self.slack is None:
            raise LedgerError("advanced composition of P_vec calls needs a slack δ'")
        return paper.advanced_composition(epsilon0, delta0, sum(count for _, count in covered), self.slack)

    def _companion_spent(self, covered: list[tuple[object, int]], mode: str, composition: str) -> tuple[float, float]:
        """(ε, δ) at the target δ of the companion mechanisms (pipeline.accounting.mechanisms)."""
        delta = self.target[1]
        call = mechanisms.tight_call if mode == TIGHT else mechanisms.paper_call
        if composition == SEQUENTIAL:
            return max(mechanisms.composed_epsilon(e, 1, delta, mode) for e, _ in covered), delta
        if mode == TIGHT:
            exact = mechanisms.exact_composition(covered, delta)
            if exact is not None:
                return exact, delta
        curves = [(call(e), count) for e, count in covered]
        pure = (None if any(c.pure_epsilon is None for c, _ in curves)
                else sum(count * c.pure_epsilon for c, count in curves))  # basic composition
        if any(c.rdp is None for c, _ in curves):
            return pure, delta
        return mechanisms.CallCurve(sum(count * c.rdp for c, count in curves), pure, "").epsilon(delta), delta

    def _tight_spent(self, covered: list[tuple[PvecDpEvent, int]], composition: str) -> tuple[float, float]:
        """Tight (ε, δ) at the target δ: the worst round (sequential) or the added curves (fully interactive)."""
        delta = self.target[1]
        if composition == SEQUENTIAL:
            return max(pvec_tight.composed_epsilon(tight_bound(e), 1, delta)[0] for e, _ in covered), delta
        bounds = [(tight_bound(e), count) for e, count in covered]
        summed = pvec_tight.PvecRdp(pvec_tight.ORDERS, sum(count * b.rdp for b, count in bounds),
                                    sum(count * b.delta_approx for b, count in bounds))
        return pvec_tight.composed_epsilon(summed, 1, delta)[0], delta

    def spent_columns(self, accounting: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """spent_series as two float64 arrays (ε, δ), one value per round; a sequential
        ledger's without a tuple per round (its spend is constant over an entry's rounds)."""
        if self.composition == SEQUENTIAL:
            spent = np.array([self.spent_after(entry.first_round, accounting) for entry in self._entries],
                             dtype=np.float64).reshape(-1, 2)
            counts = [entry.rounds for entry in self._entries]
            return np.repeat(spent[:, 0], counts), np.repeat(spent[:, 1], counts)
        spent = np.array(self.spent_series(accounting), dtype=np.float64).reshape(-1, 2)
        return spent[:, 0].copy(), spent[:, 1].copy()

    def spent_series(self, accounting: str | None = None) -> list[tuple[float, float]]:
        """(ε, δ) spent after each recorded round, never below the exact value.

        A sequential ledger is evaluated once per entry (its spend is the worst call so
        far), other P_vec ledgers at every round. A fully
        interactive companion ledger is evaluated at 64 log-spaced rounds (and the
        last); every other round reports the next evaluated round's value, which
        is at least its own because spending only grows.

        Args:
          accounting: PAPER or TIGHT; the run's own mode by default.

        Returns:
          One (ε, δ) per round.
        """
        rounds = self._rounds
        if self.composition == SEQUENTIAL:
            # Disjoint batches compose in parallel: the spend is the worst call so far, however
            # often each ran, so it is constant over an entry's rounds (one value per entry: a
            # 10⁸-user seq_sgd has 2·10⁶ rounds and two entries).
            return [spent for entry in self._entries
                    for spent in [self.spent_after(entry.first_round, accounting)] * entry.rounds]
        if self._pvec or self.composition != FULLY_INTERACTIVE:
            return [self.spent_after(r, accounting) for r in range(rounds)]
        checkpoints = sorted({int(r) for r in np.geomspace(1, rounds, 64).round()} | {rounds})
        values = {r: self.spent_after(r - 1, accounting) for r in checkpoints}
        return [values[checkpoints[bisect.bisect_left(checkpoints, r + 1)]] for r in range(rounds)]

    def total(self, accounting: str | None = None) -> tuple[float, float]:
        """(ε, δ) of the whole run so far (0, 0 before any round), in the run's mode unless given."""
        return self.spent_after(self._rounds - 1, accounting) if self._rounds else (0.0, 0.0)

    def within_target(self) -> bool:
        """Whether the total in the run's mode meets the run's (ε, δ) target."""
        epsilon, delta = self.total()
        return epsilon <= self.target[0] and delta <= self.target[1]

    @property
    def _pvec(self) -> bool:
        return not self._entries or isinstance(self._entries[0].event, PvecDpEvent)

    def _method(self, mode: str) -> str:
        """How the mode bounds each call."""
        if self._pvec:
            return _TIGHT_METHOD
        if self.composition == FINAL_ITERATE:
            return mechanisms.pnsgd_release_epsilon(self.release, self._entries[0].event, self.target[1], mode)[1]
        call = mechanisms.tight_call if mode == TIGHT else mechanisms.paper_call
        rules = sorted({call(entry.event).rule for entry in self._entries})
        exact = (mode == TIGHT and self.composition == FULLY_INTERACTIVE
                 and mechanisms.exact_composition([(e.event, 1) for e in self._entries], self.target[1]) is not None)
        return "; ".join(rules) + ("; composed exactly (GDP) or by PLD" if exact else "")

    def _event_dict(self, entry: _Entry, phase: int | None = None) -> dict:
        """One entry as JSON-ready data, with each mode's bound of one call at the run's δ (and,
        in a PHASED ledger, which phase's group of users it asks: 0, 1, …, no user ranges)."""
        delta = self.target[1]
        head = {"rounds": [entry.first_round, entry.first_round + entry.rounds],
                **({"phase": phase} if phase is not None else {})}
        if not isinstance(entry.event, PvecDpEvent):
            fields = {k: (list(v) if isinstance(v, tuple) else v) for k, v in attr.asdict(entry.event).items()}
            bounds = {}
            for name, call in (("analysis_bound", mechanisms.paper_call), ("tight_bound", mechanisms.tight_call)):
                epsilon = mechanisms.composed_epsilon(entry.event, 1, delta, TIGHT if name == "tight_bound" else PAPER)
                bounds[name] = {"scope": "one call, at the run's δ", "epsilon": epsilon if math.isfinite(epsilon) else None,
                                "delta": delta, "rule": call(entry.event).rule}
            return {**head, "mechanism": type(entry.event).__name__.removesuffix("DpEvent"), **fields, **bounds}
        bound = paper_bound(entry.event)
        tight = tight_bound(entry.event)
        tight_epsilon, _, order = pvec_tight.composed_epsilon(tight, 1, delta)
        return {
            **head,
            "mechanism": "P_vec",
            "theorem": "seed 000 Theorem 3.2 / A.6",
            **attr.asdict(entry.event),
            "analysis_bound": (None if bound is None else {"epsilon": bound[0], "delta": bound[1]}),
            "tight_bound": {"scope": "one call, at the run's δ", "epsilon": tight_epsilon,
                            "delta": delta, "order": order, "delta_approx": tight.delta_approx},
        }

    def to_dict(self) -> dict:
        """The ledger as JSON-ready data (no user ids or ranges); both modes, the run's first."""
        phases: dict = {}  # PHASED: each group of users, numbered in order of first answer
        events = [self._event_dict(entry, None if entry.group is None else phases.setdefault(entry.group, len(phases)))
                  for entry in self._entries]
        modes = {}
        for mode in sorted(ACCOUNTING_MODES, key=lambda m: m != self.accounting):
            epsilon, delta = self.total(mode)
            modes[mode] = {
                "epsilon": epsilon if math.isfinite(epsilon) else None,
                "delta": delta,
                "rule": _RULES[(mode, self.composition)] if self._pvec else _COMPANION_RULES[self.composition],
                **({"method": self._method(mode)} if mode == TIGHT or not self._pvec else {}),
                **({"slack": self.slack} if mode == PAPER and self.composition in (FULLY_INTERACTIVE, PHASED)
                   and self._pvec else {}),
                **({"not_covered": "a call is outside Theorem 3.2's conditions (tight-calibrated noise)"
                    if self._pvec else "a non-private call: nothing is protected"}
                   if not math.isfinite(epsilon) else {}),
                "checks": {
                    # record() refuses overlapping batches, so this holds when present.
                    **({"disjoint_batches": True} if self.composition in (SEQUENTIAL, FINAL_ITERATE, PHASED) else {}),
                    "within_target": epsilon <= self.target[0] and delta <= self.target[1],
                    "exact_noise_sampler": all(getattr(e.event, "noise_sampler", "binomial") == "binomial"
                                               for e in self._entries),
                },
            }
        return {
            "target": {"epsilon": self.target[0], "delta": self.target[1]},
            "unit": {"name": self.unit, "protects": UNIT_MEANING[self.unit]},
            "composition": self.composition,
            **({"release": {**attr.asdict(self.release), "mechanism": "PNSGD", "round": self.final_round}}
               if self.release is not None else {}),
            "accounting_mode": self.accounting,
            "rounds": self._rounds,
            "events": events,
            "accounting": modes,
        }

    def rebuildable(self) -> bool:
        """Whether `from_dict` can rebuild this ledger: all its events are this package's."""
        return all(type(event).__module__ == event_classes.__name__
                   for event in [entry.event for entry in self._entries] + [self.release] if event is not None)

    @classmethod
    def from_dict(cls, data: dict) -> PrivacyLedger:
        """The ledger a `to_dict` describes, its calls recorded again from the events it lists.

        Each entry's users are stand-ins that keep the composition's structure (disjoint
        batches, the same group within a phase); `to_dict` keeps no user ranges. Only this
        package's events can be rebuilt: `rederive` checks a run's ledger with it in a
        process that imports no plug-in.

        Raises:
          UnsupportedEventError: an event that is not one of pipeline.accounting.events'.
          LedgerError: the entries break the composition's rules (as `record`).
        """
        target, paper_mode = data["target"], data["accounting"][PAPER]
        release = data.get("release")
        ledger = cls(data["composition"], target["epsilon"], target["delta"], paper_mode.get("slack"),
                     data["accounting_mode"], None if release is None else _event_of(release),
                     None if release is None else release["round"], data["unit"]["name"])
        next_user, phase_users = 0, {}
        for entry in data["events"]:
            event = _event_of(entry)
            first_round, stop_round = entry["rounds"]
            users = event.population if hasattr(event, "population") else event.users
            if "phase" in entry:  # a phase's rounds ask one group of users, each phase its own
                if entry["phase"] not in phase_users:
                    phase_users[entry["phase"]] = next_user
                    next_user += users
                ledger.record_rounds(first_round, stop_round - first_round, phase_users[entry["phase"]], 0, users, event)
            else:  # disjoint batches (they are claimed only by sequential compositions)
                ledger.record_rounds(first_round, stop_round - first_round, next_user, users, users, event)
                next_user += (stop_round - first_round) * users
        return ledger


_MECHANISMS = {"P_vec": event_classes.PvecDpEvent, "PNSGD": event_classes.PnsgdDpEvent,
               **{name.removesuffix("DpEvent"): getattr(event_classes, name) for name in dir(event_classes)
                  if name.endswith("DpEvent") and name != "DpEvent"}}


def _event_of(fields: dict):
    """The built-in event an entry of `to_dict` describes (its attr fields; lists were tuples).

    Raises:
      UnsupportedEventError: its mechanism is not one of pipeline.accounting.events'.
    """
    cls = _MECHANISMS.get(fields.get("mechanism"))
    if cls is None:
        raise UnsupportedEventError(f"the ledger's {fields.get('mechanism')!r} events are not this package's")

    def as_tuple(value):
        return tuple(as_tuple(v) for v in value) if isinstance(value, list) else value

    return cls(**{f.name: as_tuple(fields[f.name]) for f in attr.fields(cls)})
