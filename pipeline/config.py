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
import os
import urllib.parse
from pathlib import Path
from typing import Any, Callable

import yaml

from pipeline import plugins
from pipeline.accounting.compositions import ACCOUNTING_MODES
from pipeline.engine import BACKENDS, SIMULATIONS
from pipeline.errors import ConfigError, items_within as _items_within
from pipeline.optimizers import PARAMETER_MODES
from pipeline.options import choice as _choice
from pipeline.options import integer as _integer
from pipeline.options import real as _real
from pipeline.options import text as _text
from pipeline.protocols import DEFAULT_PROTOCOL
from pipeline.problems.records import parse_records_per_user
from pipeline.protocols.base import PRIVACY_MODELS
from pipeline.uris import redact

RECORD, USER = "record", "user"
MIN_DELTA = 1e-100  # the smallest δ accepted: the accountants divide by δ and by δ/(d + 1)
MAX_DEPTH = 32  # the deepest nesting of mappings and lists a config may have (every field sits within 4)
MAX_RUNS = 100_000  # the most runs (grid points × seeds) a config may expand to
MAX_GRID_ITEMS = 10_000  # the most scalars one grid value may hold (a YAML alias bomb expands to billions)
UNITS = (RECORD, USER)

SHUFFLE = "shuffle"
ROUND_METRICS = ("all", "final")
RUN_PLOTS = ("auto", "all", "none")
# Sections whose plug-in class declares further options (section.option), and the field naming the class.
PLUGIN_SECTIONS = {"problem": ("problem", "problem.name"), "optimizer": ("optimizer", "optimizer.name"),
                   "privacy": ("protocol", "privacy.protocol")}


@dataclasses.dataclass(frozen=True)
class Field:
    """One config field: how to read it and what it must satisfy.

    Attributes:
      parse: turns the raw value into the typed value, or raises ValueError
        with the rule as message.
      default: the value when absent (None: optional).
      kind: the type of its values (int, float or str): its column's type in
        every results file, null where unset, so the files share one schema.
    """

    parse: Callable[[Any], Any]
    default: Any = None
    kind: type = str


def _plugin(kind: str) -> Callable[[Any], str]:
    """A parser of a plug-in's name, which imports nothing: `_parse_options` resolves it to a
    class satisfying its contract once every field is valid (a plug-in's module runs code)."""
    def parse(value: Any) -> str:
        try:
            return plugins.check_name(kind, value)
        except plugins.PluginError as error:
            raise ValueError(str(error)) from None

    return parse


def _mlflow_uri(value: Any) -> str:
    text = _text(value)
    if "://" not in text and not text.startswith(("sqlite:", "file:")):
        raise ValueError("must be a URI such as sqlite:///mlflow.db, file:///path or http://host:port")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(text).query)
    if text.startswith("sqlite:") and (":memory:" in text or text.rstrip("/") in ("sqlite:", "sqlite:")
                                       or "memory" in (mode.lower() for mode in query.get("mode", []))):
        # SQLAlchemy opens `sqlite://`, `sqlite:///:memory:` and a URI filename with mode=memory
        # (`sqlite:///file:db?mode=memory&uri=true`) in memory: every record would vanish at exit.
        raise ValueError("must name a database file, e.g. sqlite:///mlflow.db: an in-memory SQLite store "
                         "loses every run when the process ends")
    return text


# The largest n: planning, Parquet and the shard data grow with n; the largest run tested has 10⁸ users.
MAX_USERS = 10**10
# Seeds are stored as int64 in runs.parquet: a larger one would turn the column to float64 and collapse seeds.
MAX_SEED = 2**63 - 1
# The most rounds a run may plan (full_gd's optimizer.rounds, or n / batch size for sequential
# optimizers). Every round is recorded (memory.RECORD_BYTES, which the memory rule counts) and run; a group of
# equal rounds is planned and accounted at once when the protocol's plan depends on the budget alone
# (Protocol.plans_per_budget: the built-ins and a plug-in that keeps one's plan), else round by round.
MAX_ROUNDS, PLUGIN_MAX_ROUNDS = 10**8, 10**7
ROUNDS_REASON = ("every round is recorded and a protocol with a plan of its own is planned round by round; at most "
                 "10⁸ rounds, 10⁷ with a plug-in protocol that plans its own calls")
