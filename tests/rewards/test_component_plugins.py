"""A reward component is one class and one yaml entry (issue 25): components of a user's own, in files
outside src/ (tests/fixtures/reward_plugins/), registered through `reward.plugins` with no edit of
src/, computed through verl's own reward manager built from the verl config the launcher writes, and
in a fresh process that knows nothing but that config's reward kwargs (as verl's reward workers)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import launch_server
from tests.helpers.reward_config import extra_info, kwargs_for
from tests.helpers.reward_example import MT, REF, RESPONSE, SRC, bleu, clip01, kiwi_of
from tests.helpers.verl_reward_harness import manager, run, sample, verl_config_for

__all__ = ["tokenizer"]  # the module-scoped fixture, shared

REPO = Path(__file__).resolve().parents[2]
LENGTH = "tests/fixtures/reward_plugins/length_match.py"
KIWI2 = "tests/fixtures/reward_plugins/kiwi_squared.py"


def length_match(mt=MT, ref=REF) -> float:
    return 1.0 - min(1.0, abs(len(mt) / len(ref) - 1.0))


def test_a_plugin_component_through_verls_reward_manager(tokenizer, scorer_env):
    overrides = ("reward=comet", "algo=grpo", f"reward.plugins=[{LENGTH}]", "+reward.weights.length_match=0.5")
    kw = verl_config_for(*overrides).reward.custom_reward_function.reward_kwargs
    assert list(kw["plugins"]) == [str(REPO / LENGTH)]  # absolute: one meaning on every node
    assert kw["train_weights"]["length_match"] == 0.5 and list(kw["clip"]["length_match"]) == [0.0, 1.0]
    info = extra_info(SRC)
    extra = run(manager(tokenizer, *overrides), sample(tokenizer, RESPONSE, info))["reward_extra_info"]
    assert extra["length_match"] == pytest.approx(length_match())
    kiwi = kiwi_of(scorer_env)
    assert extra["score"] == pytest.approx(1.0 + bleu() / 100 + clip01(kiwi) + 0.5 * length_match(), abs=1e-4)


def test_a_plugin_component_that_reads_a_qe_model(loop, scorer_env):
    """kiwi_squared reads CometKiwi: xcomet_xl's training reward does not weight kiwi, so the model is
    asked only because the plugin component is weighted."""
    from src.rewards.compute import compute_score

    kw = kwargs_for("xcomet_xl", f"reward.plugins=[{KIWI2}]", "+reward.weights.kiwi_squared=1")
    out = loop.run_until_complete(compute_score("wmt_zh_en/zh-en", RESPONSE, REF, extra_info(SRC), **kw))
    kiwi = kiwi_of(scorer_env)
    assert out["kiwi"] == pytest.approx(kiwi, abs=1e-4)
    assert out["kiwi_squared"] == pytest.approx(kiwi * kiwi, abs=1e-4)
    assert out["answer"] == pytest.approx(clip01(out["xcomet"]) + min(max(kiwi * kiwi, 0.0), 2.0), abs=1e-4)


def test_a_fresh_reward_worker_loads_the_plugin_from_the_kwargs_alone(scorer_env, tmp_path):
    """A process that never saw the launcher's config: only verl's reward kwargs (as a JSON file), the
    scorer's URL and token in the environment, as verl's reward-loop worker gets them."""
    kw = kwargs_for("comet", f"reward.plugins=[{LENGTH}]", "+reward.weights.length_match=1")
    (tmp_path / "kw.json").write_text(json.dumps(kw))
    code = ("import asyncio, json, sys; from src.rewards.compute import compute_score; "
            "kw = json.load(open(sys.argv[1])); "
            f"out = asyncio.run(compute_score('wmt_zh_en/zh-en', {RESPONSE!r}, {REF!r}, {extra_info(SRC)!r}, **kw)); "
            "print(json.dumps({'length_match': out['length_match'], 'score': out['score']}))")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "kw.json")], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["length_match"] == pytest.approx(length_match())


def test_a_run_without_plugins_keeps_its_reward_kwargs(scorer_env):
    """A plugin loaded earlier in the same process (a sweep's precheck, a test) does not leak its
    component into another run's kwargs: the verl config and the run id of a run stay as they were."""
    kwargs_for("comet", f"reward.plugins=[{LENGTH}]", "+reward.weights.length_match=1")
    kw = kwargs_for("xcomet_xl")
    assert "plugins" not in kw
    assert set(kw["train_weights"]) == set(kw["clip"]) == {"bleu", "comet", "kiwi", "xcomet", "mqm", "ok_ratio"}


@pytest.mark.parametrize("overrides, message", [
    (("+reward.weights.length_match=1",), "reward.weights: unknown component 'length_match' (known: bleu, comet, kiwi, "
                                          "xcomet, mqm, ok_ratio, metricx, term; a component of your own is loaded "
                                          "through reward.plugins)"),
    (("reward.plugins=[tests/fixtures/reward_plugins/nope.py]",), "reward.plugins: tests/fixtures/reward_plugins/"
                                                                  "nope.py is not a file"),
    (("reward.plugins=[tests/fixtures/reward_plugins/takes_bleu.py]",), "reward component name 'bleu' is taken by "
                                                                        "src.rewards.components.Bleu"),
    (("reward.plugins=[no_such_module_qe_rl]",), "reward.plugins: loading no_such_module_qe_rl failed: "
                                                 "ModuleNotFoundError"),
    # issue 33 (finding 17): components, guards and metrics share one namespace
    (("reward.plugins=[tests/fixtures/reward_plugins/takes_length_ratio.py]",),
     "reward.plugins: component name 'length_ratio' is taken by the degenerate check degenerate_length_ratio: "
     "components, guards and metrics share one namespace"),
    (("reward.plugins=[tests/fixtures/reward_plugins/takes_repetition.py]",),
     "component name 'repetition' is taken by the guard repetition (reward.guards.repetition, logged as "
     "guard_repetition)"),
    (("reward.plugins=[tests/fixtures/reward_plugins/takes_score.py]",),
     "component name 'score' is taken by a key of every reward result"),
])
def test_plugin_refusals_are_one_line_at_launch(overrides, message):
    from src.config import compose_config
    from src.plan import build_plan
    from src.plan.values import PlanError
    from src import verl_config
    from src.rewards.settings import RewardConfigError

    cfg = compose_config(["reward=comet", *overrides])
    with pytest.raises((RewardConfigError, PlanError)) as err:
        verl_config.build(build_plan(cfg, run_dir="/tmp/reward-plugin-tests"), cfg)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_plugin_refusal_through_the_launcher_cli(tmp_path):
    res = launch_server.launch(["reward=comet", "+reward.weights.length_match=1", f"paths.output_dir={tmp_path}",
                                "dry_run=true"], env=dict(os.environ), cwd=REPO)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "unknown component 'length_match'" in lines[0]
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("overrides", [(), ("reward.normalise=per_component",)])
def test_every_key_of_a_reward_result_is_a_component_or_a_taken_name(loop, overrides):
    """The names a plug-in may not take (src/rewards/launch.py taken_names) cover every key
    compute_score returns beside the components: a key added to the result must be added there."""
    from src.rewards.compute import compute_score
    from src.rewards.launch import taken_names
    from tests.helpers.reward_config import extra_info, kwargs_for

    kw = kwargs_for("comet", *overrides)
    result = loop.run_until_complete(compute_score("x/zh-en", "<translate>The cat.</translate>", "The cat.",
                                                   extra_info("猫。", template="rl"), ask_scorer=False, **kw))
    others = set(result) - set(kw["train_weights"]) - set(kw["validation_weights"])
    assert others and others <= set(taken_names()), sorted(others - set(taken_names()))
