"""The term reward trains, in real steps (issue 46, item 5): `python -m src.launch experiment=learn_terms_tiny
accelerator=cpu`, verl's own trainer with vLLM's CPU build, on the synthetic task's terminology variant
(src/tiny_models/task.py write_terms): every prompt requires 蓝 -> "green" where the references, and so BLEU and
most of what the policy was taught, say "blue".

Each run validates on the 48 held-out sentences (4 answers each at temperature 1) before training and after its
last step; verl dumps every answer (`<checkpoint dir>/val_generations/<step>.jsonl`). The measure: of the answers
that keep the format, the share that writes the required term (src/data/terms.py, as the evaluation matches it).

1. With the term reward weighted (the experiment's reward.weights.term=1), the share rises by more than MIN_RISE,
   and the answers keep the format; the stuffing guard is part of the run.
2. The control, the same run with reward.weights.term=0 (the term logged, nothing trained on it, no guard): the
   share rises by less than the learning run's, by more than MARGIN (BLEU pulls it towards "blue").
Both runs train one build of the variant's taught policy, beside learn_tiny's in the session's build dir.
benches/RESULTS.md "The term reward trains" has the runs the margins come from.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from src.data import terms
from src.tiny_models import task
from tests.helpers.launches import checkpoint_dir

# an outer limit against a hang (docs/cpu-loop.md "Hazards"), not a time budget
TIMEOUT_S = 1500
STEPS = 10  # conf/experiment/learn_terms_tiny.yaml: validations before step 1 and after this one
MIN_RISE = 0.4
MARGIN = 0.3
TERM = terms.Term(task.TERM["src"], task.TERM["tgt"])


@dataclass(frozen=True)
class Validation:
    answers: int
    kept_format: int
    with_term: int

    @property
    def share(self) -> float:
        return self.with_term / self.kept_format


def _validations(run) -> dict[int, Validation]:
    (run_dir,) = run.run_dirs
    out = {}
    for path in sorted((checkpoint_dir(run_dir) / "val_generations").glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        kept = [r for r in rows if r["format_ok"] == 1.0]
        found = [r for r in kept if terms.hits([TERM], r["src"], r["translation"]) == (1, 1)]
        out[int(path.stem)] = Validation(len(rows), len(kept), len(found))
    return out


def test_the_term_reward_raises_held_out_term_success_and_the_unweighted_control_does_not(cpu_loop, taught_build):
    runs = {}
    for name, extra in (("weighted", []), ("control", ["reward.weights.term=0"])):
        run = cpu_loop(["experiment=learn_terms_tiny", f"model.build_dir={taught_build}", *extra],
                       timeout_s=TIMEOUT_S, out_name=f"terms-{name}")
        print(f"learn_terms_tiny, {name}: {run.seconds:.0f} s")
        assert run.returncode == 0, run.output[-6000:]
        runs[name] = run
    learned, control = (_validations(runs[name]) for name in ("weighted", "control"))
    print(f"held-out term success of the answers that keep the format, by step: "
          f"weighted {({s: round(v.share, 2) for s, v in learned.items()})}, "
          f"control {({s: round(v.share, 2) for s, v in control.items()})}")
    assert sorted(learned) == sorted(control) == [0, STEPS], (learned, control)
    for v in (*learned.values(), *control.values()):
        assert v.answers == 48 * 4 and v.kept_format >= 0.8 * v.answers, v  # the term not bought with the format
    assert learned[0].share < 0.5, learned  # the taught policy says the corpus's word
    rise = learned[STEPS].share - learned[0].share
    control_rise = control[STEPS].share - control[0].share
    assert rise > MIN_RISE, learned
    assert control_rise < rise - MARGIN, (learned, control)

    # the stuffing guard is part of the run that trains on the term, and only of it: read on the answers that keep
    # the format (a broken one gets the format's floor and no guard runs on it; the CI of 3e8c315 drew one first)
    for name, guarded in (("weighted", True), ("control", False)):
        (run_dir,) = runs[name].run_dirs
        rows = [json.loads(line) for line in (checkpoint_dir(run_dir) / "val_generations" / "0.jsonl").read_text(
            encoding="utf-8").splitlines() if line.strip()]
        kept = [r for r in rows if r["format_ok"] == 1.0]
        assert kept and all(r["term"] is not None for r in kept), (name, kept[:2])
        assert all((r.get("guard_term_stuffing") is not None) == guarded for r in kept), (name, kept[:2])