# The experiment names the default results folder results/<experiment>: one path component.
MAX_NAME_CHARS, MAX_NAME_BYTES = 200, 255


def _records_per_user(value: Any) -> str:
    """records_per_user in its canonical text ("3", "poisson:20", "zipf:1.5,max:1000")."""
    return str(parse_records_per_user(value))


_records_per_user.rule = "an integer m ≥ 1, {poisson: λ} or {zipf: a, max: M}"


def _experiment(value: Any) -> str:
    """A name that is one safe folder name (results/<experiment>) and an MLflow experiment name."""
    name = _text(value)
    if (len(name) > MAX_NAME_CHARS or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES
            or name in (".", "..") or "/" in name or "\\" in name
            or any(ord(char) < 32 or ord(char) == 127 for char in name)):
        raise ValueError(f"must be one folder name (the default out is results/<experiment>): at most "
                         f"{MAX_NAME_CHARS} characters and {MAX_NAME_BYTES} bytes in UTF-8, without '/', '\\', "
                         "NUL or other control characters, and not '.' or '..'")
    return name


def _folder(value: Any) -> str:
    """A folder path the OS can name (the results folder)."""
    path = _text(value)
    if "\0" in path:
        raise ValueError("must be a folder path without a NUL character")
    return path


def _with_reason(parse: Callable[[Any], Any], why: str) -> Callable[[Any], Any]:
    """A parser whose rule is followed by the reason for its bound."""
    def parse_with_reason(value: Any) -> Any:
        try:
            return parse(value)
        except ValueError as err:
            raise ValueError(f"{err} ({why})") from None

    parse_with_reason.rule = f"{getattr(parse, 'rule', '')} ({why})"
    return parse_with_reason


FIELDS: dict[str, Field] = {
    "experiment": Field(_experiment, "default"),
    "problem.name": Field(_plugin("problem"), "quadratic"),
    "problem.dim": Field(_integer(1), 5, kind=int),
    "problem.radius": Field(_real(0.0, math.inf, True, True), 1.0, kind=float),
    # Synthetic users' records: m, {poisson: λ} or {zipf: a, max: M}; stored as its text ("1", "poisson:20").
    "problem.records_per_user": Field(_records_per_user, "1"),
    "n_users": Field(_with_reason(_integer(1, MAX_USERS), "the largest run tested has 10⁸ users"), 10_000, kind=int),
    "optimizer.name": Field(_plugin("optimizer"), "seq_sgd"),
    "optimizer.rounds": Field(_with_reason(_integer(1, MAX_ROUNDS), ROUNDS_REASON), kind=int),
    "optimizer.batch_size": Field(_integer(1), kind=int),
    "optimizer.step_size": Field(_real(0.0, math.inf, True, True), kind=float),
    "optimizer.parameters": Field(_choice(PARAMETER_MODES), "paper"),
    "privacy.model": Field(_choice(PRIVACY_MODELS)),  # default: the protocol's model
    "privacy.protocol": Field(_plugin("protocol")),  # default: DEFAULT_PROTOCOL of the model
    # Robust mode: the fraction γ of each round's users who send (Corollary A.9's range).
    "privacy.honest_fraction": Field(_real(1 / 3, 1.0, False, False, "seed 000, Corollary A.9"), kind=float),
    "privacy.epsilon": Field(_real(0.0, 15.0, True, False, "seed 000, Theorem 3.2 needs 0 < ε ≤ 15"), 1.0, kind=float),
    "privacy.delta": Field(_real(MIN_DELTA, 0.5, False, True, "seed 000, Theorem 3.2 needs 0 < δ < 1/2; below "
                                 f"{MIN_DELTA:g}, δ/(d + 1) and 1/δ leave floating point"), 1e-6, kind=float),
    "privacy.accounting": Field(_choice(ACCOUNTING_MODES), "paper"),
    # What a neighbouring dataset changes: one record, or one user's whole dataset (the same with one record each).
    "privacy.unit": Field(_choice(UNITS), USER),
    "execution.backend": Field(_choice(BACKENDS), "ray"),
    "execution.shards": Field(_integer(1, 4096), 4, kind=int),
    "execution.simulation": Field(_choice(SIMULATIONS), "exact"),
    "execution.block_size": Field(_integer(1), 4096, kind=int),
    # A run estimated (pipeline/work.py) above this many minutes is refused before any work.
    "execution.max_minutes": Field(_real(0.0, math.inf, True, True), kind=float),
    "tracking.mlflow_uri": Field(_mlflow_uri, "sqlite:///mlflow.db"),
    "tracking.out": Field(_folder),
    "tracking.round_metrics": Field(_choice(ROUND_METRICS)),  # default: all (final for pnsgd)
    # Each finished run's figure in MLflow: every run, none, or auto (grids of at most 100 runs to do).
    "tracking.run_plots": Field(_choice(RUN_PLOTS), "auto"),
}
# Fields that do not change a run's results: left out of its config hash.
NOT_IN_HASH = ("execution.backend", "execution.shards", "execution.max_minutes", "tracking.mlflow_uri", "tracking.out",
               "tracking.run_plots")
