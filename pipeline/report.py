"""`python -m pipeline report DIR`: figures from a results folder, logged to MLflow."""
from __future__ import annotations

import json
import math
import re
from typing import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy  # noqa: E402  (scipy.stats loads on first use)

from pipeline.config import NOT_IN_HASH, is_field  # noqa: E402
from pipeline.errors import ConfigError  # noqa: E402
from pipeline.optimizers.theory import THEORY_COLUMNS  # noqa: E402

LABEL = ["optimizer.name", "privacy.epsilon"]
SLOPE_LEVEL = 0.9  # the confidence level of slopes.csv's bootstrap interval
SLOPE_RESAMPLES = 2000


def fit_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of log y against log x (NaN with fewer than two distinct x)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = (x > 0) & (y > 0)
    if len(np.unique(x[keep])) < 2:
        return math.nan
    return float(np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)[0])


def slope_interval(n_users: np.ndarray, losses: list[np.ndarray]) -> tuple[float, float]:
    """Percentile bootstrap interval (level SLOPE_LEVEL) of `fit_slope` of the per-n mean
    loss: each n's seeds are resampled with replacement, independently of the other n's
    (scipy.stats.bootstrap, seeded, so a report is reproducible).

    Args:
      n_users: the distinct n, ascending.
      losses: for each n, its seeds' final excess losses.

    Returns:
      (low, high), NaN where a slope cannot be fitted, or an n has a single seed or a loss
      that is not a positive number.
    """
    centred = np.log(np.asarray(n_users, float))
    centred -= centred.mean()
    if len(centred) < 2 or any(len(seeds) < 2 or not np.all(np.isfinite(seeds) & (np.asarray(seeds) > 0))
                               for seeds in losses):
        return math.nan, math.nan

    def slope(*samples, axis=-1):  # least squares of log mean against log n, for a batch of resamples
        log_means = np.stack([np.log(np.mean(sample, axis=axis)) for sample in samples], axis=-1)
        return log_means @ centred / (centred @ centred)

    result = scipy.stats.bootstrap(losses, slope, vectorized=True, paired=False, confidence_level=SLOPE_LEVEL,
                                   n_resamples=SLOPE_RESAMPLES, method="percentile", rng=np.random.default_rng(0))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _read(out: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The folder's finished runs (each run's latest finished attempt) and their rounds (pipeline.results.load)."""
    from pipeline import results

    try:
        runs, rounds = results.load(out)
    except ConfigError as err:  # the loader names the file (its value) and the rule
        raise ConfigError("DIR", str(out), f"{err.value}: {err.rule}" if str(err.value) != str(out) else err.rule) from None
    runs = runs.copy()
    for column in THEORY_COLUMNS:  # folders written before the rates existed lack them
        if column not in runs:
            runs[column] = math.nan
    if runs.empty:
        raise ConfigError("DIR", str(out), "holds no finished runs")
    return runs, rounds


def tracking_of(out: str | Path) -> tuple[str, str]:
    """The MLflow URI and experiment the folder's runs were logged to."""
    runs, _ = _read(out)
    first = runs.iloc[0]
    return first["tracking.mlflow_uri"], first["experiment"]


def _series_keys(runs: pd.DataFrame) -> list[str]:
    """The config fields that define a series (all but n and result-neutral ones):
    a fitted slope never mixes dimensions, problems, δ or modes."""
    return [f for f in runs.columns if is_field(f) and f not in ("n_users", "experiment", *NOT_IN_HASH)]


def _series_name(runs: pd.DataFrame, values: dict) -> str:
    """optimizer and ε, plus whichever other series field varies in the folder."""
    varying = [k for k in _series_keys(runs) if k not in LABEL and runs[k].astype(str).nunique() > 1]
    extra = "".join(f" {k.split('.')[-1]}={values[k]}" for k in varying)
    return f"{values['optimizer.name']} ε={values['privacy.epsilon']:g}{extra}"


def _label(row: pd.Series, runs: pd.DataFrame) -> str:
    return f"{_series_name(runs, row)} n={row['n_users']}"


