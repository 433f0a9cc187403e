"""`python -m src.launch experiment=learn_tiny accelerator=cpu`: the loop learns, and a control that must not learn
does not.

The learning run: the tiny policy taught the synthetic task in part (src/tiny_models/teach.py), then GRPO
through the project's launcher, trainer and reward on verl's V1 trainer with vLLM's CPU build; the launcher's
verdict (src/pipeline/learning.py) reads verl's metrics file and passes when the trained reward and the same
reward on held-out sentences both rise by more than their margins (set above the spread across seeds,
benches/learn.py). The control is the same run with the advantage's sign flipped by a test-only estimator
registered in verl's registry (flipped_estimator.py): every part still runs, each update pushes away from
what the reward prefers, and the same verdict must say FAIL. Both share one build of the taught policy.

Then each run's last checkpoint is evaluated as a researcher would (`python -m src.evaluate`, issue 49, item 8):
against the policy it started from (the taught, untrained one) on the 48 held-out sentences, generated the way the
run validates (4 answers a sentence at temperature 1) with vLLM's CPU build, the paired bootstrap says whether it
gained on what it trained (the format, BLEU): the learning run does, significantly; the control does not. The
learning run's greedy BLEU/chrF are printed beside, whatever they show (greedy answers hide what GRPO changes
first: benches/RESULTS.md); one evaluation, the merged checkpoint reused, no baseline of its own.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import sacrebleu
import yaml

from src.config import compose_config
from src.evaluate.cli import main as evaluate
from src.pipeline import learning
from src.record.verl_metrics import read_metrics
from tests.helpers.launches import checkpoint_dir, metrics_files

from .flipped_estimator import NAME as FLIPPED

# an outer limit against a hang (docs/cpu-loop.md "Hazards"), not a time budget: a run took 714 s with the suite beside it
TIMEOUT_S = 1500
# conf/experiment/learn_tiny.yaml: the reward's score on the held-out prompts, 4 samples each
VAL_KEY = "val-aux/synth_zh_en/zh-en/score/mean@4"


def _verdict(output: str) -> dict[str, str]:
    lines = output[output.index("=== qe-rl learn verdict"):].splitlines()
    return {"head": lines[0], **{l.split()[0]: l for l in lines[1:] if l.split()}}


def _metrics(run_dir: Path) -> dict[int, dict]:
    (path,) = metrics_files(run_dir)
    return read_metrics(path)


# what the run trained: the share of well-formed answers and BLEU (format + sentence BLEU is its reward)
TRAINED = ("format_ok", "bleu")
# as learn_tiny validates (conf/experiment/learn_tiny.yaml val_kwargs: 4 samples at temperature 1)
SAMPLED = ("samples=4", "temperature=1.0")


class Evaluations:
    """`python -m src.evaluate` on learn_tiny's held-out sentences, as the run's config has them (its data group's
    val_files, response length and chat template) and as it validates (SAMPLED), with vLLM's CPU build; the
    untrained taught policy's evaluation made once, as every checkpoint's baseline."""

    def __init__(self, build: Path, root: Path):
        composed = compose_config(["experiment=learn_tiny", "accelerator=cpu", f"model.build_dir={build}"])
        self.root, self.base_model = root, composed["model"]["path"]
        self.common = [f"data={composed['data']['val_files']}", "accelerator=cpu", "metrics=bleu,chrf",
                       f"max_new_tokens={composed['data']['max_response_length']}",
                       f"chat_template={str(composed['model']['use_chat_template']).lower()}"]
        self._base: Path | None = None

    def base(self) -> Path:
        if self._base is None:
            self._base = self.run(self.base_model, "base-sampled", *SAMPLED)
        return self._base

    def run(self, checkpoint, name: str, *extra: str) -> Path:
        out = self.root / name
        assert evaluate([f"checkpoint={checkpoint}", *self.common, *extra, f"out={out}"]) == 0, name
        return out

    def versus_base(self, checkpoint, name: str) -> dict:
        """The comparison with the base of the held-out row (zh-en), metric -> summary.json's comparison."""
        out = self.run(checkpoint, name, *SAMPLED, f"baseline={self.base()}")
        return json.loads((out / "summary.json").read_text())["baseline"]["rows"]["zh-en"]

    def greedy(self, checkpoint, name: str) -> dict:
        """Greedy answers (the evaluation's default temperature 0), one a sentence: the held-out row's metrics."""
        out = self.run(checkpoint, name)
        (row,) = json.loads((out / "summary.json").read_text())["directions"]
        return row


def _segments(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "segments.jsonl").read_text().splitlines()]


def _shown(found: dict) -> str:
    return ", ".join(f"{m} {r['baseline']:.1f} -> {r['system']:.1f} ({r['delta']:+.2f}, p={r['p_value']:.3f})"
                     for m, r in found.items())


@pytest.fixture(scope="module")
def evaluations(taught_build, tmp_path_factory) -> Evaluations:
    return Evaluations(taught_build, tmp_path_factory.mktemp("learn-eval"))