# Fields added after results existed: in the hash only when not at their default, so earlier runs keep their identity.
HASHED_UNLESS_DEFAULT = ("problem.records_per_user", "privacy.unit")
# Fields that do not change results cannot vary inside one grid either.
NOT_IN_GRID = ("experiment", *NOT_IN_HASH)
TOP_LEVEL_EXTRA = ("seeds", "grid")
# Run display names: at most this long; these fields are always in them.
NAME_LIMIT = 100
_ALWAYS_NAMED = ("optimizer.name", "n_users", "privacy.epsilon")
# Short prefixes for numeric fields in names (others use their last dotted part).
_NAME_PREFIX = {"problem.dim": "d", "problem.radius": "R", "optimizer.rounds": "T", "optimizer.batch_size": "B",
                "optimizer.step_size": "lr", "privacy.honest_fraction": "honest", "execution.block_size": "block"}


def _short_number(value: Any) -> str:
    """A number as written in run names: `:g` where that is exact, else repr."""
    if isinstance(value, float):
        text = f"{value:g}"
        return text if float(text) == value else repr(value)
    return str(value)


def _short_item(key: str, value: Any) -> str:
    """A grid key's value in a run name: a string bare, other values after a short prefix of the key."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = _short_number(value)
    else:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    return f"{_NAME_PREFIX.get(key, key.rsplit('.', 1)[-1])}{text}"


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One run: a grid point and a seed, every field resolved.

    Attributes:
      values: dotted field → value (optional fields absent when unset).
      seed: the run's seed.
      varying: the grid keys that vary across the run's grid, in grid order;
        named in `display_name`, left out of the hash, params and Parquet.
    """

    values: dict[str, Any]
    seed: int
    varying: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    def __getitem__(self, field: str) -> Any:
        return self.values.get(field)

    def display_name(self) -> str:
        """A readable name, distinct across a grid's points: optimizer, varying keys, n, ε, seed.

        Returns:
          `optimizer[-varying...]-n<n>-eps<ε>-s<seed>`, at most NAME_LIMIT
          characters; a longer one has its varying part cut and the grid
          point's hash appended, so it stays distinct.
        """
        head = str(self["optimizer.name"])
        tail = f"n{self['n_users']}-eps{_short_number(self['privacy.epsilon'])}-s{self.seed}"
        middle = "-".join(_short_item(key, self[key]) for key in self.varying if key not in _ALWAYS_NAMED)
        name = "-".join(part for part in (head, middle, tail) if part)
        if len(name) <= NAME_LIMIT:
            return name
        tag = self.config_hash[:8]
        room = max(NAME_LIMIT - len(tail) - len(tag) - 3, 0)
        return "-".join(part for part in (f"{head}-{middle}"[:room].rstrip("-"), tag, tail) if part)

    @property
    def config_hash(self) -> str:
        """Identifies the grid point (same for every seed); resume key with the seed."""
        kept = {k: v for k, v in sorted(self.values.items()) if k not in NOT_IN_HASH
                and not (k in HASHED_UNLESS_DEFAULT and v == FIELDS[k].default)}
        return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()

    @property
    def run_id(self) -> str:
        return f"{self.config_hash[:12]}-s{self.seed}"

    def flat(self) -> dict[str, Any]:
        """The dotted fields and the seed as they are recorded (params, Parquet columns, config.yaml):
        a URI's credentials redacted (pipeline.uris.redact)."""
        return {**{field: redact(value) if isinstance(value, str) else value for field, value in self.values.items()},
                "seed": self.seed}

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