def _excess_vs_round(runs: pd.DataFrame, rounds: pd.DataFrame, axes) -> None:
    merged = rounds.merge(runs[["run_id", "config_hash"]], on="run_id")
    firsts = runs.groupby("config_hash").head(1).sort_values(LABEL + ["n_users"])
    for (_, first), color in zip(firsts.iterrows(), plt.cm.tab10.colors * 10):
        curve = merged[merged["config_hash"] == first["config_hash"]].groupby("round")["excess_loss"].mean()
        axes.plot(curve.index + 1, curve.to_numpy(), color=color, label=_label(first, runs),
                  marker="o" if len(curve) == 1 else None)
        if math.isfinite(first["theory_rate"]):
            axes.axhline(first["theory_rate"], color=color, linestyle="--", linewidth=0.8)
    axes.set(xscale="log", yscale="log", xlabel="round", ylabel="excess population loss (mean over seeds)",
             title="Excess loss per round (dashed: the theorem's rate, constant 1)")
    axes.legend(fontsize=7)


def _excess_vs_n(runs: pd.DataFrame, axes) -> pd.DataFrame:
    rows = []
    keys = _series_keys(runs)
    for values, group in runs.groupby(keys, dropna=False):
        values = dict(zip(keys, values))
        by_n = group.groupby("n_users").agg(loss=("final_excess_loss", "mean"), theory=("theory_rate", "first"))
        measured = fit_slope(by_n.index.to_numpy(), by_n["loss"].to_numpy())
        theoretical = fit_slope(by_n.index.to_numpy(), by_n["theory"].to_numpy())
        low, high = slope_interval(by_n.index.to_numpy(), [seeds.to_numpy() for _, seeds in
                                                            group.groupby("n_users")["final_excess_loss"]])
        name = _series_name(runs, values)
        rows.append({"series": name, "optimizer.name": values["optimizer.name"],
                     "privacy.epsilon": values["privacy.epsilon"], "measured_slope": measured,
                     "slope_low": low, "slope_high": high, "theory_slope": theoretical, "points": len(by_n),
                     "seeds": int(group.groupby("n_users").size().min())})
        line = axes.plot(by_n.index, by_n["loss"], marker="o",
                         label=f"{name}: slope {measured:.2f} (theory {theoretical:.2f})")
        axes.plot(by_n.index, by_n["theory"], linestyle="--", color=line[0].get_color(), linewidth=0.8)
    axes.set(xscale="log", yscale="log", xlabel="n (users)", ylabel="final excess loss (mean over seeds)",
             title="Final excess loss vs n (dashed: theory)")
    axes.legend(fontsize=7)
    return pd.DataFrame(rows)


def _epsilon_vs_round(runs: pd.DataFrame, rounds: pd.DataFrame, axes) -> None:
    first_seed = runs.sort_values("seed").groupby("config_hash").head(1)
    for _, run in first_seed.iterrows():
        curve = rounds[rounds["run_id"] == run["run_id"]]
        axes.plot(curve["round"] + 1, curve["epsilon_spent"],
                  label=f"{_label(run, runs)} ({run['privacy.accounting']})")
    axes.set(xscale="log", xlabel="round", ylabel="ε spent", title="Privacy spent per round, by accounting mode")
    axes.legend(fontsize=7)


def _compare(runs: pd.DataFrame, axes) -> None:
    keys = _series_keys(runs) + ["n_users"]
    summary = runs.groupby(keys, dropna=False).agg(
        loss=("final_excess_loss", "mean"), spread=("final_excess_loss", "std"),
        central=("central_rate", "first"), local=("local_rate", "first"), nonprivate=("nonprivate_rate", "first"),
    ).reset_index()
    positions = np.arange(len(summary))
    axes.bar(positions, summary["loss"], yerr=summary["spread"].fillna(0.0), color="tab:blue", label="measured")
    for column, marker in (("central", "v"), ("local", "^"), ("nonprivate", "o")):
        axes.scatter(positions, summary[column], marker=marker, zorder=3, label=f"{column} rate")
    # Slanted, one line each: side by side, several configurations' labels overlapped.
    axes.set_xticks(positions, [_label(r, runs) for _, r in summary.iterrows()], fontsize=7, rotation=25,
                    ha="right", rotation_mode="anchor")
    axes.set(yscale="log", ylabel="final excess loss", title="Optimizers compared (error bars: std over seeds)")
    axes.legend(fontsize=7)


