"""Command line: `python -m pipeline run|ledger|report|audit|epsilon` (also the `shuffle-sco` script)."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

from pipeline import calculator  # light: the heavy modules load in the command that needs them
from pipeline.errors import ConfigError, LeaseLost
from pipeline.uris import redact

EXIT_OK, EXIT_RUNS_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_TERMINATED = 143  # SIGTERM, 128 + 15, as a shell reports a process it killed
# 128 + SIGPIPE, what a shell reports for a writer whose reader closed the pipe (`... | head -1`): not 1,
# which says some runs failed. Python ignores SIGPIPE, so a write raises BrokenPipeError instead.
EXIT_BROKEN_PIPE = 141
# The most audit trials: two float64 arrays of N and N encoder runs per neighbour (the default is 20,000).
MAX_TRIALS = 10**7


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run every (grid point, seed) of a config; finished runs are skipped")
    run.add_argument("config", help="the experiment YAML")
    run.add_argument("--out", help="results folder (overrides tracking.out)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a field, e.g. --set privacy.epsilon=4 or --set grid.n_users=[1000,10000]")
    report = commands.add_parser("report", help="draw figures from a results folder and log them to MLflow")
    report.add_argument("dir", help="a results folder (holding runs.parquet and rounds.parquet)")
    audit = commands.add_parser("audit", help="empirical lower bound on the ε of a config's first protocol call (any protocol that supports_audit); exit 1 if above the ledger")
    audit.add_argument("config", help="the experiment YAML (its first grid point is audited)")
    audit.add_argument("--trials", default="20000", help=f"runs per neighbouring dataset, 100 to {MAX_TRIALS:.0e}")
    audit.add_argument("--seed", default="0", help="the attack's randomness (0 to 2^32 - 1)")
    audit.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    audit.add_argument("--lower-bound", action="store_true",
                       help="instead: run the optimizer on the matching hard instance and fail (exit 1) if its mean "
                            "excess loss minus one standard error is below the certified lower bound")
    audit.add_argument("--seeds", default="10", help="--lower-bound: runs, each on its own vertex (3 to 1000)")
    audit.add_argument("--instance", choices=("lb_convex", "lb_strongly_convex"),
                       help="--lower-bound: the hard instance (default: the one of the config's Table 1 row)")
    migrate = commands.add_parser("migrate", help="convert a results folder of the layout before 0.2 "
                                                  "(single-file runs.parquet) into the dataset layout")
    migrate.add_argument("dir", help="the results folder")
    ledger = commands.add_parser("ledger", help="print the planned privacy ledger as JSON, without running")
    ledger.add_argument("config", help="the experiment YAML")
    ledger.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    calculator.add_parser(commands)
    return parser


def _run(args: argparse.Namespace) -> int:
    from pipeline import config, interrupts, runner
    from pipeline.tracking import experiment_address, ui_command

    overrides = list(args.overrides) + ([f"tracking.out={args.out}"] if args.out else [])
    runs = config.expand(config.read_config(args.config, overrides))
    try:
        summary = runner.run_grid(runs)
    except LeaseLost as lost:
        print(f"error: {lost}", file=sys.stderr)
        for run_id in getattr(lost, "in_flight", ()):
            print(f"  failed {run_id}: in flight when the folder was lost (its MLflow run is marked failed)",
                  file=sys.stderr)
        return EXIT_RUNS_FAILED
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (interrupts.Terminated): the same handling
        interrupts.keep(stop)  # its frames hold the grid's Ray references
        signal_name = "terminated (SIGTERM)" if isinstance(stop, interrupts.Terminated) else "interrupted"
        print(f"{signal_name}: the runs in flight are marked failed; rerun the same command to resume",
              file=sys.stderr)
        return EXIT_TERMINATED if isinstance(stop, interrupts.Terminated) else EXIT_INTERRUPTED
    first = runs[0]
    print(f"\n{len(runs)} runs: {len(summary.finished)} finished, {len(summary.skipped)} skipped, "
          f"{len(summary.failed)} failed")
    if summary.finished:
        losses = sorted(row["final_excess_loss"] for row in summary.finished)
        print(f"final excess loss: best {losses[0]:.4g}, worst {losses[-1]:.4g}")
    for run_id, error in summary.failed:
        print(f"  failed {run_id}: {error}")
    print(redact(f"MLflow store: {first['tracking.mlflow_uri']} (experiment {first['experiment']!r})"))
    runs_table, rounds_table = summary.tables
    print(f"Parquet:      {runs_table}\n              {rounds_table}\n"
          f"              (pipeline.results.load({summary.folder!r}) reads both)")
    # The address is redacted where it holds the store's URI: its share key is no secret.
    print(redact(f"MLflow UI:    {ui_command(first['tracking.mlflow_uri'])}, then ")
          + experiment_address(first['tracking.mlflow_uri'], summary.experiment_id))
    if any(run["problem.source"] for run in runs):
        _say_composed_spend(first["tracking.out"])
    return EXIT_RUNS_FAILED if summary.failed else EXIT_OK


def _say_composed_spend(folder: str) -> None:
    """What each table the folder's runs read has spent over all of them (pipeline.results.privacy_by_source)."""
    import warnings

    from pipeline import results

    with warnings.catch_warnings():  # an older run's flag is the loader's to raise, in a notebook
        warnings.simplefilter("ignore")
        spent = results.privacy_by_source(results.load(folder, verify=False)[0])
    for row in spent.itertuples():
        print(redact(f"Together:     the {row.runs} runs in this folder that read {row.source} spend "
                     f"(ε, δ) = ({row.epsilon:.4g}, {row.delta:.3g}) of its {row.unit}s' privacy (basic composition)"))


