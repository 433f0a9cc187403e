"""benches/against_verl.py compares like with like: its plain reward gives the project's score wherever the
project adds nothing (a well-formed answer no check flags, a malformed one), and each variant's verl config
is the project run's own but for the parts the variant names."""
from __future__ import annotations

import asyncio
import copy
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from src import verl_config
from src.config import compose_config
from src.plan import build_plan
from src.rewards.compute import compute_score
from src.rewards.degenerate import FLAGS as DEGENERATE_FLAGS
from src.rewards.guards import NAMES as GUARD_NAMES
from tests.helpers.reward_config import extra_info

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benches"))

import against_verl  # noqa: E402
import plain_reward  # noqa: E402

LEARN_TINY = ["experiment=learn_tiny", "accelerator=cpu"]


@pytest.fixture(scope="module")
def learn_tiny_verl(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("against-verl")
    cfg = compose_config([*LEARN_TINY, f"paths.output_dir={tmp}/out", f"paths.results_root={tmp}/results"])
    plan = build_plan(cfg, run_dir=str(tmp / "out" / "run"))
    return OmegaConf.to_container(verl_config.build(plan, cfg), resolve=True)


@pytest.mark.parametrize("response", [
    "<translate>One white fish jump.</translate>",          # the reference
    "<translate>One white fish swims.</translate>",         # part of it
    "<translate>Two red birds sing today.</translate>",     # none of it
    "One white fish jump.",                                 # no tags: the format's floor
    "<translate>One white fish jump.",                      # an unclosed tag
])
def test_the_plain_reward_scores_as_the_projects_where_the_project_adds_nothing(learn_tiny_verl, response):
    kw = learn_tiny_verl["reward"]["custom_reward_function"]["reward_kwargs"]
    info = extra_info("一白鱼跳。", template="rl")
    ours = asyncio.run(compute_score("synth_zh_en/zh-en", response, "One white fish jump.", info, **kw))
    # nothing the project adds fired: no degenerate flag (empty, copy, script, length), no guard
    # (the run's guards: a guard in every run, and one only in the runs that switch it on, term_stuffing, when on)
    flags = [*DEGENERATE_FLAGS, *(f"guard_{n}" for n in GUARD_NAMES if n in kw["guards"])]
    assert "guard_term_stuffing" not in ours and len(flags) == len(DEGENERATE_FLAGS) + 4
    assert set(flags) <= set(ours) and not any(ours[f] for f in flags), {f: ours.get(f) for f in flags}
    plain = plain_reward.compute_score("synth_zh_en/zh-en", response, "One white fish jump.", info,
                                       bonus=kw["format"]["bonus"], floor=kw["format"]["floor"],
                                       answer_floor=kw["format"]["answer_floor"], bleu_weight=kw["train_weights"]["bleu"])
    assert plain == pytest.approx(ours["score"], abs=1e-9)


def _diff(a, b, path=()) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _diff(a.get(k), b.get(k), path + (k,))]
    return [".".join(map(str, path))] if a != b else []


@pytest.mark.parametrize("variant,changed", [
    # the function's name stays compute_score: only its file and kwargs change
    ("plain", {"reward.custom_reward_function.path", "reward.custom_reward_function.reward_kwargs", "sampler"}),
    ("+reward", {"sampler"}),
    ("+guard", set()),
])
def test_each_variant_is_the_projects_verl_config_but_for_what_it_names(learn_tiny_verl, tmp_path, variant, changed):
    run_dir = tmp_path / "run"
    (run_dir / "snapshot").mkdir(parents=True)
    (run_dir / "snapshot" / "verl_config.yaml").write_text(yaml.safe_dump(learn_tiny_verl))
    cfg = against_verl.variant_config(run_dir, variant, tmp_path / "out")
    diffs = _diff(copy.deepcopy(learn_tiny_verl), cfg)
    # where the run writes is the bench's own; the rest is named by the variant
    named = {d for d in diffs if d not in ("trainer.default_local_dir", "trainer.logger")}
    kwargs = "reward.custom_reward_function.reward_kwargs"
    assert {("sampler" if ".sampler." in d else kwargs if d.startswith(kwargs) else d) for d in named} == changed, diffs
    if variant == "plain":
        assert cfg["reward"]["custom_reward_function"]["path"] == str(REPO / "benches" / "plain_reward.py")
