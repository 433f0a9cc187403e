"""Matplotlib figures from the series in `series.py`. Each function returns the Figure (tests read
its lines and bars back); `save` writes it as PNG and closes it."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on training nodes or CI

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from src.scorer.backends import SCALES, scale_of  # noqa: E402

from .series import HeldOut, Throughput, label_metric  # noqa: E402

DPI = 110


def _no_data(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} in this run", ha="center", va="center", transform=ax.transAxes, color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def plot_rewards(panels: dict[str, dict[str, pd.Series]]) -> Figure:
    """One subplot per panel (total reward first, then components); train as a line, each
    validation direction as a line with markers (validation runs every test_freq steps)."""
    n = max(1, len(panels))
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.6 * nrows), squeeze=False)
    for ax, (name, lines) in zip(axes.flat, panels.items()):
        # a component on a scale of its own says it (a backend's own metric is logged raw)
        ax.set_title(f"{name} ({scale_of(name).describe()})" if name in SCALES else name)
        ax.set_xlabel("step")
        if not lines:
            _no_data(ax, f"{name} values")
            continue
        for label, s in lines.items():
            style = {"marker": "o", "markersize": 3.5} if label.startswith("val") else {"linewidth": 1.4}
            ax.plot(s.index.to_numpy(), s.to_numpy(), label=label, **style)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle("Reward and reward components (train: rollout batches; val: validation set)")
    fig.tight_layout()
    return fig


def _right_axis(ax, metric: str, what: str):
    """A twin y axis for a metric on a scale of its own (e.g. an error score, lower is better),
    inverted when lower is better, so that up means better for every line of the panel."""
    scale = scale_of(metric)
    twin = ax.twinx()
    if not scale.higher_is_better:
        twin.invert_yaxis()
    twin.set_ylabel(f"{metric} {what} ({scale.describe()}{'; axis inverted' if not scale.higher_is_better else ''})",
                    fontsize=8)
    return twin


def _align_zero(left, twin) -> None:
    """Put the twin axis's 0 at the height of the left axis's 0 (the change panel: every line starts
    at 0, so each one's rise or fall reads against the same baseline)."""
    lo, hi = left.get_ylim()
    f = (0.0 - lo) / (hi - lo)  # height of 0 on the left axis, 0 = bottom
    values = [v for line in twin.get_lines() for v in line.get_ydata()]
    if not values or not 0.0 < f < 1.0:
        return
    inverted = twin.yaxis_inverted()
    up, down = (min(values), max(values)) if inverted else (max(values), min(values))  # values at top, bottom
    # span S: the axis shows [0 - f*S, 0 + (1-f)*S] measured upward from the bottom
    span = max(abs(up) / (1.0 - f), abs(down) / f, 1e-9) * 1.05
    bottom, top = (f * span, -(1.0 - f) * span) if inverted else (-f * span, (1.0 - f) * span)
    twin.set_ylim(bottom, top)


def _legend_label(label: str) -> str:
    metric = label_metric(label)
    if metric not in SCALES:
        return label
    scale = scale_of(metric)
    return f"{label} [right axis: {scale.describe()}{', inverted' if not scale.higher_is_better else ''}]"


def plot_held_out(held: HeldOut) -> Figure:
    """Per direction, two panels: the validation values of the trained metrics (solid) and the
    held-out ones (dashed), and each one's change since the first validation, so a trained metric
    that climbs away from the held-out ones shows as a widening gap. COMET-family metrics (0-1,
    higher is better) share the left axis; a metric on a scale of its own (a backend's own, e.g. an
    error score, lower is better) gets a right axis, inverted so up is better for every line; the legend says which."""
    n = max(1, len(held.panels))
    fig, axes = plt.subplots(2, n, figsize=(5.6 * n, 7.0), squeeze=False)
    if not held.panels:
        _no_data(axes[0][0], "held-out comparison")
        axes[0][0].text(0.5, 0.35, held.why_empty, ha="center", va="center", wrap=True, fontsize=8,
                        transform=axes[0][0].transAxes, color="gray")
        axes[1][0].set_visible(False)
        fig.suptitle("Trained vs held-out validation metrics")
        return fig
    for col, (direction, lines) in enumerate(held.panels.items()):
        top, bottom = axes[0][col], axes[1][col]
        top.set_title(f"{direction}: validation value")
        bottom.set_title(f"{direction}: change since first validation")
        twins: dict[tuple[int, str], object] = {}  # (panel, metric) -> its right axis
        colors = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4)
        for label, s in lines.items():
            style = {"linestyle": "-", "marker": "o"} if label.endswith("(trained)") else \
                {"linestyle": "--", "marker": "s"}
            metric, color = label_metric(label), next(colors)
            x = s.index.to_numpy()
            for row, (ax, y, what) in enumerate(((top, s, "value"), (bottom, s - s.iloc[0], "change"))):
                if metric in SCALES:
                    ax = twins.get((row, metric)) or twins.setdefault((row, metric), _right_axis(ax, metric, what))
                ax.plot(x, y.to_numpy(), label=label, markersize=3.5, color=color, **style)
        for row, ax in enumerate((top, bottom)):
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
            handles = [h for a in [ax] + [t for (r, _), t in twins.items() if r == row] for h in a.get_lines()
                       if not h.get_label().startswith("_")]
            ax.legend(handles, [_legend_label(h.get_label()) for h in handles], fontsize=8)
        bottom.axhline(0.0, color="gray", linewidth=0.8)
        for (row, _), twin in twins.items():
            if row == 1:
                _align_zero(bottom, twin)
    fig.suptitle("Trained vs held-out validation metrics (a widening gap: the policy learns the reward model)")
    fig.tight_layout()
    return fig


