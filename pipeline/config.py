"""Experiment configs: load YAML, apply `--set` overrides, validate every field,
expand the grid times the seeds (shared/DESIGN.md §5).

Every rule violation raises ConfigError naming the field, the value and the
rule, before any work starts.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import math
from pathlib import Path
from typing import Any, Callable

import yaml

from pipeline.accounting.ledger import ACCOUNTING_MODES
from pipeline.engine import BACKENDS, SIMULATIONS
from pipeline.errors import ConfigError
from pipeline.optimizers import OPTIMIZERS, PARAMETER_MODES
from pipeline.problems import PROBLEMS
from pipeline.protocols import PROTOCOLS

SHUFFLE = "shuffle"
PRIVACY_MODELS = ("shuffle", "central", "local", "none")
PROTOCOL_NAMES = tuple(PROTOCOLS)
# The protocol a privacy model runs when the config names the model only.
DEFAULT_PROTOCOL = {"shuffle": "cjmp_vec", "central": "central_gaussian", "local": "local_l2", "none": "none"}
ROUND_METRICS = ("all", "final")
DP_SGD_SAMPLINGS = ("poisson", "shuffled")
PROBLEM_NAMES = tuple(PROBLEMS)
OPTIMIZER_NAMES = tuple(OPTIMIZERS)


@dataclasses.dataclass(frozen=True)
class Field:
    """One config field: how to read it and what it must satisfy.

    Attributes:
      parse: turns the raw value into the typed value, or raises ValueError
        with the rule as message.
      default: the value when absent (None: optional).
    """

    parse: Callable[[Any], Any]
    default: Any = None


def _integer(minimum: int, maximum: int | None = None) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        rule = f"must be an integer ≥ {minimum}" + (f" and ≤ {maximum}" if maximum is not None else "")
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

    return parse


def _real(low: float, high: float, low_open: bool, high_open: bool, why: str = "") -> Callable[[Any], float]:
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

    return parse


def _choice(names: tuple[str, ...], available: tuple[str, ...] | None = None) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if not isinstance(value, str) or value not in names:
            raise ValueError(f"must be one of {', '.join(names)}")
        if available is not None and value not in available:
            raise ValueError(f"is not implemented yet; available: {', '.join(available)}")
        return value

    return parse


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value


def _mlflow_uri(value: Any) -> str:
    text = _text(value)
    if "://" not in text and not text.startswith(("sqlite:", "file:")):
        raise ValueError("must be a URI such as sqlite:///mlflow.db, file:///path or http://host:port")
    return text


FIELDS: dict[str, Field] = {
    "experiment": Field(_text, "default"),
    "problem.name": Field(_choice(PROBLEM_NAMES), "quadratic"),
    "problem.dim": Field(_integer(1), 5),
    "problem.radius": Field(_real(0.0, math.inf, True, True), 1.0),
    "n_users": Field(_integer(1), 10_000),
    "optimizer.name": Field(_choice(OPTIMIZER_NAMES), "seq_sgd"),
    "optimizer.rounds": Field(_integer(1)),
    "optimizer.batch_size": Field(_integer(1)),
    "optimizer.step_size": Field(_real(0.0, math.inf, True, True)),
    "optimizer.parameters": Field(_choice(PARAMETER_MODES), "paper"),
    "optimizer.sampling": Field(_choice(DP_SGD_SAMPLINGS)),
    "privacy.model": Field(_choice(PRIVACY_MODELS)),  # default: the protocol's model
    "privacy.protocol": Field(_choice(PROTOCOL_NAMES)),  # default: DEFAULT_PROTOCOL of the model
    "privacy.levels": Field(_integer(1, 16)),  # m of seed 001's ℓ∞/ℓ2 randomizers
    "privacy.messages": Field(_integer(1)),  # s of seed 001's randomizers
    # Robust mode: the fraction γ of each round's users who send (Corollary A.9's range).
    "privacy.honest_fraction": Field(_real(1 / 3, 1.0, False, False, "seed 000, Corollary A.9")),
    "privacy.epsilon": Field(_real(0.0, 15.0, True, False, "seed 000, Theorem 3.2 needs 0 < ε ≤ 15"), 1.0),
    "privacy.delta": Field(_real(0.0, 0.5, True, True, "seed 000, Theorem 3.2 needs 0 < δ < 1/2"), 1e-6),
    "privacy.accounting": Field(_choice(ACCOUNTING_MODES), "paper"),
    "execution.backend": Field(_choice(BACKENDS), "ray"),
    "execution.shards": Field(_integer(1, 4096), 4),
    "execution.simulation": Field(_choice(SIMULATIONS), "exact"),
    "execution.block_size": Field(_integer(1), 4096),
    "tracking.mlflow_uri": Field(_mlflow_uri, "sqlite:///mlflow.db"),
    "tracking.out": Field(_text),
    "tracking.round_metrics": Field(_choice(ROUND_METRICS)),  # default: all (final for pnsgd)
}
# Fields that do not change a run's results: left out of its config hash.
NOT_IN_HASH = ("execution.backend", "execution.shards", "tracking.mlflow_uri", "tracking.out")
# Fields that do not change results cannot vary inside one grid either.
NOT_IN_GRID = ("experiment", *NOT_IN_HASH)
TOP_LEVEL_EXTRA = ("seeds", "grid")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One run: a grid point and a seed, every field resolved.

    Attributes:
      values: dotted field → value (optional fields absent when unset).
      seed: the run's seed.
    """

    values: dict[str, Any]
    seed: int

    def __getitem__(self, field: str) -> Any:
        return self.values.get(field)

    @property
    def config_hash(self) -> str:
        """Identifies the grid point (same for every seed); resume key with the seed."""
        kept = {k: v for k, v in sorted(self.values.items()) if k not in NOT_IN_HASH}
        return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()

    @property
    def run_id(self) -> str:
        return f"{self.config_hash[:12]}-s{self.seed}"

    def flat(self) -> dict[str, Any]:
        """The dotted fields and the seed (params, Parquet columns)."""
        return {**self.values, "seed": self.seed}

    def nested(self) -> dict[str, Any]:
        """The run as a config file would write it."""
        tree: dict[str, Any] = {}
        for dotted, value in self.flat().items():
            node = tree
            *parents, leaf = dotted.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        return tree