def test_learn_tiny_learns_on_the_cpu_and_its_report_shows_the_curve(cpu_loop, taught_build, evaluations):
    run = cpu_loop(["experiment=learn_tiny", f"model.build_dir={taught_build}"], timeout_s=TIMEOUT_S)
    print(f"learn_tiny on the CPU loop (builds + 20 steps + 5 validations): {run.seconds:.0f} s")
    out = run.output
    assert run.returncode == 0, out[-6000:]
    for part in ("tiny policy", "task", "prompts", "taught policy"):
        # built by this launch, or by the launch of the loop's tests before it (tests/loop/conftest.py taught_build)
        assert f"learn_tiny: {part} built in" in out or f"learn_tiny: {part} reused in" in out, out[-3000:]
    assert "tiny QE checkpoints" not in out  # no QE model in this reward: nothing built for one
    verdict = _verdict(out)
    assert verdict["head"] == "=== qe-rl learn verdict: PASS ===", "\n".join(verdict.values())
    assert verdict["trained"].split()[1] == "PASS" and verdict["held-out"].split()[1] == "PASS", verdict

    (run_dir,) = run.run_dirs
    metrics = _metrics(run_dir)
    steps = sorted(s for s, row in metrics.items() if learning.TRAINED_METRIC in row)
    assert steps == list(range(1, 21))
    # the rises recomputed here from verl's rows, independently of the verdict's code
    scores = [metrics[s][learning.TRAINED_METRIC] for s in steps]
    rise = sum(scores[-5:]) / 5 - sum(scores[:5]) / 5
    held = {s: row[VAL_KEY] for s, row in metrics.items() if VAL_KEY in row}
    assert sorted(held) == [0, 5, 10, 15, 20]
    learn = yaml.safe_load((run_dir / "snapshot" / "composed.yaml").read_text())["learn"]
    assert rise >= learn["min_rise"] and held[20] - held[0] >= learn["min_val_rise"], (scores, held)
    for row in (metrics[s] for s in steps):
        # vLLM sampled from the weights FSDP trains: the sync after every update reached it
        assert row["training/rollout_actor_probs_pearson_corr"] > 0.99, row
    assert (run_dir / learning.VERDICT_FILE).read_text().startswith("=== qe-rl learn verdict: PASS")

    from src.report.cli import build_report

    report = build_report(run_dir)
    summary = report.files["summary"].read_text()
    assert "Training steps logged: 20" in summary, summary
    # the curve: the trained reward over the 20 steps and the held-out one over the 5 validations
    (train,) = [l for l in summary.splitlines() if l.startswith("| reward | train |")]
    (held,) = [l for l in summary.splitlines() if l.startswith("| reward | val zh-en |")]
    assert train.split("|")[-2].strip() == "20" and held.split("|")[-2].strip() == "5", (train, held)
    assert report.files["rewards"].stat().st_size > 0

    # its last checkpoint against the policy it started from, on the held-out sentences, sampled as validated
    last = checkpoint_dir(run_dir)  # the evaluation takes the step latest_checkpointed_iteration.txt names
    found = evaluations.versus_base(last, "learned-sampled")
    print(f"learn_tiny step 20 against the taught policy, sampled: {_shown(found)}")
    gains = [m for m in TRAINED if found[m]["significant"] and found[m]["delta"] > 0]
    assert gains, found
    # the BLEU delta, recomputed with sacrebleu itself from both evaluations' answers
    ours, theirs = _segments(evaluations.root / "learned-sampled"), _segments(evaluations.base())
    assert len(ours) == len(theirs) == 48 * 4
    bleu = [sacrebleu.corpus_bleu([s["translation"] for s in segs], [[s["ref"] for s in segs]]).score
            for segs in (ours, theirs)]
    assert found["bleu"]["delta"] == pytest.approx(bleu[0] - bleu[1], abs=1e-6), (found["bleu"], bleu)
    greedy = evaluations.greedy(last, "learned-greedy")
    print(f"learn_tiny step 20, greedy: BLEU {greedy['bleu']:.1f}, chrF {greedy['chrf']:.1f}, format ok "
          f"{greedy['format_ok']:.1f}% over {greedy['segments']} sentences")
    assert greedy["segments"] == 48 and 0 <= greedy["bleu"] <= 100 and 0 <= greedy["chrf"] <= 100, greedy


def test_the_same_run_with_the_advantage_sign_flipped_does_not_learn(cpu_loop, taught_build, evaluations):
    # the launcher checks the estimator against verl's registry, the trainer's processes use it: both import it
    modules = f"src.cpu_platform.register,tests.loop.flipped_estimator"
    run = cpu_loop(["experiment=learn_tiny", f"model.build_dir={taught_build}", f"algo.adv_estimator={FLIPPED}",
                    f'accelerator.env.VERL_USE_EXTERNAL_MODULES="{modules}"'],
                   timeout_s=TIMEOUT_S, env={"VERL_USE_EXTERNAL_MODULES": "tests.loop.flipped_estimator"},
                   out_name="control")
    print(f"learn_tiny control (flipped advantage): {run.seconds:.0f} s")
    out = run.output
    assert "learn_tiny: taught policy reused in" in out, out[-3000:]
    assert run.returncode == 1, out[-6000:]
    verdict = _verdict(out)
    assert verdict["head"].startswith("=== qe-rl learn verdict: FAIL"), "\n".join(verdict.values())
    assert verdict["trained"].split()[1] == "FAIL", verdict
    errors = [l for l in out.splitlines() if l.startswith("error:")]
    assert len(errors) == 1 and "the policy did not learn" in errors[0], errors

    (run_dir,) = run.run_dirs
    metrics = _metrics(run_dir)
    scores = [metrics[s][learning.TRAINED_METRIC] for s in sorted(metrics) if learning.TRAINED_METRIC in metrics[s]]
    assert len(scores) == 20  # it trained every step: the control differs in the update's direction only
    assert sum(scores[-5:]) / 5 - sum(scores[:5]) / 5 < 0.3, scores

    found = evaluations.versus_base(checkpoint_dir(run_dir), "control-sampled")
    print(f"learn_tiny control step 20 against the taught policy, sampled: {_shown(found)}")
    assert not [m for m in TRAINED if found[m]["significant"] and found[m]["delta"] > 0], found
