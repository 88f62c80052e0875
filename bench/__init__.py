"""Benchmarks: `python -m bench [--full]` prints one `name=value` line per figure.

Every figure is a ratio measured in the same run against a reference (the RNG
ceiling, a per-user loop, one worker), because absolute times drift on shared
machines.
"""
