"""The one error users see for bad input: field, value and rule in one line."""
from __future__ import annotations

import reprlib

from pipeline.uris import redact

# The most characters of a value an error line quotes: a YAML alias bomb, or a
# pasted data file, must not print (or even build) its full expansion.
SHOWN_CHARS = 200


def _bounded_repr() -> reprlib.Repr:
    """A repr that stops at a few levels and items, so its cost is bounded too."""
    bounded = reprlib.Repr()
    bounded.maxlevel = 4
    bounded.maxdict = bounded.maxlist = bounded.maxtuple = bounded.maxset = bounded.maxfrozenset = 20
    bounded.maxdeque = bounded.maxarray = 20
    bounded.maxstring = bounded.maxlong = bounded.maxother = SHOWN_CHARS
    return bounded


_REPR = _bounded_repr()


def items_within(value: object, budget: int) -> int:
    """What is left of `budget` after counting the items of a nested value; negative
    once exceeded, so an alias bomb (shared lists, exponentially many items) stops early."""
    budget -= 1
    if isinstance(value, dict):
        value = [item for pair in value.items() for item in pair]
    if isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            if budget < 0:
                break
            budget = items_within(item, budget)
    return budget


def shown(value: object) -> str:
    """The value as an error line quotes it.

    Args:
      value: any value.

    Returns:
      repr(value) for a small value; otherwise a bounded prefix of it,
      at most SHOWN_CHARS characters and "…".
    """
    if isinstance(value, str):
        text = repr(value[:SHOWN_CHARS + 1])
    elif items_within(value, 200) >= 0:
        text = repr(value)
    else:
        text = _REPR.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"


class ConfigError(ValueError):
    """An input that breaks a rule, reported before any work is done.

    Args:
      field: the dotted config field, e.g. ``privacy.epsilon``.
      value: the offending value (quoted as `shown` bounds it).
      rule: what the value must satisfy, and why where it helps.
    """

    def __init__(self, field: str, value: object, rule: str):
        self.field, self.value, self.rule = field, value, rule
        # A field can be a key the user wrote (an unknown field): bounded like a value.
        named = field if len(field) <= SHOWN_CHARS else field[:SHOWN_CHARS] + "…"
        # A URI's credentials never reach the line (pipeline.uris.redact).
        super().__init__(redact(f"config error: {named} = {shown(value)}: {rule}"))


class LeaseLost(RuntimeError):
    """This driver's lease of a results folder is another's now: it must write nothing more there
    (pipeline.tracking.lease); the grid stops, and `run` exits 1 with its line."""


class NonFiniteError(FloatingPointError):
    """A NaN or infinite value where a run needs a finite one (a user's gradient, the analyzer's
    estimate, the model): the run fails with it instead of casting it silently."""


def value_class(values) -> str:
    """Which non-finite value an array holds first: "NaN", "+inf" or "-inf" ("finite values" if none)."""
    import numpy as np

    values = np.asarray(values, dtype=float).ravel()
    bad = values[~np.isfinite(values)]
    if not bad.size:
        return "finite values"
    return "NaN" if np.isnan(bad[0]) else ("+inf" if bad[0] > 0 else "-inf")
