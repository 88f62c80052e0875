"""The house's walls, read from the imports with `ast` (shared/DESIGN.md §2):
the only allowed import directions, Ray only in the engine, MLflow and Parquet
writing only in tracking, no particular protocol named outside protocols/."""
from __future__ import annotations

import ast
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "pipeline"

# Layer of every top-level module or folder of the package: a module may import its own
# layer or a lower one, never a higher one.
LAYERS = {
    "errors": 0, "options": 0, "uris": 0, "numerics": 0, "twins": 0, "draws": 0, "compiled": 0,
    "problems": 1, "protocols": 1, "accounting": 1,
    "optimizers": 2,
    "engine": 3, "tracking": 3,
    "plugins": 4, "config": 4, "runner": 4, "report": 4, "audit": 4, "calculator": 4,
    "planning": 4, "memory": 4, "recording": 4, "progress": 4, "interrupts": 4,
    "lower_bound_audit": 4, "results": 4,
    "cli": 5, "__main__": 5, "__init__": 5,
}
# Specific protocol modules (the registry `pipeline.protocols` and the contract `.base` are not).
PROTOCOL_MODULES = {"cjmp", "girgis", "multi_message", "sums", "sampling"}


def _imports(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import in a file, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = path.relative_to(REPO).with_suffix("").parts[: -node.level]
                base = ".".join((*parts, base) if base else parts)
            found.append((base, node.lineno))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def _layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "pipeline" and len(parts) > 1 else None


def _files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def _violations(rule) -> list[str]:
    bad = []
    for path in _files(PACKAGE):
        where = path.relative_to(REPO).as_posix()
        for module, line in _imports(path):
            message = rule(where, path.relative_to(PACKAGE).parts[0].removesuffix(".py"), module)
            if message:
                bad.append(f"{where}:{line} imports {module}: {message}")
    return bad


def test_ray_only_in_the_engine():
    assert _violations(lambda where, layer, module: "ray outside engine/"
                       if module.split(".")[0] == "ray" and layer != "engine" else None) == []


TABLE_READER = "pipeline/problems/tables.py"  # reads a dataset's Parquet rows in its shard; writes nothing


def test_mlflow_and_parquet_writing_only_in_tracking():
    assert _violations(lambda where, layer, module: "mlflow or a Parquet writer outside tracking/"
                       if (module.split(".")[0] == "mlflow" or module.startswith("pyarrow.parquet"))
                       and layer != "tracking" and where != TABLE_READER else None) == []
    writers = [f"{path.relative_to(REPO)}:{node.lineno}" for path in _files(PACKAGE)
               if path.relative_to(PACKAGE).parts[0] != "tracking"
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Attribute) and node.attr in ("to_parquet", "write_table")]
    assert writers == []


def test_no_layer_imports_a_higher_one():
    def rule(where, layer, module):
        target = _layer_of(module)
        if target is None or target not in LAYERS or layer not in LAYERS:
            return None
        return f"layer {layer} ({LAYERS[layer]}) imports {target} ({LAYERS[target]})" \
            if LAYERS[target] > LAYERS[layer] else None

    assert _violations(rule) == []


def test_no_particular_protocol_outside_protocols():
    def rule(where, layer, module):
        parts = module.split(".")
        names_one = parts[:2] == ["pipeline", "protocols"] and len(parts) > 2 and parts[2] in PROTOCOL_MODULES
        return "a particular protocol module" if names_one and layer != "protocols" else None

    assert _violations(rule) == []


def test_engine_imports_no_protocol_module():
    engine = [module for path in _files(PACKAGE / "engine") for module, _ in _imports(path)
              if module.startswith("pipeline.protocols") and not module.startswith("pipeline.protocols.base")]
    assert engine == []


# The contracts the engine may name in the families' packages (DESIGN §2): the engine drives a
# problem, optimizer or protocol through them and never names a particular one.
FAMILY_CONTRACTS = {"problems": {"base"}, "optimizers": {"base"}, "protocols": {"base"}}
COMPILING_MODULE = "pipeline/compiled.py"  # the one module that compiles (numba, llvmlite)


def _names_a_family_member(where, layer, module):
    parts = module.split(".")
    if layer != "engine" or parts[0] != "pipeline" or len(parts) < 2 or parts[1] not in FAMILY_CONTRACTS:
        return None
    if len(parts) == 2 or parts[2] not in FAMILY_CONTRACTS[parts[1]]:
        return f"the engine names {'the registry' if len(parts) == 2 else 'a particular member'} of {parts[1]}"
    return None


def test_engine_names_no_particular_problem_optimizer_or_protocol():
    assert _violations(_names_a_family_member) == []


def _compiles(where, layer, module):
    return "numba outside the compiling module" if module.split(".")[0] in ("numba", "llvmlite") \
        and where != COMPILING_MODULE else None


def test_numba_only_in_the_compiling_module():
    assert _violations(_compiles) == []


