"""One figure per metric of a comparison: a line per configuration (the mean over its seeds) and,
where it has several runs, the band between their min and max (compare.py computes both)."""
from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")  # no display on training nodes or CI

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from src.record.run_params import FAILED  # noqa: E402

from .compare import Comparison, Metric  # noqa: E402


def file_name(metric: Metric) -> str:
    """`critic/score/mean` -> `critic_score_mean.png` (a name that is a file name everywhere)."""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", metric.name).strip("_") + ".png"


def plot_metric(comparison: Comparison, metric: Metric) -> Figure:
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn = 0
    for i, config in enumerate(comparison.configurations):
        result = config.metrics.get(metric.name)
        if result is None:
            continue
        curve, color = result.curve, colors[i % len(colors)]
        x = curve.index.to_numpy()
        seeds = f"{result.runs} seed{'s' if result.runs != 1 else ''}"
        failed = config.states().get(FAILED, 0)
        label = f"{config.label} ({seeds}" + (f", {failed} failed" if failed else "") + ")"
        marker = "o" if metric.name.startswith("val-") else None  # validation: every test_freq steps
        ax.plot(x, curve["mean"].to_numpy(), color=color, label=label, marker=marker, markersize=3.5,
                linestyle="--" if failed else "-")
        if result.runs > 1:
            ax.fill_between(x, curve["min"].to_numpy(), curve["max"].to_numpy(), color=color, alpha=0.18,
                            linewidth=0)
        drawn += 1
    ax.set_title(metric.title + ("" if metric.better is None else f" ({metric.better} is better)"))
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, f"no run logged {metric.name}", ha="center", va="center", transform=ax.transAxes,
                color="gray")
    fig.text(0.01, 0.01, f"{metric.name}; line: mean over seeds; band: min-max over seeds; dashed: a run failed",
             fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig
