"""run= (issue 49, item 1): the checkpoints of run dirs, sweep dirs or checkpoint dirs, picked by steps=, each
evaluated as checkpoint= is, one results table over them and each metric plotted against the step.

The runs here are laid out as the launcher and verl write them: a sweep dir of run dirs whose snapshot's plan.json
names each checkpoint dir, verl's global_step_N/actor with its huggingface/ dir (the tiny policy the CPU loop trains,
so nothing is merged), latest_checkpointed_iteration.txt and the file logger's metrics with validation rows. The
generation is real (vLLM's CPU build in the loop env, accelerator=cpu).
"""
from __future__ import annotations

import json
import shutil

import pytest
import yaml

from src.evaluate import runs
from src.evaluate.cli import default_out, main
from src.evaluate.options import UsageError
from src.tiny_models.policy import ensure_built

VAL = "val-aux/tiny/score/mean@4"


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs-policy") / "policy"
    ensure_built(out)
    return out


def _checkpoint_dir(root, policy, steps: list[int], val: dict[int, float] | None = None):
    """verl's checkpoint dir with the tiny policy saved at `steps`, the tracker at the last, validation rows."""
    root.mkdir(parents=True)
    for step in steps:
        actor = root / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
        shutil.copytree(policy, actor / "huggingface")
    (root / "latest_checkpointed_iteration.txt").write_text(str(steps[-1]))
    if val:
        (root / "metrics").mkdir()
        (root / "metrics" / "run.jsonl").write_text("".join(
            json.dumps({"step": s, "data": {VAL: v, "critic/score/mean": 0.0}}) + "\n" for s, v in val.items()))
    return root


def _run_dir(root, ckpt, weights: dict | None = None):
    """A run dir as the launcher writes it: its snapshot's plan names the checkpoint dir, its verl config the reward's
    component weights (the reward kwargs src/rewards/group_kwargs.py writes)."""
    (root / "snapshot").mkdir(parents=True)
    (root / "snapshot" / "plan.json").write_text(json.dumps({"checkpoint_dir": str(ckpt)}))
    if weights is not None:
        verl = {"reward": {"custom_reward_function": {"reward_kwargs": {"train_weights": weights}}}}
        (root / "snapshot" / "verl_config.yaml").write_text(yaml.safe_dump(verl))
    return root


@pytest.fixture
def sweep(tmp_path, policy):
    """A sweep of two runs: a saved steps 2 and 4 (its validation reward best at 2), b step 4 only (no metrics)."""
    a = _checkpoint_dir(tmp_path / "results" / "a", policy, [2, 4], val={0: 0.1, 2: 0.5, 4: 0.2})
    b = _checkpoint_dir(tmp_path / "results" / "b", policy, [4])
    # a trained on BLEU and the span model's MQM (so on xcomet), not on kiwi
    _run_dir(tmp_path / "sweep" / "0_a", a, weights={"bleu": 1.0, "kiwi": 0.0, "mqm": 0.5})
    _run_dir(tmp_path / "sweep" / "1_b", b)
    (tmp_path / "sweep" / "summary.json").write_text("{}")
    return tmp_path / "sweep", a, b


def _picked(found):
    return [(c.run, c.step) for c in found]


def test_steps_pick_each_runs_checkpoints(sweep):
    folder, a, b = sweep
    assert _picked(runs.find([str(folder)], "all")) == [("0_a", 2), ("0_a", 4), ("1_b", 4)]
    assert _picked(runs.find([str(folder)], "last")) == [("0_a", 4), ("1_b", 4)]
    # a step past verl's tracker is a save cut short: not a checkpoint
    (a / "global_step_6" / "actor").mkdir(parents=True)
    assert _picked(runs.find([str(a)], "all")) == [("a", 2), ("a", 4)]
    assert _picked(runs.find([str(folder / "0_a")], "best")) == [("0_a", 2)]
    assert runs.find([str(a)], "4")[0].path == a / "global_step_4"   # a checkpoint dir itself
    # what each run trained on, from its snapshot (a checkpoint dir, or a run dir without a verl config: unknown)
    assert [c.trained_on for c in runs.find([str(folder)], "last")] == [("bleu", "xcomet"), None]
    assert runs.find([str(a)], "4")[0].trained_on is None
    with pytest.raises(UsageError, match="1_b validated at none of its saved steps \\[4\\]; name the steps"):
        runs.find([str(folder)], "best")
    with pytest.raises(UsageError, match="1_b saved no step 2 \\(it saved \\[4\\]\\)"):
        runs.find([str(folder)], "2,4")
    with pytest.raises(UsageError, match="name one run twice"):
        runs.find([str(folder), str(folder / "0_a")], "all")
    with pytest.raises(UsageError, match="is neither a run dir"):
        runs.find([str(folder.parent / "results")], "all")
    # without out=, the evaluation of one run or sweep dir goes into its eval/ (python -m src.report shows it)
    assert runs.home([str(folder)]) == folder and runs.home([str(folder / "0_a")]) == folder / "0_a"
    assert runs.home([str(a)]) is None and runs.home([str(folder / "0_a"), str(folder / "1_b")]) is None
    assert default_out("test", folder).parent == folder / "eval" and default_out("test", folder).name.endswith("_test")


def test_the_seeds_of_one_configuration_are_averaged_in_the_results(tmp_path):
    """Runs that differ only in their seed are one configuration (src/record/run_params.py, as the sweep's comparison
    groups them): the results give each metric's mean and sample standard deviation over its seeds at a step."""
    from src.evaluate import run_results

    folder = tmp_path / "sweep"
    for n, (algo, seed) in enumerate((("grpo", 1), ("grpo", 2), ("dapo", 1))):
        ckpt = tmp_path / "results" / f"{algo}{seed}"
        (ckpt / "global_step_6" / "actor").mkdir(parents=True)
        (ckpt / "latest_checkpointed_iteration.txt").write_text("6")
        run = _run_dir(folder / f"{n}_{algo}_seed{seed}", ckpt)
        (run / "snapshot" / "overrides.yaml").write_text(yaml.safe_dump([f"algo={algo}", f"seed={seed}"]))
    found = runs.find([str(folder)], "last")
    assert [(c.run, c.configuration) for c in found] == [
        ("0_grpo_seed1", "algo=grpo"), ("1_grpo_seed2", "algo=grpo"), ("2_dapo_seed1", "algo=dapo")]

    out = tmp_path / "eval"
    evaluated = []
    for c, bleu in zip(found, (31.0, 33.0, 29.0)):
        (out / c.run / "step_6").mkdir(parents=True)
        rows = [{"direction": "zh-en", "segments": 48, "format_ok": 75.0, "bleu": bleu, "chrf": 52.5}]
        evaluated.append((c.run, c.step, out / c.run / "step_6", rows, {}))
    run_results.write(out, evaluated, None, {c.run: c.configuration for c in found})
    (grpo,) = json.loads((out / "results.json").read_text())["over_seeds"]  # dapo has one seed: no spread to give
    assert (grpo["configuration"], grpo["step"], grpo["direction"], grpo["seeds"]) == ("algo=grpo", 6, "zh-en", 2)
    assert grpo["bleu"] == {"mean": pytest.approx(32.0), "std": pytest.approx(2 ** 0.5)}
    assert grpo["chrf"] == {"mean": pytest.approx(52.5), "std": 0.0}
    md = (out / "results.md").read_text()
    (line,) = [l for l in md.splitlines() if l.startswith("| algo=grpo | 6 | zh-en | 2 |")]
    assert "32.00 ± 1.41" in line and md.index("Over seeds") < md.index("Every row:")
    # the paper's table names each run's configuration
    assert "| 1_grpo_seed2 | 6 | algo=grpo | " in md and "| 2_dapo_seed1 | 6 | algo=dapo | " in md
    by_step = json.loads((out / "results.json").read_text())["by_step"]
    assert [(e["run"], e["configuration"]) for e in by_step] == [(c.run, c.configuration) for c in found]
    assert "<td>algo=grpo</td><td class=n>6</td><td>zh-en</td><td class=n>2</td>" in (out / "results.html").read_text()
    # the plots: a line per configuration, its seeds' mean and band at each step (a step 2 added to each run)
    early = [dict(r, step=2, bleu=r["bleu"] - 10, versus_key="") for r in run_results.combined(evaluated)[0]]
    assert run_results.curves(run_results.combined(evaluated)[0] + early, "bleu",
                              {c.run: c.configuration for c in found}) == {
        ("algo=dapo", "zh-en"): [(2, 19.0, 19.0, 19.0, 1), (6, 29.0, 29.0, 29.0, 1)],
        ("algo=grpo", "zh-en"): [(2, 22.0, 21.0, 23.0, 2), (6, 32.0, 31.0, 33.0, 2)]}