def _models_vs_epsilon(runs: pd.DataFrame, axes) -> None:
    """Final excess loss vs ε at the largest n, one line per (optimizer, protocol);
    non-private runs (ε = ∞ spent) as horizontal lines."""
    largest = runs[runs["n_users"] == runs["n_users"].max()]
    for (optimizer, protocol), group in largest.groupby(["optimizer.name", "privacy.protocol"]):
        curve = group.groupby("privacy.epsilon")["final_excess_loss"].mean()
        model = group["privacy.model"].iloc[0]
        label = f"{optimizer} / {protocol} ({model})"
        if model == "none":
            axes.axhline(curve.mean(), color="black", linestyle="--", label=f"{label}: non-private")
        else:
            axes.plot(curve.index, curve.to_numpy(), marker="o", label=label)
    axes.set(xscale="log", yscale="log", xlabel="target ε", ylabel="final excess loss (mean over seeds)",
             title=f"Privacy models compared at n = {runs['n_users'].max()}")
    axes.legend(fontsize=7)


ACCURACY_KEYS = ["optimizer.name", "privacy.protocol", "privacy.accounting", "privacy.model"]
UNIT = "privacy.unit"
UNIT_ORDER = ("record", "user")  # panels left to right (results.load gives older runs their unit: user)
UNIT_TITLES = {"record": "a neighbour differs in one record", "user": "a neighbour differs in one user's records"}
# A partitioned training file of experiments/make_datasets.py: <name>_<scheme><parameter>_c<C>_train.parquet.
PARTITION_NAME = re.compile(r"_(iid|dirichlet|pathological)([^_]*)_c(\d+)_train\.parquet$")


def _accuracy_splits(measured: pd.DataFrame) -> list[str]:
    """The config fields, besides ACCURACY_KEYS, the unit and ε, that vary inside one
    (ACCURACY_KEYS, unit) line: the data, mostly (problem.source naming a client partition,
    n_users, problem.min_records). Each becomes part of the series instead of being averaged."""
    candidates = [k for k in (*_series_keys(measured), "n_users")
                  if k not in (*ACCURACY_KEYS, UNIT, "privacy.epsilon") and k in measured]
    groups = [group for _, group in measured.groupby(ACCURACY_KEYS + [UNIT], dropna=False)]
    return [k for k in candidates if any(group[k].astype(str).nunique() > 1 for group in groups)]


def partition_label(source) -> str:
    """A training file's client partition as a series name ("dirichlet α=0.1, 100 clients"),
    read from make_datasets.py's file name; other files by their name."""
    name = Path(str(source).split("?", 1)[0]).name
    match = PARTITION_NAME.search(name)
    if match is None:
        return name.removesuffix(".parquet")
    scheme, parameter, clients = match.groups()
    detail = {"dirichlet": f" α={parameter}", "pathological": f" K={parameter}"}.get(scheme, "")
    return f"{scheme}{detail}, {clients} clients"


def _natural_key(value) -> tuple:
    """Sorts text with numbers in it by the numbers' values; numbers by value."""
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return ((1, float(value)),)
    return tuple((1, float(part)) if i % 2 else (0, part)
                 for i, part in enumerate(re.split(r"(\d+(?:\.\d+)?)", str(value))) if part or i % 2)


def _split_label(key: str, value) -> str:
    if key == "problem.source":
        return partition_label(value)
    if key == "n_users":
        return f"n={value}"
    if key == "problem.min_records":
        return f"m={value}"
    return f"{key.split('.')[-1]}={value}"