def is_option(dotted: str) -> bool:
    """Whether a dotted name is a plug-in option (section.option, checked against the class's declaration)."""
    section, _, option = dotted.partition(".")
    return section in PLUGIN_SECTIONS and bool(option) and "." not in option and dotted not in FIELDS


def is_field(dotted: str) -> bool:
    """Whether a dotted name is a config field or a plug-in option (a column of runs.parquet)."""
    return dotted in FIELDS or is_option(dotted)


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if not isinstance(key, str):
            raise ConfigError(f"{prefix}{key}", key, "field names must be strings")
        dotted = f"{prefix}{key}"
        if not prefix and key in TOP_LEVEL_EXTRA:
            flat[dotted] = value
        elif dotted in FIELDS or (is_option(dotted) and not isinstance(value, dict)):
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
    seed_rule = _with_reason(_integer(0, MAX_SEED), "seeds are stored as int64 in runs.parquet")
    parsed = [_checked(seed_rule, seed, f"seeds[{i}]") for i, seed in enumerate(seeds)]
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
        if not is_field(key) or key in NOT_IN_GRID:
            raise ConfigError(f"grid.{key}", options, "unknown grid key; must be a dotted config field "
                              "such as n_users or privacy.epsilon (not experiment, execution.backend, "
                              "execution.shards or tracking.*)")
        if not isinstance(options, list) or not options:
            raise ConfigError(f"grid.{key}", options, "must be a non-empty list of values")
        if _items_within(options, MAX_GRID_ITEMS) < 0:  # counted before anything walks it whole
            raise ConfigError(f"grid.{key}", options, f"holds more than {MAX_GRID_ITEMS:,} values (a YAML alias "
                                                      "expands each time it is used)")
        # A plug-in option is checked per grid point, against the class that point runs.
        grid[key] = [_parse_field(key, option, f"grid.{key}[{i}]") if key in FIELDS else option
                     for i, option in enumerate(options)]
        if len({json.dumps(value, sort_keys=True, default=repr) for value in grid[key]}) != len(grid[key]):
            raise ConfigError(f"grid.{key}", options, "repeats a value; every grid point must be distinct")
    return grid