@pytest.mark.parametrize("args, says", [
    (["steps=last"], "steps=last picks the checkpoints of run=, which is not given"),
    (["run=x", "steps=lastest"], "steps='lastest'; give all, last, best or step numbers"),
    (["run=x", "checkpoint=y"], "give run= or checkpoint="),
])
def test_bad_run_options_are_one_line(testset, args, says, capsys):
    data, _ = testset
    assert main([f"data={data}", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_a_run_is_evaluated_at_every_step_into_one_table_and_plots(sweep, testset, policy, tmp_path, capsys):
    """One command: every saved step of a run against the model it started from (baseline= a model dir, evaluated
    once, first, into <out>/baseline/)."""
    folder, a, _ = sweep
    data, _ = testset
    out = tmp_path / "eval"
    out.mkdir()
    common = [f"run={folder / '0_a'}", f"data={data}", "accelerator=cpu", "metrics=bleu,chrf", "max_new_tokens=8",
              f"baseline={policy}"]
    assert main([*common, f"out={out}"]) == 2   # an existing out is refused before anything runs
    assert "already exists" in capsys.readouterr().err
    out.rmdir()
    assert main([*common, f"out={out}"]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "run=: 2 checkpoint(s) to evaluate: 0_a step 2, 0_a step 4" in err, err
    assert err.count(f"baseline: evaluating {policy} first") == 1, err
    base = json.loads((out / "baseline" / "summary.json").read_text())
    assert base["model_dir"] == str(policy) and base["generator"] == "vllm" and "baseline" not in base
    compared = json.loads((out / "0_a" / "step_4" / "summary.json").read_text())["baseline"]
    assert compared["dir"] == str(policy) and compared["evaluation"] == "baseline"
    # each step's checkpoint holds the policy's own weights: greedy, the same answers, no difference at all
    for metric in ("bleu", "chrf", "format_ok"):
        assert compared["rows"]["zh-en"][metric]["delta"] == 0 and not compared["rows"]["zh-en"][metric]["significant"]
    for step in (2, 4):
        summary = json.loads((out / "0_a" / f"step_{step}" / "summary.json").read_text())
        assert summary["checkpoint"] == str(a / f"global_step_{step}")
    results = json.loads((out / "results.json").read_text())
    assert [(e["run"], e["step"], e["dir"]) for e in results["evaluations"]] == [
        ("0_a", 2, "0_a/step_2"), ("0_a", 4, "0_a/step_4")]
    assert {r["direction"] for e in results["evaluations"] for r in e["rows"]} == {"zh-en", "en-zh"}
    assert set(results["evaluations"][0]["baseline"]["zh-en"]) == {"bleu", "chrf", "format_ok"}
    md = (out / "results.md").read_text().splitlines()
    # the paper's table first: a row per step, a column group per direction (its layout: the test below)
    assert md[0] == "By run and step:" and [line.split(" | ")[:2] for line in md[4:6]] == [["| 0_a", "2"], ["| 0_a", "4"]]
    table = md[md.index("Every row:") + 2:]
    assert table[0].startswith("| run | step | direction | segments |") and "| ΔBLEU | ΔchrF |" in table[0]
    # the run trained on BLEU (and xcomet, not computed here): marked without trained_on=
    assert "| BLEU (trained) | chrF (held out) |" in table[0], table[0]
    assert json.loads((out / "0_a" / "step_2" / "summary.json").read_text())["trained_on"] == ["bleu"]
    assert len([line for line in table if line.startswith("| 0_a |")]) == 4   # 2 steps x 2 directions
    # a row's delta is its own evaluation's: the same checkpoint twice, the same numbers
    rows = [line for line in table if line.startswith("| 0_a | 2 | zh-en")] + \
        [line for line in table if line.startswith("| 0_a | 4 | zh-en")]
    assert rows[0].split("|")[4:] == rows[1].split("|")[4:], rows
    assert (out / "bleu_by_step.png").stat().st_size > 0 and (out / "format_ok_by_step.png").is_file()
    page = (out / "results.html").read_text()
    assert page.count("<tr>") == 2 + 2 + 1 + 4 and "<th class=n>ΔBLEU</th>" in page and '<img src="bleu_by_step.png"' in page
    assert "<th colspan=" in page
    assert not list(tmp_path.glob(".eval.*"))   # the temp dir it was built in is gone


def test_the_papers_table_has_a_row_per_run_and_step_and_a_column_group_per_direction(tmp_path):
    """results.md/html/json as run_results writes them from evaluations (no generation): a row per (run, step), a
    group per direction, each cell the value with its Δ to the baseline, `*` where significant."""
    from src.evaluate import run_results

    def summary(bleu_delta: float, significant: bool) -> dict:
        comparison = {"bleu": {"delta": bleu_delta, "p_value": 0.01 if significant else 0.4,
                               "significant": significant}}
        return {"baseline": {"dir": "/models/base", "metrics": ["bleu"], "resamples": 1000, "seed": 12345,
                             "alpha": 0.05, "rows": {"zh-en": comparison, "en-zh": comparison}}}

    def rows(bleu: float) -> list[dict]:
        return [{"direction": "zh-en", "segments": 48, "bleu": bleu, "chrf": 50.0},
                {"direction": "en-zh", "segments": 48, "bleu": bleu + 10, "chrf": 40.0}]
    evaluations = [("<b>a</b>", step, tmp_path / "<b>a</b>" / f"step_{step}", rows(20.0 + step), summary(step, step > 2))
                   for step in (2, 4)] + [("b", 4, tmp_path / "b" / "step_4", rows(30.0), summary(-1.0, False))]
    run_results.write(tmp_path, evaluations, trained_on=["bleu"])

    md = (tmp_path / "results.md").read_text(encoding="utf-8").splitlines()
    assert md[0] == "By run and step:"
    assert md[2] == ("| run | step | zh-en BLEU (trained) | zh-en chrF (held out) | en-zh BLEU (trained) | "
                     "en-zh chrF (held out) |")
    assert md[4:7] == ["| <b>a</b> | 2 | 22.00 (+2.00) | 50.00 | 32.00 (+2.00) | 40.00 |",
                       "| <b>a</b> | 4 | 24.00 (+4.00*) | 50.00 | 34.00 (+4.00*) | 40.00 |",
                       "| b | 4 | 30.00 (-1.00) | 50.00 | 40.00 (-1.00) | 40.00 |"]
    assert "In parentheses: Δ to the baseline." in md[8]
    every = md.index("Every row:")
    assert md[every + 2].startswith("| run | step | direction | segments |") and len(
        [line for line in md[every:] if line.startswith(("| <b>a</b> |", "| b |"))]) == 6
    by_step = json.loads((tmp_path / "results.json").read_text())["by_step"]
    assert [(e["run"], e["step"]) for e in by_step] == [("<b>a</b>", 2), ("<b>a</b>", 4), ("b", 4)]
    assert by_step[1]["results"]["zh-en"]["bleu"] == {"value": 24.0, "delta": 4, "p_value": 0.01, "significant": True}
    assert by_step[1]["results"]["en-zh"]["chrf"] == {"value": 40.0}
    page = (tmp_path / "results.html").read_text(encoding="utf-8")
    assert "<th colspan=2>zh-en</th><th colspan=2>en-zh</th>" in page
    assert "<td>&lt;b&gt;a&lt;/b&gt;</td><td class=n>4</td><td class=n>24.00 (+4.00*)</td>" in page
    assert "<b>a</b>" not in page
