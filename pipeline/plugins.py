"""Finds the class a config names: a built-in short name, a short name that an
installed package registers through an entry point, or `module:Class`
(shared/DESIGN.md §2, "Extension contracts").

Entry-point groups, one per kind:
  shuffle_sco.problems, shuffle_sco.protocols, shuffle_sco.optimizers

Every class is checked against its contract (base class, abstract members
implemented, declared attributes well-formed) before any work starts. A
problem's constants (L, β, λ, D, ...) are values of an instance, computed from
its dim, radius and options and for some from the run, so they are checked on
the problem a run uses, where `for_run` returns it
(pipeline.problems.base.check_constants), still before any work.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import pathlib
import sys
from typing import Any, Callable

from pipeline.options import Option

KINDS = ("problem", "protocol", "optimizer")


class PluginError(ValueError):
    """A name that does not resolve to a class satisfying its contract (the message is the rule)."""


@dataclasses.dataclass(frozen=True)
class Kind:
    """One kind of plug-in: its base class, its built-ins and its entry-point group."""

    base: type
    builtins: dict[str, type]
    group: str
    check: Callable[[type], None]


def _check_problem(cls: type) -> None:
    if not isinstance(getattr(cls, "name", None), str):
        raise PluginError(f"{cls.__qualname__} must set `name` (a string)")


def _check_protocol(cls: type) -> None:
    from pipeline.protocols.base import CAPABILITIES, PRIVACY_MODELS

    if not isinstance(getattr(cls, "name", None), str):
        raise PluginError(f"{cls.__qualname__} must set `name` (a string)")
    if cls.model not in PRIVACY_MODELS:
        raise PluginError(f"{cls.__qualname__}.model = {cls.model!r} must be one of {', '.join(PRIVACY_MODELS)}")
    unknown = set(cls.capabilities) - set(CAPABILITIES)
    if unknown:
        raise PluginError(f"{cls.__qualname__}.capabilities {sorted(unknown)}: known are {', '.join(CAPABILITIES)}")
    if not cls.supports_audit and not (isinstance(cls.audit_refusal, str) and cls.audit_refusal.strip()):
        raise PluginError(f"{cls.__qualname__} sets supports_audit = False: it must say why in `audit_refusal` "
                          "(the audit prints it)")


def _check_optimizer(cls: type) -> None:
    from pipeline.optimizers.base import OVERRIDES
    from pipeline.protocols.base import CAPABILITIES

    if not isinstance(getattr(cls, "name", None), str):
        raise PluginError(f"{cls.__qualname__} must set `name` (a string)")
    # The runner passes, and refuses, overrides by this declaration: a name outside OVERRIDES is a typo.
    if not (isinstance(cls.overrides, (set, frozenset)) and cls.overrides <= set(OVERRIDES)):
        raise PluginError(f"{cls.__qualname__}.overrides = {cls.overrides!r} must be a frozenset of the "
                          f"optimizer.<field>s its from_config reads, among {', '.join(OVERRIDES)}")
    if "from_config" not in {name for klass in cls.__mro__[:-1] for name in vars(klass)} or \
            getattr(cls.from_config, "__isabstractmethod__", False):
        raise PluginError(f"{cls.__qualname__} must define the classmethod from_config")
    unknown = set(cls.requires) - set(CAPABILITIES)
    if unknown:
        raise PluginError(f"{cls.__qualname__}.requires {sorted(unknown)}: known are {', '.join(CAPABILITIES)}")


@functools.cache
def kinds() -> dict[str, Kind]:
    """The three kinds, their bases and built-ins (imported on first use)."""
    from pipeline.optimizers import OPTIMIZERS
    from pipeline.optimizers.base import Optimizer
    from pipeline.problems import PROBLEMS
    from pipeline.problems.base import Problem
    from pipeline.protocols import PROTOCOLS
    from pipeline.protocols.base import Protocol

    return {
        "problem": Kind(Problem, PROBLEMS, "shuffle_sco.problems", _check_problem),
        "protocol": Kind(Protocol, PROTOCOLS, "shuffle_sco.protocols", _check_protocol),
        "optimizer": Kind(Optimizer, OPTIMIZERS, "shuffle_sco.optimizers", _check_optimizer),
    }


def _entry_points(group: str) -> dict[str, importlib.metadata.EntryPoint]:
    return {point.name: point for point in importlib.metadata.entry_points(group=group)}


def short_names(kind: str) -> tuple[str, ...]:
    """The short names a config may use for `kind`: built-ins, then installed entry points."""
    registered = kinds()[kind]
    return (*registered.builtins, *sorted(set(_entry_points(registered.group)) - set(registered.builtins)))


def _load_module(module_name: str):
    """Imports a dotted module (from the working directory too, as `python -m` would),
    or a Python file given by its path ("plugins/my_sgd.py")."""
    if module_name.endswith(".py"):
        path = pathlib.Path(module_name).resolve()
        name = f"shuffle_sco_plugin_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}_{path.stem}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or not path.is_file():
                raise FileNotFoundError(f"no file {path}")
            source = path.read_bytes()  # read once: the bytes hashed are the bytes executed
            module = importlib.util.module_from_spec(spec)
            module.__source_sha256__ = hashlib.sha256(source).hexdigest()
            sys.modules[name] = module  # dataclasses and pickling look the module up by name
            try:
                exec(compile(source, str(path), "exec"), module.__dict__)
            except BaseException:
                del sys.modules[name]
                raise
        return sys.modules[name]
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    module = importlib.import_module(module_name)
    if not hasattr(module, "__source_sha256__") and getattr(module, "__file__", None):
        # Hashed as it is imported (an installed module's file is read now, the moment it runs).
        module.__source_sha256__ = hashlib.sha256(pathlib.Path(module.__file__).read_bytes()).hexdigest()
    return module


def _import(path: str) -> type:
    module_name, _, attribute = path.rpartition(":")
    try:
        # What a plug-in prints goes to stderr: stdout carries `ledger`'s and `audit`'s JSON.
        with contextlib.redirect_stdout(sys.stderr):
            module = _load_module(module_name)
    except (Exception, SystemExit) as error:  # any import failure, sys.exit included, is the user's config to fix
        raise PluginError(f"module {module_name!r} does not import ({type(error).__name__}: {error})") from None
    found = module
    for part in attribute.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise PluginError(f"module {module_name!r} has no attribute {attribute!r}")
    return found


def check_name(kind: str, name: Any) -> str:
    """A config's plug-in name, checked without importing anything: a built-in, an installed
    entry point, or "module:Class" (its code runs only when `resolve` imports it, once the rest
    of the config is valid: naming a plug-in runs its code, like `pip install`).

    Raises:
      PluginError: a name that can be none of these.
    """
    registered = kinds()[kind]
    module, _, attribute = name.rpartition(":") if isinstance(name, str) else ("", "", "")
    if isinstance(name, str) and (name in registered.builtins or (module and attribute)
                                  or name in _entry_points(registered.group)):
        return name
    raise PluginError(f"must be one of {', '.join(short_names(kind))}, or module:Class")


def resolve(kind: str, name: str) -> type:
    """The class a config's name stands for, checked against its contract (see `_resolve`).
    A file path is read from the working directory: it is remembered per directory, so that
    the same relative name in another folder (a notebook that changes directory) finds that
    folder's file."""
    relative = isinstance(name, str) and name.rpartition(":")[0].endswith(".py") and \
        not os.path.isabs(name.rpartition(":")[0])
    return _resolve(kind, name, os.getcwd() if relative else None)


