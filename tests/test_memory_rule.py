"""The memory rule (issue #29 item 4): the limit that applies (cgroup v1 and v2, RLIMIT_AS), a
stated margin, and every process of a Ray run on this machine; refused in one line before any work."""
from __future__ import annotations

import resource
from pathlib import Path

import pytest
import yaml

from pipeline import cli, memory

GIB = 2**30
UNLIMITED_V1 = "9223372036854771712"  # what cgroup v1 reports without a limit


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("files, expected", [
    ({"proc/self/cgroup": "4:memory:/job/42\n0::/\n", "sys/fs/cgroup/memory/memory.limit_in_bytes": UNLIMITED_V1,
      "sys/fs/cgroup/memory/job/42/memory.limit_in_bytes": str(int(1.5 * GIB))}, int(1.5 * GIB)),
    ({"proc/self/cgroup": "0::/slice/run.scope\n", "sys/fs/cgroup/memory.max": "max",
      "sys/fs/cgroup/slice/run.scope/memory.max": str(2 * GIB)}, 2 * GIB),
    ({"proc/self/cgroup": "4:memory:/\n", "sys/fs/cgroup/memory/memory.limit_in_bytes": UNLIMITED_V1}, None),
], ids=["cgroup-v1", "cgroup-v2", "unlimited"])
def test_the_limit_is_the_least_of_memory_cgroups_and_rlimit(tmp_path, files, expected):
    physical = memory.memory_bytes(Path("/nonexistent"))
    assert memory.memory_bytes(_tree(tmp_path, files)) == (physical if expected is None else min(expected, physical))


def test_rlimit_as_bounds_the_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (GIB, resource.RLIM_INFINITY))
    assert memory.memory_bytes(tmp_path) == GIB


def _ledger(tmp_path, capsys, n: int, backend: str, shards: int = 1, sequential: bool = False) -> tuple[int, list[str]]:
    """`ledger` on a fully interactive run (full_gd holds its users for the run), or a sequential one
    (seq_sgd: its shards draw each block's users when a round asks for them)."""
    optimizer = {"name": "seq_sgd", "batch_size": max(1, n // 1000)} if sequential else {"name": "full_gd", "rounds": 2}
    tree = {"problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": n, "optimizer": optimizer,
            "execution": {"backend": backend, "shards": shards, "block_size": 4096}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tree))
    code = cli.main(["ledger", str(path)])
    return code, capsys.readouterr().err.strip().splitlines()


def test_a_run_needing_3_gb_in_a_1_5_gib_cgroup_is_refused_with_the_numbers(tmp_path, capsys, monkeypatch):
    """The red team's reproducer: cgroup v1 at 1.5 GiB, 1.25·10⁸ users of d = 3 (3 GB of data)."""
    root = _tree(tmp_path / "root", {"proc/self/cgroup": "4:memory:/job\n",
                                     "sys/fs/cgroup/memory/job/memory.limit_in_bytes": str(int(1.5 * GIB))})
    real = memory.memory_bytes
    monkeypatch.setattr(memory, "memory_bytes", lambda: real(root))
    code, lines = _ledger(tmp_path, capsys, 125_000_000, "local")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("config error: n_users = 125000000: one process holding 125000000 users and 2 round "
                               "records: their data")
    # 1.25·10⁸ × 3 × 8 bytes = 2.79 GiB, and 0.25 GiB for the process.
    assert "take 3.04 GiB, more than 80% of the 1.5 GiB" in lines[0], lines[0]
    # Sequential SGD asks each user once: its shards hold one block of users at a time, so it fits.
    assert _ledger(tmp_path, capsys, 125_000_000, "local", sequential=True)[0] == 0


@pytest.mark.parametrize("n, backend, shards, refused", [
    (int(0.9 * 24 * GIB / 24), "local", 1, True),  # 90% of the memory as data: above the 80% margin
    (int(0.7 * 24 * GIB / 24), "local", 1, False),  # 70%: within it
    (int(0.7 * 24 * GIB / 24), "ray", 4, False),  # the same data over 4 shards and the driver
    (int(0.9 * 24 * GIB / 24), "ray", 4, True),  # each shard fits, the machine's processes together do not
])
def test_the_margin_and_every_process_of_a_ray_run_on_this_machine(tmp_path, capsys, monkeypatch, n, backend,
                                                                   shards, refused):
    """A 24 GiB machine and d = 3 (24 bytes a user); a Ray run started here holds all its shards."""
    monkeypatch.setattr(memory, "memory_bytes", lambda: 24 * GIB)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    code, lines = _ledger(tmp_path, capsys, n, backend, shards)
    if refused:
        assert code == 2 and len(lines) == 1 and lines[0].startswith(f"config error: n_users = {n}:"), lines
        assert ("shard processes, the run's task and the driver" in lines[0]) == (backend == "ray"), lines[0]
    else:
        assert code == 0, lines
    if backend == "ray" and refused:  # on a cluster the shards spread over nodes: one shard is checked
        monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
        assert _ledger(tmp_path, capsys, n, backend, shards)[0] == 0


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_round_records_count_a_sequential_run_that_holds_no_users(tmp_path, capsys, monkeypatch, backend):
    """seq_sgd draws its users per block, but the process that records the run holds every round's
    record (RECORD_BYTES = 256 each, measured): 10⁸ users in rounds of 10 are 10⁷ records, 2.38 GiB
    and a process, above 80% of 2 GiB; in rounds of 50, 2·10⁶ records fit (0.48 GiB and a process;
    on a Ray instance here, twice the records and 4 processes: 1.95 GiB, refused)."""
    assert memory.RECORD_BYTES == 256  # the numbers below
    monkeypatch.setattr(memory, "memory_bytes", lambda: 2 * GIB)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def ledger(batch_size: int) -> tuple[int, list[str]]:
        tree = {"problem": {"name": "quadratic", "dim": 3, "radius": 1.0}, "n_users": 10**8,
                "optimizer": {"name": "seq_sgd", "batch_size": batch_size},
                "execution": {"backend": backend, "shards": 2}}
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(tree))
        return cli.main(["ledger", str(tmp_path / "config.yaml")]), capsys.readouterr().err.strip().splitlines()

    code, lines = ledger(10)
    assert code == 2 and len(lines) == 1, lines
    what = "one process holding 4096 users and 10000000 round records" if backend == "local" else \
        "this machine's 2 shard processes, the run's task and the driver holding 8192 users and 20000000 round records"
    assert lines[0].startswith(f"config error: n_users = 100000000: {what}: "), lines[0]
    assert "256 bytes a round record" in lines[0] and "of the 2 GiB" in lines[0], lines[0]
    assert ("take 2.63 GiB" if backend == "local" else "take 5.77 GiB") in lines[0], lines[0]
    code, lines = ledger(50)
    assert (code, len(lines)) == ((0, 0) if backend == "local" else (2, 1)), lines
    if backend == "ray":  # on a cluster the driver holds the records once, the shards one block each
        monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
        assert ledger(50)[0] == 0
