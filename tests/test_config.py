"""Config validation, grid expansion and overrides; bad input gives one line,
exit status 2, and nothing written."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pipeline import cli, config
from pipeline.errors import ConfigError

GOOD = """
experiment: t
problem: {name: quadratic, dim: 3, radius: 1.0}
n_users: 1000
optimizer: {name: seq_sgd}
privacy: {model: shuffle, protocol: cjmp_vec, epsilon: 1.0, delta: 1.0e-6, accounting: paper}
seeds: [0, 1]
execution: {backend: local, shards: 2, simulation: exact}
"""


def _write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_grid_times_seeds_and_overrides(tmp_path):
    path = _write(tmp_path, GOOD + "grid: {n_users: [100, 1000], privacy.epsilon: [1, 2, 4]}\n")
    runs = config.expand(config.read_config(path, ["privacy.delta=1e-5", "grid.problem.dim=[2, 3]"]))
    assert len(runs) == 2 * 3 * 2 * 2
    assert {(r["n_users"], r["privacy.epsilon"], r["problem.dim"], r.seed) for r in runs} == {
        (n, e, d, s) for n in (100, 1000) for e in (1.0, 2.0, 4.0) for d in (2, 3) for s in (0, 1)
    }
    assert all(r["privacy.delta"] == 1e-5 for r in runs)
    # The grid point's hash is shared by its seeds; run ids differ.
    assert len({r.config_hash for r in runs}) == 12 and len({r.run_id for r in runs}) == 24


def test_set_null_unsets_a_field_so_its_default_applies(tmp_path):
    """`--set key=null` was stored as None and refused ("must be an integer ≥ 1"): it unsets."""
    path = _write(tmp_path, GOOD.replace("{name: seq_sgd}", "{name: seq_sgd, batch_size: 7}"))
    (run, _) = config.expand(config.read_config(path, ["optimizer.batch_size=null", "execution.shards=null"]))
    (default, _) = config.expand(config.read_config(path, []))
    assert default["optimizer.batch_size"] == 7 and default["execution.shards"] == 2
    assert run["optimizer.batch_size"] is None and run["execution.shards"] == config.FIELDS["execution.shards"].default


def test_defaults_fill_unset_fields(tmp_path):
    (run,) = config.expand(config.read_config(_write(tmp_path, "experiment: e\n")))
    assert run["tracking.out"] == "results/e" and run["tracking.mlflow_uri"] == "sqlite:///mlflow.db"
    assert run["execution.backend"] == "ray" and run["optimizer.rounds"] is None


def test_results_do_not_depend_on_backend_or_shards_in_the_hash(tmp_path):
    path = _write(tmp_path, GOOD)
    a = config.expand(config.read_config(path))[0]
    b = config.expand(config.read_config(path, ["execution.backend=ray", "execution.shards=8"]))[0]
    c = config.expand(config.read_config(path, ["execution.block_size=100"]))[0]
    assert a.run_id == b.run_id != c.run_id


# (overrides applied to GOOD, or a whole document, the field named, a word of the rule)
MALFORMED = [
    (["privacy.epsilon=0"], "privacy.epsilon", "(0, 15]"),
    (["privacy.epsilon=20"], "privacy.epsilon", "(0, 15]"),
    (["privacy.epsilon=abc"], "privacy.epsilon", "number"),
    (["privacy.delta=0.5"], "privacy.delta", "[1e-100, 0.5)"),
    (["privacy.delta=-1e-6"], "privacy.delta", "[1e-100, 0.5)"),
    (["n_users=0"], "n_users", "integer ≥ 1"),
    (["n_users=12.5"], "n_users", "integer"),
    (["problem.dim=true"], "problem.dim", "integer"),
    (["problem.radius=-1"], "problem.radius", "number"),
    (["problem.name=cubic"], "problem.name", "one of"),
    (["optimizer.name=adam"], "optimizer.name", "one of"),
    (["privacy.protocol=rr"], "privacy.protocol", "one of"),
    (["privacy.model=central"], "privacy.model", "must be shuffle, the model of privacy.protocol cjmp_vec"),
    (["optimizer.name=dp_sgd"], "privacy.protocol", "optimizer dp_sgd runs with central_gaussian"),
    (["optimizer.name=cldp_sgd"], "privacy.protocol", "has no accountant for sampled rounds"),
    (["privacy.protocol=central_gaussian", "privacy.model=central", "execution.simulation=literal"], "execution.simulation", "only cjmp_vec materializes"),
    (["optimizer.sampling=poisson"], "optimizer.sampling", "does not apply to optimizer"),
    (["privacy.levels=2"], "privacy.levels", "does not apply to privacy.protocol cjmp_vec"),
    (["privacy.honest_fraction=0.2"], "privacy.honest_fraction", "Corollary A.9"),
    (["privacy.honest_fraction=0.5", "privacy.epsilon=2"], "privacy.epsilon", "must be ≤ 1 in robust mode"),
    (["privacy.honest_fraction=0.5", "privacy.protocol=central_gaussian", "privacy.model=central"],
     "privacy.honest_fraction", "robust mode is P_vec's"),
    (["privacy.accounting=exact"], "privacy.accounting", "must be one of paper, tight"),
    (["execution.backend=spark"], "execution.backend", "one of"),
    (["execution.simulation=bits"], "execution.simulation", "one of"),
    (["execution.shards=0"], "execution.shards", "integer ≥ 1"),
    (["optimizer.batch_size=5000"], "optimizer.batch_size", "n_users"),
    (["optimizer.rounds=900", "optimizer.batch_size=2"], "optimizer.rounds", "each user answers once"),
    (["optimizer.name=full_gd", "optimizer.batch_size=10"], "optimizer.batch_size", "does not apply"),
    (["seeds=[1, 1]"], "seeds", "repeat"),
    (["seeds=[-1]"], "seeds[0]", "integer ≥ 0"),
    (["grid.privacy.epsilonn=[1]"], "grid.privacy.epsilonn", "unknown field"),
    (["grid.privacy.epsilon=[1, 99]"], "grid.privacy.epsilon[1]", "(0, 15]"),
    (["grid.n_users=[]"], "grid.n_users", "non-empty list"),
    (["privacy.epsilonn=1"], "privacy.epsilonn", "unknown field"),
    (["tracking.mlflow_uri=nowhere"], "tracking.mlflow_uri", "URI"),
    (["execution.simulation=literal", "problem.dim=5"], "execution.simulation", "messages"),
    (["noequals"], "--set", "key=value"),
    (["tracking.mlflow_uri=http://127.0.0.1:9"], "tracking.mlflow_uri", "not reachable"),
    (["grid.privacy.epsilon=[1, 1.0]"], "grid.privacy.epsilon", "repeats a value"),
    (["grid.execution.shards=[1, 2]"], "grid.execution.shards", "unknown grid key"),
    (["execution.shards=5000"], "execution.shards", "≤ 4096"),
    (["problem.radius=1e6", "n_users=100000"], "problem.radius", "above 16777215"),
    (["optimizer.name=full_gd", "privacy.delta=0.4", "n_users=10000"], "privacy.delta", "above the target"),
]


@pytest.mark.parametrize("overrides,field,rule", MALFORMED, ids=[m[1] + ":" + m[0][0] for m in MALFORMED])
def test_malformed_config_is_one_line_exit_2_nothing_written(tmp_path, monkeypatch, capsys, overrides, field, rule):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, GOOD)
    args = ["run", str(path), "--out", str(tmp_path / "out")]
    for item in overrides:
        args += ["--set", item]
    status = cli.main(args)
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"config error: {field} = ") and rule in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


@pytest.mark.parametrize(
    "document,field",
    [
        ("problem: [1, 2]\n", "problem"),
        ("- just\n- a list\n", "config"),
        ("problem: {name: quadratic, dim: 3, colour: red}\n", "problem.colour"),
        ("privacy: {epsilon: 1.0\n", "config"),
        ("surprise: 1\n", "surprise"),
    ],
)
def test_malformed_documents(tmp_path, document, field):
    with pytest.raises(ConfigError) as caught:
        config.expand(config.read_config(_write(tmp_path, document)))
    assert caught.value.field == field


def test_output_folder_that_cannot_be_created(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, GOOD)
    assert cli.main(["run", str(path), "--out", str(path / "results")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: tracking.out = ") and "is not a folder" in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_missing_config_file(tmp_path, capsys):
    assert cli.main(["ledger", str(tmp_path / "absent.yaml")]) == 2
    assert "config error: config = " in capsys.readouterr().err


def test_numbers_written_like_1e_minus_6_are_accepted(tmp_path):
    (run,) = config.expand(config.read_config(_write(tmp_path, "privacy: {delta: 1e-6}\nn_users: 1e5\n")))
    assert run["privacy.delta"] == 1e-6 and run["n_users"] == 100_000


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "experiments").glob("*.yaml")),
                         ids=lambda path: path.name)
def test_every_shipped_experiment_config_is_valid(path):
    runs = config.expand(config.read_config(path))
    assert runs and len({r.run_id for r in runs}) == len(runs)
