"""Whether an object still computes what its class's compiled twin reproduces.

A class with a compiled twin (a problem's `compiled_problem`, an optimizer's `compiled_update`,
a protocol's `fused_encoding`) names the methods the twin reproduces. A subclass inherits the
twin unless it overrides one of them below the class that defines the twin; one that overrides
the twin too states its own. One rule for every family: no lists of types or of methods'
identities in the engine.

What a twin's functions call (`called_functions`) and the identity of the code compiled from
them (`stage_key`, what the compiled kernels' on-disk cache is keyed by) are here too: numba
is not loaded for either.
"""
from __future__ import annotations

import hashlib
import inspect
import marshal
import types
from pathlib import Path
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
    """`roots` and the plain Python functions they call by a global name, as a module's attribute
    or from their closure, recursively: what a
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
        # a closure's functions (pipeline.optimizers.transforms.chain's stages call their transforms')
        cells = [cell.cell_contents for cell in function.__closure__ or ()]
        pending.extend(called for called in cells if _compiled_with_caller(called))
    return found


def _compiled_with_caller(value: Any) -> bool:
    """Whether a function a stage calls is compiled with it: a plain function, not numpy's or
    math's (numba types those itself) nor a draw the kernel implements (pipeline.draws)."""
    return isinstance(value, types.FunctionType) and not getattr(value, "declared", False) \
        and (value.__module__ or "").split(".")[0] not in _TYPED_BY_NUMBA


def stage_key(kind: str, functions: tuple) -> str:
    """A compiled kernel's identity: its kind, the names of the functions it inlines (a protocol's
    fused encoding's, an optimizer's stages, a problem's twin's) and of what they call
    (twins.called_functions), and a hash of the files that define them (or, for a function shipped
    by value to a Ray node without its file, of its bytecode): compiled's cache key of the
    kernel and the marker of its compilation."""
    digest, seen = hashlib.sha256(kind.encode()), set()
    for function in called_functions(*functions):
        digest.update(f"{function.__module__}.{function.__qualname__}".encode())
        try:
            path = inspect.getsourcefile(function)
            if path not in seen:
                seen.add(path)
                digest.update(Path(path).read_bytes())
        except (OSError, TypeError):
            digest.update(marshal.dumps(function.__code__))
    return digest.hexdigest()