def _module_graph() -> dict[str, set[str]]:
    """Every package module's imports of other package modules, function-level imports included
    (a module importing its own package's __init__ is not an edge)."""
    modules = {".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): path
               for path in _files(PACKAGE)}
    graph = {}
    for name, path in modules.items():
        edges = set()
        for module, _ in _imports(path):
            while module and module not in modules:
                module = module.rpartition(".")[0]
            if module and module != name and not name.startswith(module + "."):
                edges.add(module)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle():
    assert _cycles(_module_graph()) == []


def test_the_cycle_check_finds_a_planted_cycle():
    graph = _module_graph()
    graph["pipeline.engine.layout"] = graph["pipeline.engine.layout"] | {"pipeline.engine.shard"}
    assert any({"pipeline.engine.layout", "pipeline.engine.shard"} <= set(cycle) for cycle in _cycles(graph))


def test_bench_does_not_reach_into_engine_internals():
    private = []
    for path in _files(REPO / "bench"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipeline"):
                private += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
            own = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and not own:  # a bench's own attributes are its business
                private.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert private == []


@pytest.mark.parametrize("rule,example", [
    (test_ray_only_in_the_engine, "import ray\n"),
    (test_no_particular_protocol_outside_protocols, "from pipeline.protocols import cjmp\n"),
    (test_no_layer_imports_a_higher_one, "from pipeline import runner\n"),
    (test_numba_only_in_the_compiling_module, "from numba import njit\n"),
])
def test_each_rule_catches_a_planted_violation(rule, example, tmp_path, monkeypatch):
    """The checks can fail: a file planted in a pure layer breaks each of them."""
    planted = PACKAGE / "problems" / "_planted_for_test.py"
    _plant(planted, rule, example)


@pytest.mark.parametrize("example", ["from pipeline.problems.quadratic import Quadratic\n",
                                     "from pipeline.optimizers import seq_agd\n", "import pipeline.protocols.cjmp\n",
                                     "from pipeline import problems\n", "from pipeline.problems.records import ONE_EACH\n"])
def test_the_engine_rule_catches_a_planted_family_member(example):
    _plant(PACKAGE / "engine" / "_planted_for_test.py", test_engine_names_no_particular_problem_optimizer_or_protocol,
           example)


def _plant(planted: Path, rule, example: str) -> None:
    planted.write_text(example)
    try:
        with pytest.raises(AssertionError):
            rule()
    finally:
        planted.unlink()


# One run per module that defines protocol or optimizer events: what its shard actors load.
# (pnsgd is left out: its final-iterate schedule carries its release event in the job.)
SHARD_JOBS = {
    "cjmp_vec": {"optimizer": {"name": "seq_sgd"}},
    "girgis_l2": {"optimizer": {"name": "cldp_sgd"}, "privacy": {"protocol": "girgis_l2"}},
    "central_gaussian": {"optimizer": {"name": "dp_sgd"}, "privacy": {"model": "central", "protocol": "central_gaussian"}},
    "report_noisy_max": {"problem": {"name": "l1_least_squares"},
                         "optimizer": {"name": "frank_wolfe_l1"},
                         "privacy": {"model": "central", "protocol": "report_noisy_max"}},
}


@pytest.mark.parametrize("case", sorted(SHARD_JOBS))
def test_a_shard_loads_its_job_without_the_accountants(case, tmp_path):
    """A shard actor unpickles its run's job before its first round; the accountants
    (dp_accounting, scipy.stats: about a second per process) are for the driver's ledger,
    so loading a job must not import them (pipeline.accounting's lazy submodules)."""
    from pipeline import config, planning

    tree = {"experiment": "shard", "problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": 2000,
            "privacy": {"epsilon": 2.0, "delta": 1e-5}, "seeds": [0]}
    for key, value in SHARD_JOBS[case].items():
        tree[key] = {**tree.get(key, {}), **value}
    (run,) = config.expand(tree)
    job = tmp_path / "job.pickle"
    job.write_bytes(pickle.dumps(planning.plan_run(run).job))
    loaded = subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.loads(open(sys.argv[1], 'rb').read()); "
                             "print(' '.join(sorted(m for m in ('dp_accounting', 'scipy.stats') if m in sys.modules)))",
                             str(job)], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert loaded.stdout.split() == [], f"a {case} shard imports {loaded.stdout.strip()}"


# The grid's modules, one job each (issue 42): planning, memory admission, recording, progress,
# interrupts and the grid loop, none with a function longer than a screen.
GRID_MODULES = ("runner", "planning", "memory", "recording", "progress", "interrupts")
MAX_FUNCTION_LINES = 50


def test_the_grid_modules_have_no_function_over_50_lines():
    long = []
    for name in GRID_MODULES:
        path = PACKAGE / f"{name}.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.py:{node.lineno} {node.name}: {lines} lines")
    assert long == []
