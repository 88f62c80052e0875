"""`python -m bench [--full] [--only NAME ...]`: every benchmark, one `name=value` per line."""
from __future__ import annotations

import argparse
import os
import platform
import time

from bench import composition, memory, protocols, pvec_tight, rounds, scaling, shuffle_gaussian, tracking

BENCHMARKS = {"rounds": rounds.run, "scaling": scaling.run, "tracking": tracking.run, "memory": memory.run,
              "pvec_tight": pvec_tight.run, "composition": composition.run, "shuffle_gaussian": shuffle_gaussian.run,
              "protocols": protocols.run}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--full", action="store_true", help="large sizes (minutes; 1e8 users)")
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHMARKS), help="run only these")
    args = parser.parse_args()
    print(f"machine={platform.machine()} cores={os.cpu_count()} python={platform.python_version()} "
          f"mode={'full' if args.full else 'quick'}")
    for name in args.only or BENCHMARKS:
        began = time.perf_counter()
        for key, value in BENCHMARKS[name](args.full).items():
            print(f"{key}={value:.4g}", flush=True)
        print(f"{name}_bench_s={time.perf_counter() - began:.1f}", flush=True)


if __name__ == "__main__":
    main()