def plot_step_time(breakdown: pd.DataFrame) -> Figure:
    """Stacked bars: seconds per stage for each step; the bar height is the step time."""
    fig, ax = plt.subplots(figsize=(10, 4.5))
    if breakdown.empty:
        _no_data(ax, "step timings")
        return fig
    x = breakdown.index.to_numpy()
    bottom = pd.Series(0.0, index=breakdown.index)
    width = 0.8 if len(x) < 80 else 1.0
    cmap = plt.get_cmap("tab10")
    for i, col in enumerate(breakdown.columns):
        color = "lightgray" if col == "other" else cmap(i % 10)
        ax.bar(x, breakdown[col].to_numpy(), width=width, bottom=bottom.to_numpy(), label=col, color=color,
               linewidth=0)
        bottom = bottom + breakdown[col]
    ax.set_xlabel("step")
    ax.set_ylabel("seconds")
    ax.set_title("Step time by stage")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_throughput(tp: Throughput) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 4))
    table = tp.table.dropna(how="all")
    if table.empty:
        _no_data(ax, "throughput data")
        return fig
    labels = {"e2e_tps": "end-to-end (e2e_tps)", "update_tps": "actor update (update_tps)",
              "rollout_tps": "rollout (vllm_tps)"}
    for col, label in labels.items():
        s = table[col].dropna()
        if not s.empty:
            ax.plot(s.index.to_numpy(), s.to_numpy(), marker=".", label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("tokens / GPU / s")
    ax.set_title(f"Throughput per GPU ({tp.gpus} GPUs)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.text(0.01, 0.01, f"tokens per GPU = {tp.method}", fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def plot_gpu_wait(share: pd.Series) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 3.6))
    if share.empty:
        _no_data(ax, "step timings")
        return fig
    ax.plot(share.index.to_numpy(), (share * 100).to_numpy(), marker=".", label="GPUs waiting")
    ax.set_ylim(0, 100)
    ax.set_xlabel("step")
    ax.set_ylabel("% of step time")
    ax.set_title("Share of each step the GPUs wait on non-GPU work (reward, advantage, checkpoint, driver)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
