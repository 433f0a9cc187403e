"""The learn_tiny verdict (src/pipeline/learning.py) on metrics files written the way verl's file logger writes
them ({"step": N, "data": {...}} per line, verl/utils/tracking.py FileLogger), and its config refusals.
The real runs, learning and control, are tests/loop/test_learn_tiny.py."""
from __future__ import annotations

import json

import pytest

from src.pipeline import learning
from src.pipeline.errors import RunError
from tests.helpers.launches import files_under, launch

LEARN = {"enable": True, "window": 2, "min_rise": 0.3, "val_metric": "bleu", "min_val_rise": 2.0}
VAL = "val-aux/synth_zh_en/zh-en/bleu/mean@4"


def _write(path, scores: list[float], bleu: dict[int, float]):
    with open(path, "w") as f:
        for step, value in bleu.items():
            if step == 0:
                f.write(json.dumps({"step": 0, "data": {VAL: value}}) + "\n")
        for step, score in enumerate(scores, start=1):
            data = {learning.TRAINED_METRIC: score, "timing_s/step": 1.0}
            if step in bleu:
                data[VAL] = bleu[step]
            f.write(json.dumps({"step": step, "data": data}) + "\n")
    return path


def _composed(steps: int = 6, **learn) -> dict:
    return {"learn": dict(LEARN, **learn),
            "trainer": {"total_training_steps": steps, "val_before_train": True, "test_freq": 3}}


def test_a_rise_above_both_margins_passes_and_the_verdict_is_saved(tmp_path, capsys):
    metrics = _write(tmp_path / "m.jsonl", [-2.0, -1.8, -1.5, -1.4, -1.2, -1.0], {0: 10.0, 3: 12.0, 6: 15.5})
    learning.check(_composed(), tmp_path, metrics)
    text = (tmp_path / learning.VERDICT_FILE).read_text()
    assert text == capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == "=== qe-rl learn verdict: PASS ==="
    # first two steps -1.9, last two -1.1: +0.8; BLEU 10 -> 15.5
    assert "steps 1-2 vs 5-6: -1.9 -> -1.1, rise +0.8 (needs >= 0.3)" in lines[1]
    assert "step 0 vs step 6: 10 -> 15.5, rise +5.5 (needs >= 2)" in lines[2]


@pytest.mark.parametrize("scores, bleu, failed", [
    ([-1.0, -1.1, -1.0, -1.2, -1.0, -0.9], {0: 10.0, 6: 15.0}, "trained"),    # +0.1: below 0.3
    ([-2.0, -2.0, -1.0, -1.0, -1.0, -1.0], {0: 10.0, 6: 11.0}, "held-out"),  # BLEU +1: below 2
    ([-1.0, -1.0, -2.0, -2.0, -3.0, -3.0], {0: 10.0, 6: 4.0}, "trained, held-out"),  # a flipped sign
    ([-2.0, -1.0, -1.0], {0: 10.0, 3: 20.0}, "trained"),  # a run cut short: 3 steps, 4 needed
    ([-2.0, -2.0, -1.0, -1.0, -1.0, -1.0], {0: 10.0}, "held-out"),  # one validation only
])
def test_too_small_a_rise_fails_with_one_error_line(tmp_path, capsys, scores, bleu, failed):
    metrics = _write(tmp_path / "m.jsonl", scores, bleu)
    with pytest.raises(RunError) as exc:
        learning.check(_composed(), tmp_path, metrics)
    assert f"the policy did not learn ({failed} reward did not rise enough)" in str(exc.value)
    assert exc.value.code == 1
    head = capsys.readouterr().out.splitlines()[0]
    assert head == f"=== qe-rl learn verdict: FAIL ({failed}) ==="


def test_validation_metric_mean_over_data_sources_at_any_sample_count(tmp_path):
    # mean@N over all N samples; verl's mean@n for n < N (subsets) and std@N are not it
    rows = {0: {"val-aux/a/zh-en/bleu/mean@4": 10.0, "val-aux/b/zh-en/bleu/mean@4": 20.0,
                "val-aux/a/zh-en/bleu/mean@2": 50.0, "val-aux/a/zh-en/bleu/std@4": 99.0},
            5: {"val-aux/a/zh-en/bleu/mean@4": 14.0, "val-aux/b/zh-en/bleu/mean@4": 22.0,
                "val-aux/b/zh-en/bleu/mean@1": 0.0}}
    rise = learning.val_rise(rows, "bleu", 2.0)
    assert (rise.before, rise.after, rise.ok) == (15.0, 18.0, True)


@pytest.mark.parametrize("overrides, says", [
    (["learn.window=11"], "learn.window=11 needs 2 x window <= trainer.total_training_steps (20)"),
    (["trainer.val_before_train=false"], "keep trainer.val_before_train=true"),
    (["trainer.test_freq=50"], "trainer.test_freq between 1 and trainer.total_training_steps"),
])
def test_a_learn_tiny_config_whose_verdict_could_not_be_read_is_refused_before_anything_is_written(
        isolated_paths, overrides, says):
    out, paths = isolated_paths
    result = launch(["experiment=learn_tiny", "accelerator=cpu", "dry_run=true", *paths, *overrides])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.stderr
    assert files_under(out) == []
