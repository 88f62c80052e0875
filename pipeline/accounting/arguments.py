"""The accountants' argument checks, one set for every module of accounting/
(the same parsers config fields use, pipeline.options): an integral float such
as 1e6 is an integer everywhere, and every refusal reads `name=value: rule`.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from pipeline import options


def _checked(name: str, value: Any, parser: options.Parser) -> Any:
    if isinstance(value, (str, bytes)) or not isinstance(value, (numbers.Real, np.generic)):
        raise ValueError(f"{name}={value!r}: {parser.rule}")
    try:
        return parser(value.item() if isinstance(value, np.generic) else value)
    except ValueError as error:
        raise ValueError(f"{name}={value!r}: {error}") from None


def integer(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """`value` as an int in [minimum, maximum] (integral floats accepted).

    Raises:
      ValueError: `name=value: must be an integer ≥ minimum [and ≤ maximum]`.
    """
    return _checked(name, value, options.integer(minimum, maximum))


def real(name: str, value: Any, low: float = -np.inf, high: float = np.inf, *, low_open: bool = True,
         high_open: bool = True) -> float:
    """`value` as a finite float in the interval (open ends by default).

    Raises:
      ValueError: `name=value: must be a number in (low, high)`.
    """
    return _checked(name, value, options.real(low, high, low_open, high_open))


def choice(name: str, value: Any, names: tuple) -> Any:
    """`value` if it is one of `names`.

    Raises:
      ValueError: `name=value: must be one of ...`.
    """
    if value not in names:
        raise ValueError(f"{name}={value!r}: must be one of {', '.join(map(str, names))}")
    return value
