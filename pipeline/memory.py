"""Memory admission: a run whose users' data or round records cannot fit in this machine's
memory (its RAM, its cgroup's limit, RLIMIT_AS) is refused before any work."""
from __future__ import annotations

import os
from pathlib import Path

from pipeline import engine
from pipeline.config import RunConfig
from pipeline.errors import ConfigError
from pipeline.problems.records import parse_records_per_user


# The share of the memory limit a run's users' data may take: the rest is for Python, pyarrow,
# Ray's object store and the system. And what each process holds besides its users' data: a
# shard process measured 114 MB of resident memory after its imports; Ray's worker adds about as much.
MEMORY_MARGIN = 0.8


PROCESS_BYTES = 256 * 2**20


# What each round costs the process that records the run, whatever n: its record (RoundRecords'
# columns, 80 bytes), its ledger spend and cumulative time (24), and the ledger check's and
# the join's transients. Measured: 149 bytes a round, the slope of the peak resident memory of
# local seq_sgd runs of 3.9·10⁶ and 1.96·10⁷ rounds (d = 10; 1.14 and 3.48 GB), rounded up.
# On Ray the run's task holds the records too, before they travel.
RECORD_BYTES = 256


def _cgroup_limits(root: Path) -> list[int]:
    """The memory limits of this process's cgroups and of the root, v2 (memory.max) and v1
    (memory.limit_in_bytes); unlimited ones ("max", or v1's near-2⁶³ sentinel) are left out."""
    files = [root / "sys/fs/cgroup/memory.max", root / "sys/fs/cgroup/memory/memory.limit_in_bytes"]
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:  # "hierarchy:controllers:path"; v2's unified hierarchy has no controllers
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":
            files.append(root / "sys/fs/cgroup" / path.lstrip("/") / "memory.max")
        elif "memory" in controllers.split(","):
            files.append(root / "sys/fs/cgroup/memory" / path.lstrip("/") / "memory.limit_in_bytes")
    limits = []
    for file in files:
        try:
            text = file.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**62:
            limits.append(int(text))
    return limits


def memory_bytes(root: Path = Path("/")) -> int | None:
    """The memory a run may use here: the least of the physical memory, the limits of this
    process's cgroups (v1 and v2) and RLIMIT_AS; None if the physical memory is unknown.

    Args:
      root: where /proc and /sys are (tests give a fake tree).
    """
    import resource

    try:
        limits = [os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")]
    except (AttributeError, ValueError, OSError):
        return None
    limits += _cgroup_limits(root)
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(soft)
    return min(limits)


def _holders(run: RunConfig, job: engine.RunJob | None) -> list[tuple[str, int, int, int, str]]:
    """What must fit, each as (field blamed, users whose data are held, rounds whose records are
    held, processes, what holds them): one block; with the job, the users and rounds one process
    holds, and on a Ray instance this machine starts, all of its processes together."""
    n, shards = run["n_users"], run["execution.shards"]
    block = min(run["execution.block_size"], n)
    checks = [("problem.dim", block, 0, 1, "one block of")]
    if job is None:
        return checks
    rounds, drawn = job.schedule.rounds, engine.drawn_per_block(job)
    if run["execution.backend"] == "local":
        return checks + [("n_users", block if drawn else n, rounds, 1, "one process holding")]
    checks.append(("n_users", block if drawn else -(-n // shards), 0, 1, "one shard process holding"))
    if os.environ.get("RAY_ADDRESS"):  # a cluster: shards on their nodes, the records in the driver
        return checks + [("n_users", 0, rounds, 1, "the driver holding")]
    # every shard here, and the records twice: in the run's task, then in the driver
    return checks + [("n_users", min(n, shards * block) if drawn else n, 2 * rounds, shards + 2,
                      f"this machine's {shards} shard processes, the run's task and the driver holding")]


def check_memory(run: RunConfig, job: engine.RunJob | None = None) -> None:
    """Refuses a run whose users' data or round records cannot fit in memory (DESIGN: users
    live in their shard).

    A shard holds its users' data as float64 (d, records): 8·d bytes per record; the process
    that records the run holds RECORD_BYTES per round. Within MEMORY_MARGIN of the limit, with
    PROCESS_BYTES for each process: one block must fit, and so must every user and round one
    process holds (all of them on the local backend; on Ray one shard's users, and the rounds
    in the driver), and on a Ray instance this machine starts every shard, the run's task and
    the driver together, the records twice (on a cluster, RAY_ADDRESS, the shards are spread
    over nodes: one shard and the driver are checked). A run whose shards draw each block's
    users when asked (engine.drawn_per_block) holds one block a process.

    Args:
      run: the run.
      job: its job, once built (None: only the block is checked, before any work).

    Raises:
      ConfigError: naming problem.dim (one block does not fit) or n_users, with the bytes
        needed and the memory there is.
    """
    memory = memory_bytes()
    if memory is None:
        return
    d = run["problem.dim"] * parse_records_per_user(run["problem.records_per_user"]).mean  # d floats a record
    local = run["execution.backend"] == "local"
    budget = MEMORY_MARGIN * memory
    # One block too large is the dimension's fault; too many users or rounds held at once, n's.
    for field, users, rounds, processes, what in _holders(run, job):
        needed = int(8 * d * users) + RECORD_BYTES * rounds + processes * PROCESS_BYTES
        if needed > budget:
            held = " and ".join(part for part in (f"{users} users" if users else "",
                                                  f"{rounds} round records" if rounds else "") if part)
            raise ConfigError(field, run[field],
                              f"{what} {held}: their data (d × users × 8 bytes), {RECORD_BYTES} bytes a round record "
                              f"and {PROCESS_BYTES / 2**20:.0f} MiB per process take {needed / 2**30:.3g} GiB, more "
                              f"than {MEMORY_MARGIN:.0%} of the {memory / 2**30:.3g} GiB this machine allows (the "
                              "least of its memory, its cgroup's limit and RLIMIT_AS): lower problem.dim, n_users or "
                              "execution.block_size, or raise optimizer.batch_size"
                              + ("" if local else ", or run on a cluster (RAY_ADDRESS) with more shards"))
