"""`python -m bench [--full | --smoke] [--only NAME ...]`: every benchmark, one `name=value` per line."""
from __future__ import annotations

import argparse
import importlib
import os
import platform
import time

# name → module of bench/ with run(size) -> {figure: value}; imported when it runs.
BENCHMARKS = ("rounds", "fused", "scaling", "tracking", "memory", "pvec_tight", "composition", "shuffle_gaussian",
              "protocols", "startup", "datasets", "read_per_core", "audit", "grid", "work", "round_files")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--full", action="store_true", help="large sizes (minutes; 1e8 users)")
    sizes.add_argument("--smoke", action="store_true",
                       help="tiny sizes, one repetition: checks that every benchmark runs (figures meaningless)")
    parser.add_argument("--only", nargs="*", choices=BENCHMARKS, help="run only these")
    args = parser.parse_args(argv)
    size = "full" if args.full else "smoke" if args.smoke else "quick"
    print(f"machine={platform.machine()} cores={os.cpu_count()} python={platform.python_version()} mode={size}",
          flush=True)
    for name in args.only or BENCHMARKS:
        began = time.perf_counter()
        for key, value in importlib.import_module(f"bench.{name}").run(size).items():
            print(f"{key}={value:.4g}", flush=True)
        print(f"{name}_bench_s={time.perf_counter() - began:.1f}", flush=True)


if __name__ == "__main__":
    main()
