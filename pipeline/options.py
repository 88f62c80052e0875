"""Declared options: what a config field or a plug-in's option accepts, checked
in one place (shared/DESIGN.md §2, "Extension contracts").

A parser turns a raw value (YAML, `--set`, a command-line flag) into a typed
one, or raises ValueError whose message is the rule ("must be an integer ≥ 1").
Config validation, the one-line errors and the README's option tables all come
from these, so every check behaves the same wherever a number is read.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

Parser = Callable[[Any], Any]


def integer(minimum: int, maximum: int | None = None) -> Parser:
    """A parser of integers in [minimum, maximum]; integral floats and strings such as "1e6" are integers.

    Args:
      minimum: the least value allowed.
      maximum: the largest value allowed, or None for no bound.

    Returns:
      The parser; it raises ValueError("must be an integer ≥ ...") otherwise.
    """
    rule = f"must be an integer ≥ {minimum}" + (f" and ≤ {maximum}" if maximum is not None else "")

    def parse(value: Any) -> int:
        if isinstance(value, bool):
            raise ValueError(rule)
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ValueError(rule) from None
        if isinstance(value, float):
            if not (math.isfinite(value) and value.is_integer()):
                raise ValueError(rule)
            value = int(value)
        if not isinstance(value, int) or value < minimum or (maximum is not None and value > maximum):
            raise ValueError(rule)
        return value

    parse.rule = rule
    return parse


def real(low: float, high: float, low_open: bool, high_open: bool, why: str = "") -> Parser:
    """A parser of finite numbers in an interval.

    Args:
      low, high: the interval's ends.
      low_open, high_open: whether each end is excluded.
      why: the reason for the interval, shown after the rule.

    Returns:
      The parser; it raises ValueError("must be a number in (low, high]") otherwise.
    """
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    rule = f"must be a number in {interval}" + (f" ({why})" if why else "")

    def parse(value: Any) -> float:
        if isinstance(value, bool):
            raise ValueError(rule)
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(rule) from None
        too_low = number <= low if low_open else number < low
        too_high = number >= high if high_open else number > high
        if not math.isfinite(number) or too_low or too_high:
            raise ValueError(rule)
        return number

    parse.rule = rule
    return parse


def choice(names: tuple[str, ...]) -> Parser:
    """A parser of one of `names`.

    Returns:
      The parser; it raises ValueError("must be one of ...") otherwise.
    """
    rule = f"must be one of {', '.join(names)}"

    def parse(value: Any) -> str:
        if not isinstance(value, str) or value not in names:
            raise ValueError(rule)
        return value

    parse.rule = rule
    return parse


def text(value: Any) -> str:
    """A non-empty string.

    Raises:
      ValueError: anything else.
    """
    if not isinstance(value, str) or not value.strip():
        raise ValueError(text.rule)
    return value


text.rule = "must be a non-empty string"


@dataclasses.dataclass(frozen=True)
class Option:
    """One option a plug-in class declares (an optimizer's `momentum`, a
    protocol's `levels`): read from the config as `<section>.<name>`.

    Attributes:
      name: the option's name, e.g. "momentum" (config field optimizer.momentum).
      parse: a parser from this module (or any callable raising ValueError(rule)).
      doc: one line saying what it sets.
      default: the value when the config leaves it out; None: the class's own default.
    """

    name: str
    parse: Parser
    doc: str
    default: Any = None

    @property
    def rule(self) -> str:
        """The parser's rule, for documentation."""
        return getattr(self.parse, "rule", "see the class docstring")


def options_table(classes: list[type], section: str) -> str:
    """The README's Markdown table of the options that classes declare.

    Args:
      classes: plug-in classes with an `options` tuple of Option and a `name`.
      section: the config section, e.g. "optimizer".

    Returns:
      The table, one row per (class, option).
    """
    rows = ["| class | field | rule | default | what it sets |", "|---|---|---|---|---|"]
    for cls in classes:
        for option in cls.options:
            default = "—" if option.default is None else f"`{option.default}`"
            rows.append(f"| `{cls.name}` | `{section}.{option.name}` | {option.rule} | {default} | {option.doc} |")
    return "\n".join(rows)
