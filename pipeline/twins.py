"""Whether an object still computes what its class's compiled twin reproduces.

A class with a compiled twin (a problem's `compiled_problem`, an optimizer's `compiled_update`,
a protocol's `fused_encoding`) names the methods the twin reproduces. A subclass inherits the
twin unless it overrides one of them below the class that defines the twin; one that overrides
the twin too states its own. One rule for every family: no lists of types or of methods'
identities in the engine.
"""
from __future__ import annotations

from typing import Any, Iterable


def keeps_twin(instance: Any, twin: str, reproduced: Iterable[str]) -> bool:
    """Whether `instance`'s class keeps every method in `reproduced` from the class that defines `twin`.

    Args:
      instance: the problem, optimizer or protocol.
      twin: the name of the method that describes its compiled twin.
      reproduced: the methods (or properties) that twin reproduces.

    Returns:
      False when a subclass below the twin's class overrides one of them.
    """
    kind = type(instance)
    owner = next(cls for cls in kind.__mro__ if twin in vars(cls))
    return all(getattr(kind, name) is getattr(owner, name) for name in reproduced)