def _migrate(args: argparse.Namespace) -> int:
    from pipeline import results
    from pipeline.tracking import migrate

    print(migrate(args.dir, results.KINDS))
    return EXIT_OK


def _ledger(args: argparse.Namespace) -> int:
    from pipeline import config, planning

    with contextlib.redirect_stdout(sys.stderr):  # stdout is the JSON alone, whatever a plug-in prints
        ledgers = planning.planned_ledgers(config.expand(config.read_config(args.config, args.overrides)),
                                         say=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(ledgers, indent=2, ensure_ascii=False))
    return EXIT_OK


def _report(args: argparse.Namespace) -> int:
    from pipeline import report
    from pipeline.tracking import MlflowTracker

    files = report.build_report(args.dir, say=lambda line: print(line, file=sys.stderr))
    uri, experiment = report.tracking_of(args.dir)
    mlflow_run_id = MlflowTracker(uri, experiment).log_report(files[0].parent)
    for path in files:
        print(path)
    print(f"logged to MLflow {uri}, experiment {experiment!r}, run {mlflow_run_id}")
    return EXIT_OK


def _audit_lower_bound(args: argparse.Namespace) -> int:
    from pipeline import config, lower_bound_audit

    seeds = lower_bound_audit.parse_seeds(args.seeds)
    run = config.expand(config.read_config(args.config, args.overrides))[0]
    found = lower_bound_audit.audit_lower_bound(run, seeds, args.instance)
    print(json.dumps(found, indent=2, ensure_ascii=False))
    return EXIT_OK if found["passed"] else EXIT_RUNS_FAILED


def _audit(args: argparse.Namespace) -> int:
    from pipeline import audit, config, planning
    from pipeline.options import integer

    if args.lower_bound:
        return _audit_lower_bound(args)

    try:
        trials = integer(100, MAX_TRIALS)(args.trials)
    except ValueError as err:
        raise ConfigError("--trials", args.trials,
                          f"{err} (each trial runs the protocol once per neighbour; the default is 20000)") from None
    try:
        seed = integer(0, 2**32 - 1)(args.seed)
    except ValueError as err:
        raise ConfigError("--seed", args.seed, str(err)) from None
    with contextlib.redirect_stdout(sys.stderr):  # stdout is the JSON alone, whatever a plug-in prints
        planned = planning.plan_run(config.expand(config.read_config(args.config, args.overrides))[0])
        found = audit.audit_run(planned, trials, seed)
    print(json.dumps(found, indent=2, ensure_ascii=False))
    # A lower bound above the ledger would mean the ledger under-reports.
    return EXIT_OK if found["passed"] else EXIT_RUNS_FAILED


def main(argv: list[str] | None = None) -> int:
    """Entry point.

    Args:
      argv: arguments (default: sys.argv[1:]).

    Returns:
      0 on success, 1 if some runs failed, 2 on bad input (one line on stderr),
      130 after Ctrl-C, 143 after SIGTERM (the runs in flight marked failed),
      and 141 when the reader of the output went away (`... | head -1`).
    """
    args = _parser().parse_args(argv)  # --help: argparse itself ignores a failed write
    try:
        try:
            commands = {"run": _run, "ledger": _ledger, "report": _report, "audit": _audit, "migrate": _migrate,
                        "epsilon": calculator.run}
            status = commands[args.command](args)
        except ConfigError as err:
            print(err, file=sys.stderr)
            status = EXIT_BAD_INPUT
        except SystemExit as exit_:  # nothing here exits: plug-in code did, and a command never ends 0 by it
            print(f"error: plug-in code ended `{args.command}` with sys.exit({exit_.code!r}); "
                  + ("the runs in flight are marked failed" if args.command == "run" else "nothing was done"),
                  file=sys.stderr)
            status = EXIT_RUNS_FAILED if args.command == "run" else EXIT_BAD_INPUT
        sys.stdout.flush()  # a closed pipe shows here, not as "Exception ignored" when Python exits
        return status
    except BrokenPipeError:
        # Python's "Note on SIGPIPE": the output still buffered goes to devnull, so that the
        # interpreter's last flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