def _apply_override(tree: dict[str, Any], item: str) -> None:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError("--set", item, "must be key=value, e.g. privacy.epsilon=4")
    try:
        value = load_yaml(raw, f"--set {key}", f"{key}.")
    except yaml.YAMLError:
        raise ConfigError(f"--set {key}", raw, "value is not valid YAML") from None
    if key.startswith("grid."):
        tree.setdefault("grid", {})
        if not isinstance(tree["grid"], dict):
            raise ConfigError("grid", tree["grid"], "must be a mapping of dotted field names to lists of values")
        tree["grid"][key[len("grid."):]] = value
        return
    if not is_field(key) and key not in TOP_LEVEL_EXTRA:
        raise ConfigError(f"--set {key}", value, "unknown field; use a dotted config field such as privacy.epsilon")
    node = tree
    *parents, leaf = key.split(".")
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(part, child, "must be a mapping")
        node = child
    if value is None:  # `--set key=null` takes the field out of the config: its default applies
        node.pop(leaf, None)
    else:
        node[leaf] = value


def _refuse_duplicate_keys(node: yaml.Node, prefix: str, visited: set[int], source: str) -> None:
    """Refuses a mapping that names a key twice (PyYAML would silently keep the last).

    Each node is visited once, so shared (aliased) nodes cost nothing more.

    Raises:
      ConfigError: naming the dotted key and both lines.
    """
    if id(node) in visited:
        return
    visited.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key_node.tag != "tag:yaml.org,2002:merge":
                line = key_node.start_mark.line + 1
                if key in lines:
                    raise ConfigError(f"{prefix}{key}", source,
                                      f"is given twice in one mapping (lines {lines[key]} and {line}); YAML would "
                                      "silently keep only the last: remove one")
                lines[key] = line
            _refuse_duplicate_keys(value_node, f"{prefix}{key}." if key is not None else prefix, visited, source)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_duplicate_keys(item, prefix, visited, source)


def load_yaml(text: str, source: str, prefix: str = "") -> Any:
    """Parses YAML like yaml.safe_load, refusing duplicate keys.

    Args:
      text: the YAML text.
      source: where it came from (a file, or --set), for the error line.
      prefix: the dotted field the document sits under ("privacy." for --set privacy=...).

    Returns:
      The parsed document (None if empty).

    Raises:
      yaml.YAMLError: invalid YAML.
      ConfigError: a mapping that names a key twice.
    """
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:  # PyYAML composes recursively: a document nested ~1000 deep ends it
            raise ConfigError("config", source, f"nests mappings or lists more than {MAX_DEPTH} deep") from None
        if node is None:
            return None
        _refuse_deep_nesting(node, source)
        _refuse_duplicate_keys(node, prefix, set(), source)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _refuse_deep_nesting(root: yaml.Node, source: str) -> None:
    """Refuses a document nested more than MAX_DEPTH deep (walked without recursion, each node once)."""
    stack, seen = [(root, 1)], set()
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError("config", source, f"nests mappings or lists more than {MAX_DEPTH} deep")
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack.extend((child, depth + 1) for pair in node.value for child in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)


