"""A run's own figure, logged to its MLflow run (issue 44): its excess population loss by round
beside the rate its theorem predicts, and the ε it has spent beside its target."""
from __future__ import annotations

import io

import numpy as np

# Runs a grid draws by default (tracking.run_plots: auto): each figure costs about 0.1 s of the
# driver's time, which a grid of thousands of tiny runs would spend mostly on figures.
AUTO_PLOTS = 100


def draws_plots(mode: str, runs: int) -> bool:
    """Whether a grid of `runs` runs to do draws each run's figure (tracking.run_plots)."""
    return mode == "all" or (mode == "auto" and runs <= AUTO_PLOTS)


def run_figure(title: str, rounds: np.ndarray, excess_loss: np.ndarray, epsilon_spent: np.ndarray,
               rates: dict[str, float], target_epsilon: float) -> bytes:
    """The figure as PNG bytes.

    Args:
      title: the run's display name.
      rounds, excess_loss, epsilon_spent: the logged rounds' index and metrics.
      rates: the run's theory_rate and nonprivate_rate (runs.parquet), drawn where finite.
      target_epsilon: the run's ε target.

    Returns:
      The PNG file's bytes.
    """
    from matplotlib.figure import Figure  # the object API: no pyplot state, no display

    figure = Figure(figsize=(9, 3.4), dpi=80)
    figure.subplots_adjust(left=0.08, right=0.98, bottom=0.16, top=0.84, wspace=0.25)  # tight_layout doubles the cost
    loss, spent = figure.subplots(1, 2)
    steps = rounds + 1
    marker = "o" if len(steps) < 20 else None  # a one-round run is a point
    drawn = np.isfinite(excess_loss) & (excess_loss > 0)  # a dataset's unmeasured rounds are NaN
    if drawn.any():
        loss.loglog(steps[drawn], excess_loss[drawn], color="C0", marker=marker, label="excess population loss")
        for name, style, label in (("theory_rate", "--", "the theorem's rate"),
                                   ("nonprivate_rate", ":", "non-private rate")):
            value = rates.get(name)
            if value is not None and np.isfinite(value) and value > 0:
                loss.axhline(value, linestyle=style, color="k", linewidth=1, label=label)
        loss.legend(fontsize="small")
    else:
        loss.set_xscale("log")
        loss.text(0.5, 0.5, "no positive excess loss measured", ha="center", transform=loss.transAxes)
    loss.set_xlabel("round (1-based)")
    loss.set_title("excess population loss")
    finite = np.isfinite(epsilon_spent)
    if finite.any():
        spent.plot(steps[finite], epsilon_spent[finite], color="C1", marker=marker, label="ε spent")
        spent.axhline(target_epsilon, linestyle="--", color="C3", linewidth=1, label=f"target ε = {target_epsilon:g}")
        spent.set_ylim(bottom=0)
        spent.legend(fontsize="small")
    else:  # a non-private run, or a paper bound outside its theorem's conditions
        spent.text(0.5, 0.5, "ε = ∞: non-private, or no bound applies", ha="center", transform=spent.transAxes)
    spent.set_xscale("log")
    spent.set_xlabel("round (1-based)")
    spent.set_title("ε spent (the run's accounting mode)")
    for axis in (loss.xaxis, loss.yaxis, spent.xaxis):
        _plain_log_ticks(axis)
    figure.suptitle(title if len(title) <= 110 else title[:107] + "…", fontsize="medium")
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()


def _plain_log_ticks(axis) -> None:
    """A log axis's ticks labelled in plain text (1e-03, 10, 100), not in mathtext (10⁻³, parsed
    label by label: a quarter of a figure's time), and minor ticks only on an axis spanning less
    than a decade, where they carry the labels (matplotlib's default draws eight a decade, each an
    object of its own: half of a figure's time). A linear axis is left as is."""
    from matplotlib import ticker

    if axis.get_scale() != "log":
        return
    axis.set_major_formatter(ticker.LogFormatter())
    low, high = sorted(axis.get_view_interval())
    if high >= 10.0 * low:
        axis.set_minor_locator(ticker.NullLocator())
    else:
        axis.set_minor_formatter(ticker.LogFormatter(labelOnlyBase=False))