@functools.cache
def _resolve(kind: str, name: str, folder: str | None) -> type:
    """The class a config's name stands for, checked against its contract.

    Args:
      kind: "problem", "protocol" or "optimizer".
      name: a built-in short name, an entry point's name, "package.module:Class"
        (importable, or from the working directory), or "path/to/file.py:Class".
      folder: the working directory a relative file path is read from (the cache's key only).

    Returns:
      The class.

    Raises:
      PluginError: the name does not import, or the class breaks its contract.
    """
    registered = kinds()[kind]
    if not isinstance(name, str) or not name:
        raise PluginError(f"must be one of {', '.join(short_names(kind))}, or module:Class")
    if name in registered.builtins:
        return registered.builtins[name]
    if ":" in name:
        cls = _import(name)
    else:
        point = _entry_points(registered.group).get(name)
        if point is None:
            raise PluginError(f"must be one of {', '.join(short_names(kind))}, or module:Class")
        try:
            cls = point.load()
        except Exception as error:
            raise PluginError(f"entry point {name!r} ({point.value}) does not load "
                              f"({type(error).__name__}: {error})") from None
    if not (inspect.isclass(cls) and issubclass(cls, registered.base)):
        raise PluginError(f"{name} is not a subclass of {registered.base.__module__}.{registered.base.__qualname__}")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise PluginError(f"{name} does not implement the contract's abstract members: {missing}")
    if not all(isinstance(option, Option) for option in getattr(cls, "options", ())):
        raise PluginError(f"{name}.options must be a tuple of pipeline.options.Option")
    registered.check(cls)
    return cls


def source_files(named: dict[str, tuple[str, str]]) -> dict[str, dict[str, str]]:
    """Where each plug-in a run names comes from, to be recorded with the run: its file and that
    file's SHA-256 (built-ins left out: the package's version and commit say theirs).

    Args:
      named: config field → (kind, name), e.g. {"problem.name": ("problem", "my.py:Mine")}.

    Returns:
      field → {"name", "file", "sha256"}; empty when the run uses built-ins only.
    """
    found = {}
    for field, (kind, name) in named.items():
        if name in kinds()[kind].builtins:
            continue
        cls = resolve(kind, name)
        # The module the name imports (its class may be defined elsewhere and re-exported).
        module = _load_module(name.rpartition(":")[0]) if ":" in name else inspect.getmodule(cls)
        path = pathlib.Path(inspect.getfile(module)).resolve()
        # The hash of what was imported, not of the file as it is now (it may have been edited since).
        digest = getattr(module, "__source_sha256__", None) or hashlib.sha256(path.read_bytes()).hexdigest()
        found[field] = {"name": name, "file": str(path), "sha256": digest}
    return found


resolve.cache_clear = _resolve.cache_clear  # what a test or notebook calls to forget the classes found