def read_config(path: str | Path, overrides: list[str] = ()) -> dict[str, Any]:
    """Reads a YAML config and applies `--set key=value` overrides.

    Args:
      path: the YAML file.
      overrides: "dotted.key=value" strings (values parsed as YAML).

    Returns:
      The nested config, unvalidated.

    Raises:
      ConfigError: an unreadable or non-UTF-8 file, invalid YAML, a key given
        twice in one mapping, a non-mapping document or a malformed override.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError("config", str(path), f"cannot be read ({err.strerror or err})") from None
    except UnicodeDecodeError as err:  # a binary file, or another encoding
        raise ConfigError("config", str(path), f"is not UTF-8 text (byte {err.start} cannot be decoded): "
                          "a config is a YAML text file") from None
    try:
        tree = load_yaml(text, str(path))
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
    values.update({dotted: value for dotted, value in flat.items() if is_option(dotted)})
    if "tracking.mlflow_uri" not in flat and os.environ.get("MLFLOW_TRACKING_URI"):  # MLflow's own variable
        values["tracking.mlflow_uri"] = _parse_field("tracking.mlflow_uri", os.environ["MLFLOW_TRACKING_URI"],
                                                     "tracking.mlflow_uri (from MLFLOW_TRACKING_URI)")
    values.setdefault("tracking.out", str(Path("results") / values["experiment"]))
    keys = list(grid)
    runs = math.prod(len(options) for options in grid.values()) * len(seeds)
    if runs > MAX_RUNS:
        raise ConfigError("grid", {key: len(options) for key, options in grid.items()},
                          f"expands to {runs:,} runs ({' × '.join(str(len(o)) for o in grid.values())} grid points × "
                          f"{len(seeds)} seeds); at most {MAX_RUNS:,} in one config: split it")
    points = [_parse_options(_resolve_privacy({**values, **dict(zip(keys, point))}), keys)
              for point in itertools.product(*(grid[k] for k in keys))]
    # The grid keys whose resolved values differ between points: the run names show them.
    varying = tuple(k for k in keys
                    if len({json.dumps(p.get(k), sort_keys=True, default=repr) for p in points}) > 1)
    return [RunConfig(point_values, seed, varying) for point_values in points for seed in seeds]


def _resolved(kind: str, field: str, values: dict[str, Any], grid_keys: list[str] = ()) -> type:
    """The class a grid point's field names: the first import of a plug-in's module, once every
    field of the config is valid.

    Raises:
      ConfigError: the name does not import, or its class breaks its contract.
    """
    try:
        return plugins.resolve(kind, values[field])
    except plugins.PluginError as error:
        raise ConfigError(f"grid.{field}" if field in grid_keys else field, values[field], str(error)) from None


def _resolve_privacy(values: dict[str, Any]) -> dict[str, Any]:
    """Fills privacy.model and privacy.protocol from each other and checks they agree.

    Raises:
      ConfigError: a protocol of another privacy model.
    """
    model, protocol = values.get("privacy.model"), values.get("privacy.protocol")
    if protocol is None:
        protocol = DEFAULT_PROTOCOL[model or SHUFFLE]
    protocol_model = _resolved("protocol", "privacy.protocol", {**values, "privacy.protocol": protocol}).model
    if model is not None and model != protocol_model:
        raise ConfigError("privacy.model", model, f"must be {protocol_model}, the model of privacy.protocol {protocol}")
    return {**values, "privacy.model": protocol_model, "privacy.protocol": protocol}


def _parse_options(values: dict[str, Any], grid_keys: list[str]) -> dict[str, Any]:
    """Checks every plug-in option against the declarations of the class its section names,
    and fills the declared defaults.

    Args:
      values: one grid point's fields.
      grid_keys: the grid's keys (an error names grid.<key> for those).

    Raises:
      ConfigError: an option the class does not declare, or a value that breaks its rule.
    """
    parsed = dict(values)
    for section, (kind, name_field) in PLUGIN_SECTIONS.items():
        cls = _resolved(kind, name_field, values, grid_keys)
        declared = {option.name: option for option in cls.options}
        for dotted in [d for d in values if is_option(d) and d.startswith(section + ".")]:
            option = declared.get(dotted.partition(".")[2])
            shown = f"grid.{dotted}" if dotted in grid_keys else dotted
            if option is None:
                raise ConfigError(shown, values[dotted], _undeclared(kind, dotted, name_field, values[name_field]))
            parsed[dotted] = _checked(option.parse, values[dotted], shown)
        for name, option in declared.items():
            if option.default is not None:
                parsed.setdefault(f"{section}.{name}", option.default)
    return parsed


def _undeclared(kind: str, dotted: str, name_field: str, name: str) -> str:
    """The rule an undeclared option breaks: another class's option, or an unknown field."""
    option = dotted.partition(".")[2]
    builtins = plugins.kinds()[kind].builtins.values()
    if any(option == declared.name for cls in builtins for declared in cls.options):
        return f"does not apply to {name_field} {name}"
    section = dotted.partition(".")[0]
    own = ", ".join(o.name for o in plugins.resolve(kind, name).options) or "none"
    return f"unknown field; known here: {_known_fields_under(section)}; options of {name}: {own}"

