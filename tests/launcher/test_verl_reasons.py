"""Every rejection by verl reaches the user as verl's own reason on one line, with the override that
led to it; and values verl's validate_config lets through but its workers refuse on the GPU node
are refused on CPU with the allowed values read from verl's registries (src/verl_config/checks.py).
Each case: one line on stderr, exit status 2, nothing written."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.launches import files_under, launch


def _registry(name: str) -> list[str]:
    """The allowed values as verl itself lists them (independent of src/verl_config/checks.py)."""
    if name == "rollout":
        from verl.workers.rollout.base import _ROLLOUT_REGISTRY
        return sorted({n for n, m in _ROLLOUT_REGISTRY if m == "async"})
    if name == "strategy":
        from verl.workers.engine import EngineRegistry
        return sorted(EngineRegistry._engines["language_model"])
    if name == "reward_manager":
        from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
        return sorted(REWARD_MANAGER)
    # read in a fresh process, as the launcher's: this one's registry also holds what earlier tests registered
    # (grpo_token, grpo_per_component), which the launcher never does
    registry = {"estimator": "ADV_ESTIMATOR_REGISTRY", "policy_loss": "POLICY_LOSS_REGISTRY"}[name]
    code = f"from verl.trainer.ppo import core_algos; print('\\n'.join(sorted(core_algos.{registry})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return out.split()


# (overrides, verl's reason that must be shown, registry whose names must be listed, override named)
CASES = {
    # verl's validate_config: the reason sits on a later line of Hydra's InstantiationException
    "micro_batch_twice": (["+verl.actor_rollout_ref.actor.ppo_micro_batch_size=16"],
                          "You have set both 'actor.ppo_micro_batch_size' AND 'actor.ppo_micro_batch_size_per_gpu'",
                          None, "+verl.actor_rollout_ref.actor.ppo_micro_batch_size=16"),
    # worker-side RolloutConfig.__post_init__ (verl/workers/config/rollout.py)
    "rollout_mode_sync": (["+verl.actor_rollout_ref.rollout.mode=sync"], "Rollout mode 'sync' has been removed",
                          None, "+verl.actor_rollout_ref.rollout.mode=sync"),
    # registries: accepted by validate_config, refused only when workers start
    "rollout_name": (["+verl.actor_rollout_ref.rollout.name=bogus"], "actor_rollout_ref.rollout.name='bogus'",
                     "rollout", "+verl.actor_rollout_ref.rollout.name=bogus"),
    "actor_strategy": (["+verl.actor_rollout_ref.actor.strategy=bogus"], "actor_rollout_ref.actor.strategy='bogus'",
                       "strategy", "+verl.actor_rollout_ref.actor.strategy=bogus"),
    "estimator": (["+verl.algorithm.adv_estimator=bogus"], "algorithm.adv_estimator='bogus'", "estimator",
                  "+verl.algorithm.adv_estimator=bogus"),
    "policy_loss": (["+verl.actor_rollout_ref.actor.policy_loss.loss_mode=bogus"],
                    "actor_rollout_ref.actor.policy_loss.loss_mode='bogus'", "policy_loss",
                    "+verl.actor_rollout_ref.actor.policy_loss.loss_mode=bogus"),
    "reward_manager": (["algo.reward_manager=bogus"], "reward.reward_manager.name='bogus'", "reward_manager",
                       "algo.reward_manager=bogus"),
    # positive counts verl never checks
    "ppo_epochs": (["+verl.actor_rollout_ref.actor.ppo_epochs=0"],
                   "actor_rollout_ref.actor.ppo_epochs=0 must be a positive integer", None,
                   "+verl.actor_rollout_ref.actor.ppo_epochs=0"),
    "reward_workers": (["+verl.reward.num_workers=0"], "reward.num_workers=0 must be a positive integer", None,
                       "+verl.reward.num_workers=0"),
    "total_epochs": (["+verl.trainer.total_epochs=0"], "trainer.total_epochs=0 must be a positive integer", None,
                     "+verl.trainer.total_epochs=0"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_verl_rejection_is_one_line_with_reason_and_override(isolated_paths, case):
    overrides, reason, registry, override = CASES[case]
    out, paths = isolated_paths
    result = launch(["reward=comet", "gpus=4", *overrides, "dry_run=true"] + paths)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: verl rejected the config: "), result.stderr
    line = lines[0]
    assert reason in line
    assert f"(override: {override})" in line
    if registry:
        assert ", ".join(_registry(registry)) in line
    assert files_under(out) == []


def test_long_reasons_are_trimmed_and_the_innermost_cause_wins():
    from src.pipeline.errors import REASON_CHARS
    from src.pipeline.errors import verl_reason as _verl_reason

    try:
        try:
            raise ValueError("inner reason " + "x" * 1000)
        except ValueError as inner:
            raise RuntimeError("Error in call to target 'verl.Foo':") from inner
    except RuntimeError as outer:
        text = _verl_reason(outer, ["gpus=4", "+verl.a.b=1"])
    reason, _, tail = text.partition(" (")
    assert reason.startswith("ValueError: inner reason x") and reason.endswith("...")
    assert len(reason) == REASON_CHARS
    assert tail == "verl overrides given: +verl.a.b=1)"


def test_the_project_configs_pass_every_check():
    """The checks are not stricter than verl: every algo's config as the launcher builds it passes."""
    from src import verl_config
    from src.config import compose_config
    from src.plan import build_plan

    for algo in ("grpo", "dapo"):
        cfg = compose_config(["reward=comet", f"algo={algo}", "gpus=4"])
        verl_config.build(build_plan(cfg, run_dir="/tmp/verl-reasons"), cfg)