def _known_fields_under(prefix: str) -> str:
    names = sorted({f[len(prefix) + 1:].split(".")[0] for f in FIELDS if f.startswith(prefix + ".")})
    return ", ".join(names)


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if not isinstance(key, str):
            raise ConfigError(f"{prefix}{key}", key, "field names must be strings")
        dotted = f"{prefix}{key}"
        if not prefix and key in TOP_LEVEL_EXTRA:
            flat[dotted] = value
        elif dotted in FIELDS:
            flat[dotted] = value
        elif isinstance(value, dict) and any(f.startswith(dotted + ".") for f in FIELDS):
            flat.update(_flatten(value, dotted + "."))
        else:
            parent = prefix.rstrip(".")
            known = _known_fields_under(parent) if parent else ", ".join(
                sorted({f.split(".")[0] for f in FIELDS} | set(TOP_LEVEL_EXTRA)))
            raise ConfigError(dotted, value, f"unknown field; known here: {known}")
    return flat


def _checked(parse: Callable[[Any], Any], value: Any, shown_as: str) -> Any:
    try:
        return parse(value)
    except ValueError as err:
        raise ConfigError(shown_as, value, str(err)) from None


def _parse_field(dotted: str, value: Any, shown_as: str | None = None) -> Any:
    return _checked(FIELDS[dotted].parse, value, shown_as or dotted)


def _parse_seeds(value: Any) -> list[int]:
    seeds = value if isinstance(value, list) else [value]
    if not seeds:
        raise ConfigError("seeds", value, "must be a non-empty list of integers ≥ 0")
    parsed = [_checked(_integer(0), seed, f"seeds[{i}]") for i, seed in enumerate(seeds)]
    if len(set(parsed)) != len(parsed):
        raise ConfigError("seeds", value, "must not repeat a seed")
    return parsed


