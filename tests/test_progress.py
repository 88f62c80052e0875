"""Progress within a run: carried rounds travel in trips of about a second, which
changes nothing in the results, and a long run says how far it got (rounds, rate,
ETA) on both backends."""
from __future__ import annotations

import numpy as np

from pipeline import cli, engine, progress
from pipeline.engine import pool
from pipeline.engine.local import LocalPool
from pipeline.optimizers import SeqSGD
from pipeline.problems import Logistic, Quadratic
from pipeline.protocols import CjmpVec

PROBLEM = Quadratic(dim=3, radius=1.0)


def _seq_sgd_job(n: int = 3000, batch_size: int = 2, problem=PROBLEM) -> engine.RunJob:
    optimizer = SeqSGD.from_config(problem, n, 2.0, 1e-5, batch_size=batch_size)
    return engine.RunJob(problem, optimizer, CjmpVec("paper"), 7, n, 128)


def _columns(records) -> tuple[np.ndarray, ...]:
    return tuple(np.array([getattr(r, name) for r in records]) for name in ("round", "users", "excess_loss"))


def test_carried_rounds_in_short_trips_are_bit_identical_and_report_progress(monkeypatch):
    job = _seq_sgd_job()
    whole_state, whole = LocalPool(job, 2).run()  # 1,500 rounds: two trips, one per shard
    monkeypatch.setattr(pool, "FIRST_CARRY", 7)  # trips of 7 rounds: hundreds of trips
    monkeypatch.setattr(pool, "PROGRESS_S", 0.0)  # told after every trip
    trips = []
    state, records = LocalPool(job, 2).run(lambda done, total: trips.append((done, total)))
    for got, expected in zip(_columns(records), _columns(whole)):
        assert np.array_equal(got, expected)
    assert np.array_equal(job.optimizer.output(state), job.optimizer.output(whole_state))
    done = [d for d, _ in trips]
    assert len(trips) > 100 and done == sorted(set(done)) and done[-1] == 1500 and {t for _, t in trips} == {1500}
    # Every trip stays within one shard: none crosses the shard boundary at user 1,536 (round 768).
    assert 768 in done


def _local_seq_sgd(tmp_path, new_mlflow_store, n_users: int, options: str = "") -> str:
    """A one-run local seq_sgd config on the quadratic (d = 3), its store and results in tmp_path."""
    config = tmp_path / "run.yaml"
    config.write_text(f"problem: {{name: quadratic, dim: 3}}\nn_users: {n_users}\n"
                      f"optimizer: {{name: seq_sgd{', ' + options if options else ''}}}\n"
                      "privacy: {epsilon: 2.0, delta: 1.0e-5}\nexecution: {backend: local}\n"
                      f"tracking: {{mlflow_uri: '{new_mlflow_store(tmp_path / 'mlflow.db')}', out: '{tmp_path / 'out'}'}}\n")
    return str(config)


def test_a_long_run_says_how_far_it_got_through_the_public_command(tmp_path, capsys, monkeypatch, new_mlflow_store):
    monkeypatch.setattr(pool, "PROGRESS_S", 0.0)
    monkeypatch.setattr(progress, "RUN_NOTE_S", 0.0)
    assert cli.main(["run", _local_seq_sgd(tmp_path, new_mlflow_store, 20000, "batch_size: 2")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if " of 10,000 (" in line]
    assert lines, "no progress line"
    first = lines[0].split()
    assert first[1] == "round" and first[5].endswith("%),") and first[7] == "rounds/s," and first[8] == "ETA"
    assert int(first[2].replace(",", "")) < 10_000


def test_a_long_recording_says_so(tmp_path, capsys, monkeypatch, new_mlflow_store):
    """Issue 44: recording (the ledger's separate check, MLflow, Parquet) that lasts says so,
    instead of a silence after the last round's ETA."""
    monkeypatch.setattr(progress, "RECORD_NOTE_S", 0.0)
    assert cli.main(["run", _local_seq_sgd(tmp_path, new_mlflow_store, 2000)]) == 0
    out = capsys.readouterr().out
    recording = [line for line in out.splitlines() if line.endswith(": rounds done; recording it (its ledger "
                                                                      "re-derived in a separate process, then MLflow "
                                                                      "and Parquet)")]
    assert len(recording) == 1 and out.index(recording[0]) < out.index("1/1 (0 failed)")


def test_ray_runs_send_their_progress_to_the_driver(ray_session):
    """A run in a Ray task reports through the executor's queue while the driver waits."""
    told = []
    executor = engine.executor("ray", lambda *progress: told.append(progress))
    try:
        # 25,000 rounds on the Python path (logistic has no compiled twin, whose rounds would take
        # a fraction of a second): seconds, past the engine's 1 s trips.
        job = _seq_sgd_job(n=50_000, batch_size=2, problem=Logistic(dim=3, radius=1.0))
        executor.submit("the-run", job, 1)
        key, outcome = executor.next_done()
    finally:
        executor.close()
    assert key == "the-run" and not isinstance(outcome, BaseException)
    assert told and all(run == "the-run" and 0 < done <= total == 25_000 and seconds > 0
                        for run, done, total, seconds in told)


def test_a_lost_progress_queue_fails_neither_the_run_nor_the_driver(ray_session, caplog):
    """The queue's actor gone (its node died, as in tests/test_cluster_submit.py): the run's
    notes and the driver's reads meet a dead actor; the run still returns its result."""
    import ray

    from pipeline.engine import ray_pool

    told = []
    executor = engine.executor("ray", lambda *progress: told.append(progress))
    try:
        ray.kill(executor._queue.actor)
        job = _seq_sgd_job(n=50_000, batch_size=2)
        executor.submit("the-run", job, 1)
        with caplog.at_level("WARNING", logger=ray_pool.__name__):
            key, outcome = executor.next_done()
    finally:
        executor.close()
    assert key == "the-run" and not isinstance(outcome, BaseException), outcome
    state, records, _ = outcome
    expected_state, expected = LocalPool(job, 1).run()
    assert np.array_equal(job.optimizer.output(state), job.optimizer.output(expected_state))
    assert not told and "progress notes stopped" in caplog.text


def test_the_grid_bar_says_the_rate_and_the_eta_it_gives():
    """Issue 43: runs a second, and an ETA of the runs left at that rate."""
    from pipeline.progress import progress_bar

    assert progress_bar(10, 40, 1, 5.0) == "[######..................] 10/40 (1 failed) elapsed 00:05, 2/s, ETA 00:15"
    assert progress_bar(0, 40, 0, 3.0).endswith("elapsed 00:03, --/s, ETA --:--")
    assert progress_bar(3, 3, 0, 90.0).endswith("3/3 (0 failed) elapsed 01:30, 0.0333/s, ETA 00:00")
