"""The figures hold the expected series: read the lines and bars back from the matplotlib objects."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from src.report import plots
from src.report.run_files import load_run
from src.report.series import gpu_wait_share, reward_panels, step_time_breakdown, throughput

from . import run_builder as rb


@pytest.fixture
def run(run_dir):
    return load_run(run_dir)


def _lines(ax):
    return {line.get_label(): line.get_xydata() for line in ax.get_lines()}


def test_rewards_figure_has_a_panel_per_component_with_train_and_val_lines(run):
    panels = reward_panels(run)
    fig = plots.plot_rewards(panels)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["reward", "format", "xcomet"]
    reward = _lines(axes[0])
    assert set(reward) == {"train", "val zh-en", "val en-zh"}
    np.testing.assert_allclose(reward["train"], [[s, rb.train_score(s)] for s in range(1, rb.STEPS + 1)], rtol=1e-6)
    assert reward["val zh-en"][:, 0].tolist() == [0, 2, 4, 6]
    assert set(_lines(axes[2])) == {"train", "val zh-en", "val en-zh"}
    plt.close(fig)


def test_step_time_figure_stacks_stages_to_the_step_time(run):
    bd = step_time_breakdown(run.metrics)
    fig = plots.plot_step_time(bd)
    ax = fig.axes[0]
    containers = {c.get_label(): c for c in ax.containers}
    assert list(containers) == list(bd.columns)
    gen = [bar.get_height() for bar in containers["generation"]]
    assert gen == [rb.stage_times(s)["gen"] for s in range(1, rb.STEPS + 1)]
    tops = [bar.get_y() + bar.get_height() for bar in containers["other"]]
    assert tops == pytest.approx(run.metrics.loc[1:, "timing_s/step"].to_list())
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(bd.columns)
    plt.close(fig)


def test_throughput_and_gpu_wait_figures(run):
    tp = throughput(run.metrics, run.shape)
    fig = plots.plot_throughput(tp)
    lines = _lines(fig.axes[0])
    assert set(lines) == {"end-to-end (e2e_tps)", "actor update (update_tps)", "rollout (vllm_tps)"}
    np.testing.assert_allclose(lines["rollout (vllm_tps)"][:, 1], tp.table["rollout_tps"].to_numpy())
    plt.close(fig)

    share = gpu_wait_share(run.metrics)
    fig = plots.plot_gpu_wait(share)
    np.testing.assert_allclose(_lines(fig.axes[0])["GPUs waiting"][:, 1], share.to_numpy() * 100)
    plt.close(fig)


def test_empty_inputs_draw_a_note_instead_of_failing():
    import pandas as pd

    from src.report.series import Throughput

    for fig in (plots.plot_step_time(pd.DataFrame()), plots.plot_gpu_wait(pd.Series(dtype=float)),
                plots.plot_throughput(Throughput(pd.DataFrame(columns=["e2e_tps", "update_tps", "rollout_tps"]), None,
                                                 "unavailable")),
                plots.plot_rewards({"reward": {}})):
        assert any("no " in t.get_text() for ax in fig.axes for t in ax.texts)
        plt.close(fig)
