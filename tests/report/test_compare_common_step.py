"""Issue 51 (finding 9): the comparison's "final" mixed steps. Seed 1 at step 10 averaged with a failed
seed 2 at step 6 gave a "final" that no plot shows. Now final and best are compared at the last step all
of a configuration's seeds reached, the table says which step, the failed seed is marked, and compare.md
keeps to the columns compared first (the rest in compare.html / compare.json).

A real local dry-run sweep (tests/report/sweep_builder.py) whose runs get metrics in verl's file-logger
format: grpo's seeds train 10 steps, dapo seed 1 trains 10 and dapo seed 2 fails after 6."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from src.report.cli import main
from src.report.compare import compare, metrics_of
from src.report.compare_plots import plot_metric
from src.report.run_files import load_run
from src.report.sweep_dirs import find_runs

from . import sweep_builder as sb

STEPS = {("grpo", 1): 10, ("grpo", 2): 10, ("dapo", 1): 10, ("dapo", 2): 6}
SCORE = "critic/score/mean"
VAL = "val-core/wmt_zh_en/zh-en/reward/mean@1"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    sweep = sb.trained_sweep(tmp_path_factory.mktemp("common_step"), STEPS, ("dapo", 2), "RunError: exited with code 1")
    assert main([str(sweep)]) == 0
    return sweep


def _config(sweep: Path, algo: str) -> dict:
    compared = json.loads((sweep / "compare" / "compare.json").read_text(encoding="utf-8"))
    return next(c for c in compared["configurations"] if c["params"]["algo"] == algo)


def test_final_and_best_are_at_the_step_every_seed_reached(sweep):
    dapo = _config(sweep, "dapo")["metrics"][SCORE]
    at6 = [sb.train_score("dapo", s, 6) for s in (1, 2)]
    assert dapo["step"] == 6
    assert dapo["final"]["mean"] == pytest.approx(sum(at6) / 2, abs=1e-6)
    assert (dapo["final"]["min"], dapo["final"]["max"]) == pytest.approx((min(at6), max(at6)), abs=1e-6)
    # the reward rises every step: the best up to step 6 is step 6's, not seed 1's step 10
    assert dapo["best"]["max"] == pytest.approx(sb.train_score("dapo", 2, 6), abs=1e-6)
    # what the old "final" was: seed 1 at step 10 with seed 2 at step 6; kept apart as each run's last value
    assert dapo["last"]["mean"] == pytest.approx((sb.train_score("dapo", 1, 10) + at6[1]) / 2, abs=1e-6)
    assert dapo["last_step"] == {"min": 6, "max": 10}
    # validation every 2 steps: both seeds validated at step 6
    val = _config(sweep, "dapo")["metrics"][VAL]
    assert val["step"] == 6
    assert val["final"]["mean"] == pytest.approx(sum(sb.val_reward("dapo", s, 6, 0) for s in (1, 2)) / 2, abs=1e-6)
    grpo = _config(sweep, "grpo")["metrics"][SCORE]
    assert grpo["step"] == 10 and grpo["runs"] == 2


def test_the_final_is_what_the_plot_shows_at_that_step(sweep):
    entries = find_runs([sweep])
    loaded = {e.run_dir: load_run(e.run_dir) for e in entries}
    comparison = compare(entries, loaded, {})
    metric = next(m for m in metrics_of(list(loaded.values()))[0] if m.name == SCORE)
    (dapo,) = [c for c in comparison.configurations if c.params["algo"] == "dapo"]
    line = next(l for l in plot_metric(comparison, metric).axes[0].get_lines() if l.get_label().startswith("algo=dapo"))
    plotted = dict(zip(line.get_xdata(), line.get_ydata()))
    result = dapo.metrics[SCORE]
    assert plotted[result.step] == pytest.approx(result.final.mean, abs=1e-9)


def test_the_markdown_says_the_step_marks_the_failed_seed_and_keeps_to_the_first_columns(sweep):
    md = (sweep / "compare" / "compare.md").read_text(encoding="utf-8")
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header[:4] == ["algo", "seeds", "runs", "step"]
    # the trained reward and the validation rewards; length, entropy, KL, time, QE metrics are elsewhere
    assert header[4:] == ["reward final", "reward best", "val reward en-zh final", "val reward en-zh best",
                          "val reward zh-en final", "val reward zh-en best"]
    dapo = [c.strip() for c in rows[1].strip("|").split("|")]
    assert dapo[:4] == ["dapo", "2 (1, 2 failed)", "1 done, 1 failed", "6 (reached 6-10)"]
    assert "@" not in " ".join(dapo[4:])  # every value is at step 6
    assert "are in compare.html and compare.json" in md and "entropy" in md.split("are in compare.html")[0]
    page = (sweep / "compare" / "compare.html").read_text(encoding="utf-8")
    assert "entropy final" in page and "6 (reached 6-10)" in page and "2 (1, 2 failed)" in page
