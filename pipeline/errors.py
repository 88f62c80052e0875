"""The one error users see for bad input: field, value and rule in one line."""
from __future__ import annotations


class ConfigError(ValueError):
    """An input that breaks a rule, reported before any work is done.

    Args:
      field: the dotted config field, e.g. ``privacy.epsilon``.
      value: the offending value.
      rule: what the value must satisfy, and why where it helps.
    """

    def __init__(self, field: str, value: object, rule: str):
        self.field, self.value, self.rule = field, value, rule
        super().__init__(f"config error: {field} = {value!r}: {rule}")
