"""Benchmarks: `python -m bench [--full | --smoke]` prints one `name=value` line per figure.

Every figure is a ratio measured in the same run against a reference (the RNG
ceiling, a per-user loop, one worker), because absolute times drift on shared
machines; both sides of a timing ratio are timed the same way (bench.timing).
Benchmarks build their runs through the pipeline's public entry points (configs
planned by `pipeline.planning.plan_run`, protocols' `plan`/`encode_block`, pools'
`run`/`run_rounds`/`collect`), and `--smoke` (tests/test_bench_smoke.py) runs
them all at tiny sizes so that none can rot.
"""