def _ledgers(runs: pd.DataFrame) -> list[dict | None]:
    """Each run's ledger (OUT/artifacts/<run_id>/ledger.json), None where it cannot be read."""
    from pipeline.tracking.location import open_location

    def one(folder, run_id) -> dict | None:
        try:
            location = open_location(str(folder), "DIR")
            with location.filesystem.open_input_stream(location.path("artifacts", run_id, "ledger.json")) as stream:
                return json.loads(stream.read())
        except Exception:  # noqa: BLE001 (a missing or unreadable ledger leaves its columns empty)
            return None

    if "results_folder" not in runs:
        return [None] * len(runs)
    return [one(folder, run_id) for folder, run_id in zip(runs["results_folder"], runs["run_id"])]


def _local_epsilon0(runs: pd.DataFrame) -> pd.Series:
    """Each run's local budget ε0 from its ledger: the sum of one report's stream ε0 (the largest
    over the run's shuffle events); NaN where the ledger has none (central or non-private
    protocols) or cannot be read."""
    def one(ledger: dict | None) -> float:
        budgets = [sum(event["stream_epsilons"]) for event in (ledger or {}).get("events", [])
                   if event.get("stream_epsilons")]
        return max(budgets) if budgets else math.nan

    return pd.Series([one(ledger) for ledger in _ledgers(runs)], index=runs.index, dtype=float)


def shuffle_gain(runs: pd.DataFrame) -> pd.DataFrame:
    """Seed 004 Fig 1(b)'s comparison as this project can state it (the report's shuffle_gain.csv):
    for the runs of the shuffle Gaussian, the ε their ledger reports beside the ε the same reports
    spend without the shuffler (pipeline.accounting.unshuffled): the runs are the same, so each
    accuracy is reached at the first ε with the shuffler and at the second without.

    Returns:
      One row per (optimizer, accounting, target ε): epsilon (the ledgers' mean), epsilon_unshuffled,
      ratio, and where the runs have held-out accuracy its mean over seeds and standard error;
      empty without shuffle-Gaussian runs.
    """
    from pipeline.accounting.unshuffled import unshuffled_epsilon

    shuffled = runs[runs["privacy.protocol"] == "shuffle_gaussian"] if "privacy.protocol" in runs else runs.iloc[:0]
    if shuffled.empty:
        return pd.DataFrame()
    # One composition per distinct ledger: a grid point's seeds share theirs.
    by_json: dict[str, float | None] = {}
    unshuffled = []
    for ledger in _ledgers(shuffled):
        key = json.dumps(ledger, sort_keys=True)
        if key not in by_json:
            by_json[key] = None if ledger is None else unshuffled_epsilon(ledger)
        unshuffled.append(by_json[key])
    shuffled = shuffled.assign(epsilon_unshuffled=pd.Series(unshuffled, index=shuffled.index, dtype=float))
    accuracy = "final_test_accuracy" in shuffled and shuffled["final_test_accuracy"].notna().any()
    rows = []
    for (optimizer, accounting, target), group in shuffled.groupby(["optimizer.name", "privacy.accounting",
                                                                     "privacy.epsilon"]):
        row = {"optimizer.name": optimizer, "privacy.accounting": accounting, "privacy.epsilon": target,
               "epsilon": group["epsilon"].mean(), "epsilon_unshuffled": group["epsilon_unshuffled"].mean(),
               "seeds": len(group)}
        row["ratio"] = row["epsilon_unshuffled"] / row["epsilon"]
        if accuracy:
            row["accuracy"] = group["final_test_accuracy"].mean()
            row["accuracy_se"] = group["final_test_accuracy"].std(ddof=1) / math.sqrt(len(group))
        rows.append(row)
    return pd.DataFrame(rows)


