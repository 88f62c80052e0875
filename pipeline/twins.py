"""Whether an object still computes what its class's compiled twin reproduces.

A class with a compiled twin (a problem's `compiled_problem`, an optimizer's `compiled_update`,
a protocol's `fused_encoding`) names the methods the twin reproduces. A subclass inherits the
twin unless it overrides one of them below the class that defines the twin; one that overrides
the twin too states its own. One rule for every family: no lists of types or of methods'
identities in the engine.
"""
from __future__ import annotations

import types
from typing import Any, Iterable

# Libraries whose functions numba types itself: never registered as a stage's helper.
_TYPED_BY_NUMBA = ("numpy", "math", "cmath", "numba", "builtins", "operator")


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


def called_functions(*roots: Any) -> list:
    """`roots` and the plain Python functions they call by a global name or as a module's
    attribute, recursively: what a
    compiled twin's stage functions need compiled with them (a helper such as
    numerics.pairwise_sum), and the files a cached kernel's key must hash. numpy's and math's
    functions, which numba types itself, and pipeline.draws' declared draws, which the kernel
    implements, are left out.

    Args:
      roots: functions.

    Returns:
      The functions, roots first, each once.
    """
    found, pending = [], list(roots)
    while pending:
        function = pending.pop(0)
        if function in found:
            continue
        found.append(function)
        names = function.__code__.co_names
        for name in names:
            value = function.__globals__.get(name)
            # module.function: the module's functions among the names the code reads
            candidates = [getattr(value, other, None) for other in names] if isinstance(value, types.ModuleType) \
                else [value]
            pending.extend(called for called in candidates if _compiled_with_caller(called))
    return found


def _compiled_with_caller(value: Any) -> bool:
    """Whether a function a stage calls is compiled with it: a plain function, not numpy's or
    math's (numba types those itself) nor a draw the kernel implements (pipeline.draws)."""
    return isinstance(value, types.FunctionType) and not getattr(value, "declared", False) \
        and (value.__module__ or "").split(".")[0] not in _TYPED_BY_NUMBA
