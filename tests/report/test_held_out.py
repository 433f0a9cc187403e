"""The trained metric beside the held-out ones (issue 25 part 3): series, plot, summary, report file."""
from __future__ import annotations

import shutil

import pytest

from src.report import build_report
from src.report.plots import plot_held_out
from src.report.run_files import load_run
from src.report.series import held_out_panels
from src.report.summary import held_out_lines

from . import run_builder as rb

VAL_STEPS = [0, 2, 4, 6]


def _mean(direction, value):
    vals = [value(i) for i, (d, *_r) in enumerate(rb.VAL_SAMPLES) if d == direction]
    return sum(vals) / len(vals)


def test_trained_and_held_out_side_by_side_per_direction(held_out_run):
    held = held_out_panels(load_run(held_out_run))
    # trained: weight != 0 in the run's training reward; held out: logged at validation, weight 0
    assert held.trained == ["xcomet"] and held.held_out == ["comet"]
    assert list(held.panels) == ["en-zh", "zh-en"]
    for direction in ("en-zh", "zh-en"):
        lines = held.panels[direction]
        assert list(lines) == ["xcomet (trained)", "comet (held out)"]
        assert list(lines["comet (held out)"].index) == VAL_STEPS
        assert lines["comet (held out)"].to_list() == pytest.approx(
            [_mean(direction, lambda i: rb.held_out_comet(s, i)) for s in VAL_STEPS])
        assert lines["xcomet (trained)"].to_list() == pytest.approx(
            [_mean(direction, lambda i: rb.VAL_SAMPLES[i][4]["xcomet"] + 0.01 * s) for s in VAL_STEPS])


def test_plot_draws_values_and_change_since_first_validation(held_out_run):
    held = held_out_panels(load_run(held_out_run))
    fig = plot_held_out(held)
    top, bottom = fig.axes[0], fig.axes[2]  # 2 x 2 grid, row-major: en-zh value, zh-en value, en-zh change...
    assert top.get_title() == "en-zh: validation value" and bottom.get_title() == "en-zh: change since first validation"
    drawn = {line.get_label(): line for line in bottom.get_lines() if not line.get_label().startswith("_")}
    comet = held.panels["en-zh"]["comet (held out)"]
    assert list(drawn["comet (held out)"].get_ydata()) == pytest.approx((comet - comet.iloc[0]).to_list())
    assert drawn["comet (held out)"].get_linestyle() == "--" and drawn["xcomet (trained)"].get_linestyle() == "-"
    # the gap grows: the trained metric gains, the held-out one loses
    assert drawn["xcomet (trained)"].get_ydata()[-1] > 0 > drawn["comet (held out)"].get_ydata()[-1]


def test_summary_gives_the_gap(held_out_run):
    held = held_out_panels(load_run(held_out_run))
    text = "\n".join(held_out_lines(held))
    row = next(line for line in text.splitlines() if line.startswith("| zh-en | comet (held out)"))
    gained_x = 0.01 * 6
    gained_c = -0.02 * 6
    assert row.split(" | ")[-1].rstrip(" |") == f"{gained_x - gained_c:.4f}"


def test_a_run_without_a_held_out_metric_says_how_to_add_one(run_dir):
    held = held_out_panels(load_run(run_dir))
    assert held.panels == {} and held.trained == ["xcomet"]
    assert "reward.validation_models" in held.why_empty
    assert "reward.validation_models" in "\n".join(held_out_lines(held))


def test_a_run_without_training_weights_says_so(run_dir):
    cfg = run_dir / "snapshot" / "verl_config.yaml"
    cfg.write_text(cfg.read_text(encoding="utf-8").split("reward:")[0], encoding="utf-8")
    held = held_out_panels(load_run(run_dir))
    assert held.panels == {} and "names no training weights" in held.why_empty


def test_report_writes_the_held_out_plot(held_out_run, tmp_path):
    run = tmp_path / held_out_run.name
    shutil.copytree(held_out_run, run)
    files = build_report(run)
    assert files.files["held_out"].name == "held_out.png" and files.files["held_out"].stat().st_size > 0
    summary = files.files["summary"].read_text(encoding="utf-8")
    assert "## Trained vs held-out" in summary and "comet (held out)" in summary


def test_the_held_out_option_reaches_the_report_through_verls_config(tmp_path):
    """reward=comet trains on CometKiwi (+BLEU); COMET-DA added to the validation models and XCOMET
    through mode=eval are asked at validation with training weight 0: what the report reads as
    held out, from the verl config the launcher builds (the key the snapshot holds)."""
    from omegaconf import OmegaConf

    from src import verl_config
    from src.config import compose_config
    from src.plan import build_plan
    from src.record.reward_weights import train_weights_of

    cfg = compose_config(["reward=comet", "reward.validation_models=[cometkiwi_da,comet_da]", "reward.mode=eval",
                          f"paths.results_root={tmp_path}/results"])
    verl = OmegaConf.to_container(verl_config.build(build_plan(cfg, run_dir=str(tmp_path / "run")), cfg),
                                  resolve=True)
    weights = train_weights_of(verl)
    assert {c for c, w in weights.items() if w != 0} == {"bleu", "kiwi"}
    kwargs = verl["reward"]["custom_reward_function"]["reward_kwargs"]
    assert kwargs["models"] == {"comet": "comet_da", "kiwi": "cometkiwi_da", "span": "xcomet_xl"}
    assert weights["comet"] == weights["xcomet"] == 0.0