def _parse_grid(value: Any) -> dict[str, list[Any]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError("grid", value, "must be a mapping of dotted field names to lists of values")
    grid: dict[str, list[Any]] = {}
    for key, options in value.items():
        if key not in FIELDS or key in NOT_IN_GRID:
            raise ConfigError(f"grid.{key}", options, "unknown grid key; must be a dotted config field "
                              "such as n_users or privacy.epsilon (not experiment, execution.backend, "
                              "execution.shards or tracking.*)")
        if not isinstance(options, list) or not options:
            raise ConfigError(f"grid.{key}", options, "must be a non-empty list of values")
        grid[key] = [_parse_field(key, option, f"grid.{key}[{i}]") for i, option in enumerate(options)]
        if len(set(grid[key])) != len(grid[key]):
            raise ConfigError(f"grid.{key}", options, "repeats a value; every grid point must be distinct")
    return grid


def _apply_override(tree: dict[str, Any], item: str) -> None:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError("--set", item, "must be key=value, e.g. privacy.epsilon=4")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        raise ConfigError(f"--set {key}", raw, "value is not valid YAML") from None
    if key.startswith("grid."):
        tree.setdefault("grid", {})
        if not isinstance(tree["grid"], dict):
            raise ConfigError("grid", tree["grid"], "must be a mapping of dotted field names to lists of values")
        tree["grid"][key[len("grid."):]] = value
        return
    if key not in FIELDS and key not in TOP_LEVEL_EXTRA:
        raise ConfigError(f"--set {key}", value, "unknown field; use a dotted config field such as privacy.epsilon")
    node = tree
    *parents, leaf = key.split(".")
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(part, child, "must be a mapping")
        node = child
    node[leaf] = value


def read_config(path: str | Path, overrides: list[str] = ()) -> dict[str, Any]:
    """Reads a YAML config and applies `--set key=value` overrides.

    Args:
      path: the YAML file.
      overrides: "dotted.key=value" strings (values parsed as YAML).

    Returns:
      The nested config, unvalidated.

    Raises:
      ConfigError: unreadable file, invalid YAML, a non-mapping document or
        a malformed override.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError("config", str(path), f"cannot be read ({err.strerror or err})") from None
    try:
        tree = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError("config", str(path), f"is not valid YAML{where}") from None
    tree = {} if tree is None else tree
    if not isinstance(tree, dict):
        raise ConfigError("config", str(path), "must be a YAML mapping of fields")
    tree = copy.deepcopy(tree)
    for item in overrides:
        _apply_override(tree, item)
    return tree


def expand(tree: dict[str, Any]) -> list[RunConfig]:
    """Validates a config and expands grid × seeds into runs.

    Args:
      tree: the nested config (from read_config).

    Returns:
      One RunConfig per (grid point, seed), in grid order then seed order.

    Raises:
      ConfigError: any field that breaks its rule.
    """
    flat = _flatten(tree)
    seeds = _parse_seeds(flat.pop("seeds", [0]))
    grid = _parse_grid(flat.pop("grid", None))
    values: dict[str, Any] = {}
    for dotted, field in FIELDS.items():
        if dotted in flat:
            values[dotted] = _parse_field(dotted, flat[dotted])
        elif field.default is not None:
            values[dotted] = field.default
    values.setdefault("tracking.out", str(Path("results") / values["experiment"]))
    runs = []
    keys = list(grid)
    for point in itertools.product(*(grid[k] for k in keys)):
        point_values = _resolve_privacy({**values, **dict(zip(keys, point))})
        runs.extend(RunConfig(point_values, seed) for seed in seeds)
    return runs


def _resolve_privacy(values: dict[str, Any]) -> dict[str, Any]:
    """Fills privacy.model and privacy.protocol from each other and checks they agree.

    Raises:
      ConfigError: a protocol of another privacy model.
    """
    model, protocol = values.get("privacy.model"), values.get("privacy.protocol")
    if protocol is None:
        protocol = DEFAULT_PROTOCOL[model or SHUFFLE]
    protocol_model = PROTOCOLS[protocol].model
    if model is not None and model != protocol_model:
        raise ConfigError("privacy.model", model, f"must be {protocol_model}, the model of privacy.protocol {protocol}")
    return {**values, "privacy.model": protocol_model, "privacy.protocol": protocol}
