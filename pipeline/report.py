"""`python -m pipeline report DIR`: figures from a results folder, logged to MLflow."""
from __future__ import annotations

import math
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
    axes.set_xticks(positions, [_label(r, runs).replace(" ", "\n") for _, r in summary.iterrows()], fontsize=7)
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


def _accuracy_vs_epsilon(runs: pd.DataFrame, axes) -> pd.DataFrame:
    """Held-out accuracy vs target ε on a dataset, one line per (optimizer, protocol,
    accounting) with the spread over seeds; non-private runs as horizontal lines.

    Returns:
      The plotted means and standard deviations (the report's accuracy.csv).
    """
    measured = runs[runs["final_test_accuracy"].notna()]
    summary = measured.groupby(["optimizer.name", "privacy.protocol", "privacy.accounting", "privacy.model",
                                "privacy.epsilon"]).agg(
        accuracy=("final_test_accuracy", "mean"), spread=("final_test_accuracy", "std"),
        seeds=("final_test_accuracy", "size"), epsilon_spent=("epsilon", "max")).reset_index()
    for (optimizer, protocol, accounting, model), curve in summary.groupby(
            ["optimizer.name", "privacy.protocol", "privacy.accounting", "privacy.model"]):
        label = f"{optimizer} / {protocol} ({model}, {accounting})"
        if model == "none":
            axes.axhline(curve["accuracy"].mean(), color="black", linestyle="--", label=f"{label}: non-private")
        else:
            axes.errorbar(curve["privacy.epsilon"], curve["accuracy"], yerr=curve["spread"].fillna(0.0), marker="o",
                          capsize=3, label=label)
    axes.set(xscale="log", xlabel="target ε", ylabel="held-out accuracy (mean ± std over seeds)",
             title="Test accuracy vs ε")
    axes.legend(fontsize=7)
    return summary


def build_report(out: str | Path) -> list[Path]:
    """Draws the report's figures into OUT/report/ (a local folder), or into ./report/ where
    OUT is a URI (figures are drawn locally; the MLflow report run carries them anywhere).

    Args:
      out: a results folder: a path, or a URI pipeline.results.load reads.

    Returns:
      The files written (PNG figures, slopes.csv, and on datasets with held-out
      records accuracy_vs_epsilon.png and accuracy.csv).

    Raises:
      ConfigError: the folder holds no finished runs.
    """
    runs, rounds = _read(out)
    folder = (Path.cwd() if "://" in str(out) else Path(out)) / "report"  # never a local folder named "s3:"
    folder.mkdir(exist_ok=True)
    written = []
    slopes = None
    for name, draw in (("excess_vs_round", lambda ax: _excess_vs_round(runs, rounds, ax)),
                       ("excess_vs_n", lambda ax: _excess_vs_n(runs, ax)),
                       ("epsilon_vs_round", lambda ax: _epsilon_vs_round(runs, rounds, ax)),
                       ("compare_optimizers", lambda ax: _compare(runs, ax)),
                       *([("compare_models", lambda ax: _models_vs_epsilon(runs, ax))]
                         if runs.get("privacy.protocol", pd.Series(dtype=str)).nunique() > 1 else []),
                       *([("accuracy_vs_epsilon", lambda ax: _accuracy_vs_epsilon(runs, ax))]
                         if runs.get("final_test_accuracy", pd.Series(dtype=float)).notna().any() else [])):
        figure, axes = plt.subplots(figsize=(8, 5))
        result = draw(axes)
        if name == "accuracy_vs_epsilon":
            result.to_csv(folder / "accuracy.csv", index=False)
            written.append(folder / "accuracy.csv")
        elif result is not None:
            slopes = result
        figure.tight_layout()
        path = folder / f"{name}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    slopes.to_csv(folder / "slopes.csv", index=False)
    written.append(folder / "slopes.csv")
    return written
