"""Benchmarks that cannot rot: `python -m bench --smoke` runs every benchmark at a tiny
size, through the pipeline's public entry points, and each prints finite figures."""
from __future__ import annotations

import math

# Every benchmark, in the order `python -m bench` runs them, and a figure of each that
# README's Performance tables quote: renaming one must update them.
QUOTED = {
    "rounds": "round_vs_rng_ceiling", "fused": "seq_round_us_fused", "scaling": "seq_carry_vs_fanout", "tracking": "tracking_overhead_seq_sgd",
    "memory": "shard_bytes_per_user", "pvec_tight": "pvec_tight_variance_vs_gaussian_d1_eps1_delta1e-06",
    "composition": "composition_time_ratio_pld_vs_rdp", "shuffle_gaussian": "shuffle_gaussian_series_speedup",
    "protocols": "protocol_cjmp_vec_encode_vs_rng_ceiling", "startup": "startup_ledger_vs_numpy",
    "datasets": "dataset_read_vs_pyarrow_per_core", "read_per_core": "read_per_core_shuffled_vs_rows",
    "audit": "audit_trials_per_s", "grid": "grid_local_vs_single_run",
    "work": "work_measured_vs_estimate_max", "round_files": "seq_python_files",
}


def test_every_benchmark_prints_finite_figures(background):
    """`python -m bench --smoke`, run from the start of the test run in the background
    (tests/conftest.py), exited with status 0 and printed these lines."""
    header, *lines = background("bench_smoke").stdout.strip().splitlines()
    assert header.startswith("machine=") and header.endswith("mode=smoke")
    figures: dict[str, dict[str, float]] = {}
    current: dict[str, float] = {}
    for line in lines:
        name, _, text = line.partition("=")
        assert name and text, f"not name=value: {line!r}"
        value = float(text)
        assert math.isfinite(value), f"{name} is not finite: {text}"
        if name.endswith("_bench_s") and name[: -len("_bench_s")] in QUOTED:
            figures[name[: -len("_bench_s")]] = current
            current = {}
        else:
            assert name not in current, f"{name} printed twice"
            current[name] = value
    assert not current, f"figures after the last benchmark: {sorted(current)}"
    assert list(figures) == list(QUOTED)
    for bench, printed in figures.items():
        assert QUOTED[bench] in printed, f"{bench} printed no {QUOTED[bench]}: {sorted(printed)}"
