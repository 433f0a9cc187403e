"""MetricX-24 as a held-out metric in the report (issue 25 part 2/3): it is logged raw, 0-25 and lower
is better, while the COMET-family metrics are 0-1 and higher is better; held_out.png gives it a
right axis of its own (inverted, so up is better for every line) and says so in the legend; the
summary's tables say "lower is better" and take its change into the gap as -change/25."""
from __future__ import annotations

import shutil

import pytest

from src.report import build_report
from src.report.plots import plot_held_out, plot_rewards
from src.report.run_files import load_run
from src.report.series import held_out_panels, reward_panels
from src.report.summary import held_out_lines

from . import run_builder as rb

VAL_STEPS = [0, 2, 4, 6]


def _mean(direction, value):
    vals = [value(i) for i, (d, *_r) in enumerate(rb.VAL_SAMPLES) if d == direction]
    return sum(vals) / len(vals)


def test_metricx_is_held_out_beside_the_trained_metric(metricx_run):
    held = held_out_panels(load_run(metricx_run))
    assert held.trained == ["xcomet"] and held.held_out == ["comet", "metricx"]
    line = held.panels["zh-en"]["metricx (held out)"]
    assert list(line.index) == VAL_STEPS
    assert line.to_list() == pytest.approx([_mean("zh-en", lambda i: rb.held_out_metricx(s, i)) for s in VAL_STEPS])


def test_plot_puts_metricx_on_its_own_inverted_axis_and_says_so(metricx_run):
    held = held_out_panels(load_run(metricx_run))
    fig = plot_held_out(held)
    grid = fig.axes[:4]  # 2 x 2, row-major: en-zh value, zh-en value, en-zh change, zh-en change
    twins = fig.axes[4:]
    assert len(twins) == 4  # one right axis per panel
    for panel in grid:
        left = {l.get_label() for l in panel.get_lines() if not l.get_label().startswith("_")}
        assert left == {"xcomet (trained)", "comet (held out)"}  # the 0-1 metrics share the left axis
        texts = [t.get_text() for t in panel.get_legend().get_texts()]
        assert "metricx (held out) [right axis: 0-25, lower is better, inverted]" in texts
        assert "comet (held out)" in texts
    value_axis = next(t for t in twins if t.bbox.bounds == grid[1].bbox.bounds and "value" in t.get_ylabel())
    assert value_axis.get_ylabel() == "metricx value (0-25, lower is better; axis inverted)"
    assert value_axis.yaxis_inverted()
    (line,) = value_axis.get_lines()
    raw = held.panels["zh-en"]["metricx (held out)"]
    assert list(line.get_ydata()) == pytest.approx(raw.to_list())  # raw scores, not transformed
    change_axis = next(t for t in twins if t.bbox.bounds == grid[3].bbox.bounds)
    assert "change" in change_axis.get_ylabel() and change_axis.yaxis_inverted()
    assert list(change_axis.get_lines()[0].get_ydata()) == pytest.approx((raw - raw.iloc[0]).to_list())


def test_summary_says_lower_is_better_and_gaps_on_one_scale(metricx_run):
    held = held_out_panels(load_run(metricx_run))
    text = "\n".join(held_out_lines(held))
    row = next(line for line in text.splitlines() if line.startswith("| zh-en | metricx (held out"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "metricx (held out) (0-25, lower is better)"
    assert float(cells[4]) == pytest.approx(0.25 * 6, abs=1e-4)  # raw change: worse by 1.5 points
    # the gap on the 0-1, higher-is-better scale: XCOMET gained 0.06, MetricX lost 1.5/25 = 0.06
    assert float(cells[5]) == pytest.approx(0.01 * 6 + 0.25 * 6 / 25, abs=1e-4)
    assert "metricx: first, last and change are its own scale (0-25, lower is better)" in text


def test_rewards_plot_and_summary_read_metricx_as_lower_is_better(metricx_run, tmp_path):
    panels = reward_panels(load_run(metricx_run))
    titles = [ax.get_title() for ax in plot_rewards(panels).axes if ax.get_visible()]
    assert "metricx (0-25, lower is better)" in titles
    run = tmp_path / metricx_run.name
    shutil.copytree(metricx_run, run)
    summary = build_report(run).files["summary"].read_text(encoding="utf-8")
    row = next(l for l in summary.splitlines() if l.startswith("| metricx (0-25, lower is better) | val zh-en"))
    # best is the lowest score, at the first validation (it only got worse)
    assert row.split(" | ")[4] == f"{_mean('zh-en', lambda i: rb.held_out_metricx(0, i)):.4f} (step 0)"


def test_samples_page_says_metricx_is_lower_is_better(metricx_run, tmp_path):
    run = tmp_path / metricx_run.name
    shutil.copytree(metricx_run, run)
    page = build_report(run).files["val_samples"].read_text(encoding="utf-8")
    first = rb.held_out_metricx(0, 0)
    assert f"metricx: {first:.3f} (0-25, lower is better)" in page
    assert "xcomet: " in page and "xcomet: 0.710 (" not in page  # a 0-1 metric stays as it was


def test_trained_on_metricx_the_gap_reads_its_fall_as_a_gain():
    """reward=metricx: MetricX-24 is the trained metric and falls (improves) from 8 to 5; CometKiwi,
    held out, rises by 0.02. On the 0-1 scale MetricX gained 3/25 = 0.12, so the gap is 0.10."""
    import pandas as pd

    from src.report.series import HeldOut

    steps = [0, 2, 4]
    held = HeldOut(["metricx"], ["kiwi"], {"zh-en": {
        "metricx (trained)": pd.Series([8.0, 6.5, 5.0], index=steps),
        "kiwi (held out)": pd.Series([0.50, 0.51, 0.52], index=steps)}})
    rows = {l.split(" | ")[1]: l for l in held_out_lines(held) if l.startswith("| zh-en")}
    assert rows["kiwi (held out)"].rstrip(" |").endswith("| 0.0200 | 0.1000")
    assert "metricx (trained) (0-25, lower is better) | 8.0000 | 5.0000 | -3.0000 |" in rows[
        "metricx (trained) (0-25, lower is better)"]
    fig = plot_held_out(held)
    twin = fig.axes[-1]
    assert twin.yaxis_inverted() and [l.get_label() for l in twin.get_lines()] == ["metricx (trained)"]
    assert twin.get_lines()[0].get_linestyle() == "-"  # trained: solid, as on the left axis