def accuracy_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Held-out accuracy per series and target ε: the report's accuracy.csv.

    A series is (optimizer, protocol, accounting, privacy model), its unit of privacy
    (privacy.unit) and whichever other config fields vary inside such a line (`_accuracy_splits`:
    a client partition, n, m), each a column of its own.

    Returns:
      One row per series and ε: the keys, privacy.unit, privacy.epsilon, then accuracy (mean over
      seeds), spread (their standard deviation), seeds, epsilon_spent (the largest over seeds),
      local_epsilon0 (mean over seeds of `_local_epsilon0`) and series (its name in the figure,
      without the unit).
    """
    measured = runs[runs["final_test_accuracy"].notna()].copy()
    measured["local_epsilon0"] = _local_epsilon0(measured)
    splits = _accuracy_splits(measured)
    keys = ACCURACY_KEYS + splits + [UNIT, "privacy.epsilon"]
    summary = measured.groupby(keys, dropna=False).agg(
        accuracy=("final_test_accuracy", "mean"), spread=("final_test_accuracy", "std"),
        seeds=("final_test_accuracy", "size"), epsilon_spent=("epsilon", "max"),
        local_epsilon0=("local_epsilon0", "mean")).reset_index()
    # Numbers inside names in numeric order (dirichlet0.1, dirichlet1, dirichlet100), units record then user.
    summary = summary.sort_values(keys, key=lambda column: column.map(_natural_key), kind="stable", ignore_index=True)
    named = [k for k in splits if not (k == "n_users" and "problem.source" in splits)]  # a partition names its clients
    summary["series"] = [
        f"{row['optimizer.name']} / {row['privacy.protocol']} ({row['privacy.model']}, {row['privacy.accounting']})"
        + "".join(f", {_split_label(k, row[k])}" for k in named) for _, row in summary.iterrows()]
    return summary


def _accuracy_vs_epsilon(runs: pd.DataFrame):
    """Held-out accuracy vs target ε on a dataset with the spread over seeds; non-private runs
    as horizontal dashed lines. When the runs vary privacy.unit, one panel per unit (record,
    then user; shared axes), each with every non-private line. When other fields split the
    lines (a client partition), each value of them keeps one colour in every panel, and
    each (optimizer, protocol, accounting) a marker.

    Returns:
      (figure, the plotted means and standard deviations: the report's accuracy.csv).
    """
    summary = accuracy_summary(runs)
    splits = [k for k in summary.columns if k not in (*ACCURACY_KEYS, UNIT, "privacy.epsilon", "accuracy", "spread",
                                                      "seeds", "epsilon_spent", "local_epsilon0", "series")]
    private = summary[summary["privacy.model"] != "none"]
    units = [u for u in UNIT_ORDER if u in set(private[UNIT])] + sorted(set(private[UNIT]) - set(UNIT_ORDER))
    panels = units if len(units) > 1 else [None]
    figure, axes = plt.subplots(1, len(panels), figsize=(8 if len(panels) == 1 else 6.5 * len(panels), 5),
                                sharex=True, sharey=True, squeeze=False)
    # Colours: one per training file (or value of the splitting fields), else one per series; markers per method.
    data = ["problem.source"] if "problem.source" in splits else splits
    data_of = summary[data].astype(str).agg(", ".join, axis=1) if data else summary["series"]
    colours = {value: plt.cm.tab10.colors[i % 10] for i, value in enumerate(dict.fromkeys(data_of))}
    methods = summary[ACCURACY_KEYS].astype(str).agg("/".join, axis=1)
    markers = {method: "osD^v<>px"[i % 9] for i, method in enumerate(dict.fromkeys(methods[summary.index.isin(
        private.index)]))}
    for axis, unit in zip(axes[0], panels):
        for series, curve in summary.groupby("series", sort=False):
            if curve["privacy.model"].iloc[0] == "none":
                axis.axhline(curve["accuracy"].mean(), color=colours[data_of[curve.index[0]]], linestyle="--",
                             linewidth=1.0, label=f"{series}: non-private")
                continue
            if unit is not None:  # one panel: the private runs are all of one unit
                curve = curve[curve[UNIT] == unit]
            if not curve.empty:
                axis.errorbar(curve["privacy.epsilon"], curve["accuracy"], yerr=curve["spread"].fillna(0.0),
                              color=colours[data_of[curve.index[0]]], marker=markers[methods[curve.index[0]]],
                              capsize=3, label=series)
        title = "Test accuracy vs ε" if unit is None else f"privacy.unit: {unit} ({UNIT_TITLES.get(unit, unit)})"
        axis.set(xscale="log", xlabel="target ε", title=title)
        epsilons = sorted(set(private["privacy.epsilon"]))
        axis.set_xticks(epsilons, [f"{epsilon:g}" for epsilon in epsilons])  # the grid's ε, not 3×10⁻¹ on top of 4×10⁻¹
        axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        axis.legend(fontsize=7)
    axes[0][0].set(ylabel="held-out accuracy (mean ± std over seeds)")
    if len(panels) > 1:
        figure.suptitle("Test accuracy vs ε, record- and user-level privacy side by side")
    return figure, summary


def _first_epsilon_reaching(epsilons: np.ndarray, accuracies: np.ndarray, target: float) -> float:
    """The smallest ε at which an accuracy curve reaches `target`, linear in log ε between grid
    points: the first grid ε if the curve starts above it, inf if it never reaches it."""
    order = np.argsort(epsilons)
    grid, curve = np.log(epsilons[order]), accuracies[order]
    if curve[0] >= target:
        return float(epsilons[order][0])
    for i in range(1, len(grid)):
        if curve[i] >= target:
            weight = (target - curve[i - 1]) / (curve[i] - curve[i - 1])
            return float(np.exp(grid[i - 1] + weight * (grid[i] - grid[i - 1])))
    return math.inf


def accounting_gain(runs: pd.DataFrame) -> pd.DataFrame:
    """Seed 001 Fig 5.7's comparison (the report's accounting_gain.csv): for each method run under
    both paper and tight accounting, the ε the paper's accounting needs for the held-out accuracy
    the tight one reaches at each of its target ε.

    Returns:
      One row per (optimizer, protocol, unit, tight target ε): accuracy (tight's mean over seeds),
      epsilon_paper (where the paper curve of seed means first reaches it, linear in log ε),
      epsilon_paper_low / _high (a SLOPE_LEVEL bootstrap interval: both curves' seeds resampled,
      SLOPE_RESAMPLES times, generator seed 0), ratio (epsilon_paper over ε) and seeds. inf where
      the paper curve stays below inside the grid; empty without both accountings.
    """
    measured = runs[runs["final_test_accuracy"].notna() & runs["privacy.accounting"].isin(["paper", "tight"])]
    rows, generator = [], np.random.default_rng(0)
    for (optimizer, protocol, unit), group in measured.groupby(["optimizer.name", "privacy.protocol", UNIT]):
        tables = {accounting: curves.pivot_table(index="seed", columns="privacy.epsilon",
                                                 values="final_test_accuracy").dropna()
                  for accounting, curves in group.groupby("privacy.accounting")}
        if len(tables) < 2 or tables["paper"].shape[1] < 2:
            continue
        tight, paper = tables["tight"], tables["paper"]
        paper_epsilons, paper_values = paper.columns.to_numpy(float), paper.to_numpy()
        for epsilon in tight.columns:
            reached = tight[epsilon].to_numpy()
            point = _first_epsilon_reaching(paper_epsilons, paper_values.mean(axis=0), reached.mean())
            resampled = [_first_epsilon_reaching(
                paper_epsilons, paper_values[generator.integers(0, len(paper), len(paper))].mean(axis=0),
                reached[generator.integers(0, len(reached), len(reached))].mean()) for _ in range(SLOPE_RESAMPLES)]
            rows.append({"optimizer.name": optimizer, "privacy.protocol": protocol, UNIT: unit,
                         "privacy.epsilon": float(epsilon), "accuracy": reached.mean(), "epsilon_paper": point,
                         # "lower"/"higher": no interpolation between a finite ε and inf
                         "epsilon_paper_low": np.quantile(resampled, (1 - SLOPE_LEVEL) / 2, method="lower"),
                         "epsilon_paper_high": np.quantile(resampled, (1 + SLOPE_LEVEL) / 2, method="higher"),
                         "ratio": point / float(epsilon), "seeds": min(len(tight), len(paper))})
    return pd.DataFrame(rows)


def skipped_figures(runs: pd.DataFrame) -> dict[str, str]:
    """The figures the report leaves out because their axis does not vary, with why."""
    skipped = {}
    if runs.groupby(_series_keys(runs), dropna=False)["n_users"].nunique().max() < 2:
        skipped["excess_vs_n"] = ("every series has one n (a grid over n_users, e.g. grid: {n_users: [10000, "
                                  "100000]}, draws the loss against n and fits slopes.csv)")
    return skipped


def build_report(out: str | Path, say: Callable[[str], None] = lambda line: None) -> list[Path]:
    """Draws the report's figures into OUT/report/ (a local folder), or into ./report/ where
    OUT is a URI (figures are drawn locally; the MLflow report run carries them anywhere).

    Args:
      out: a results folder: a path, or a URI pipeline.results.load reads.
      say: told which figure is left out and why (`skipped_figures`).

    Returns:
      The files written (PNG figures, slopes.csv where n varies, and on datasets with held-out
      records accuracy_vs_epsilon.png and accuracy.csv: `accuracy_summary`, one panel
      per unit of privacy when the runs vary privacy.unit, and accounting_gain.csv where a method
      ran under paper and tight accounting: `accounting_gain`; shuffle_gain.csv for shuffle-Gaussian
      runs: `shuffle_gain`; on datasets privacy_by_source.csv:
      what each table spent over its runs, `results.privacy_by_source`).

    Raises:
      ConfigError: the folder holds no finished runs.
    """
    runs, rounds = _read(out)
    folder = (Path.cwd() if "://" in str(out) else Path(out)) / "report"  # never a local folder named "s3:"
    folder.mkdir(exist_ok=True)
    written = []
    slopes = None
    skipped = skipped_figures(runs)
    for name, why in skipped.items():
        (folder / f"{name}.png").unlink(missing_ok=True)  # an earlier report's, of fewer or other runs
        say(f"skipped {name}.png: {why}")
    for name, draw in (("excess_vs_round", lambda ax: _excess_vs_round(runs, rounds, ax)),
                       ("excess_vs_n", lambda ax: _excess_vs_n(runs, ax)),
                       ("epsilon_vs_round", lambda ax: _epsilon_vs_round(runs, rounds, ax)),
                       ("compare_optimizers", lambda ax: _compare(runs, ax)),
                       *([("compare_models", lambda ax: _models_vs_epsilon(runs, ax))]
                         if runs.get("privacy.protocol", pd.Series(dtype=str)).nunique() > 1 else []),
                       *([("accuracy_vs_epsilon", None)]
                         if runs.get("final_test_accuracy", pd.Series(dtype=float)).notna().any() else [])):
        if name in skipped:
            continue
        if name == "accuracy_vs_epsilon":  # draws its own panels: one per unit of privacy
            figure, result = _accuracy_vs_epsilon(runs)
            result.to_csv(folder / "accuracy.csv", index=False)
            written.append(folder / "accuracy.csv")
        else:
            figure, axes = plt.subplots(figsize=(8, 5))
            result = draw(axes)
            if result is not None:
                slopes = result
        figure.tight_layout()
        path = folder / f"{name}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    if slopes is not None:
        slopes.to_csv(folder / "slopes.csv", index=False)
        written.append(folder / "slopes.csv")
    else:  # no n varies: an earlier report's slopes are of other runs
        (folder / "slopes.csv").unlink(missing_ok=True)
    for name, table in (("accounting_gain", accounting_gain(runs) if "final_test_accuracy" in runs else None),
                        ("shuffle_gain", shuffle_gain(runs))):
        if table is not None and not table.empty:
            table.to_csv(folder / f"{name}.csv", index=False)
            written.append(folder / f"{name}.csv")
    from pipeline import results

    spent = results.privacy_by_source(runs)
    if not spent.empty:  # a table's users are protected by the total of the runs that read it, not by each
        spent.to_csv(folder / "privacy_by_source.csv", index=False)
        written.append(folder / "privacy_by_source.csv")
    return written
