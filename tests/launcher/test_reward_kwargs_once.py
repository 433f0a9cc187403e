"""The reward kwargs (reward.custom_reward_function.reward_kwargs) are built once per launch, in the
plan (src/rewards/launch.py), and are what verl's config holds and what `python -m
src.evaluate.inspect_reward` scores with. The real builder runs; the test only counts its calls."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf


@pytest.mark.parametrize("overrides", [
    ("reward=comet",),
    ("reward=comet", "reward.normalise=per_component"),
    ("reward=xcomet_xl", "reward.credit=token"),
])
def test_built_once_and_copied_into_verls_config(overrides, monkeypatch):
    from src import verl_config
    from src.config import compose_config
    from src.plan import build_plan
    from src.evaluate import inspect_reward as inspect_tool
    from src.rewards import group_kwargs

    builds = []
    real = group_kwargs.reward_kwargs

    def counted(*args, **kwargs):
        builds.append(args[0]["name"])
        return real(*args, **kwargs)

    monkeypatch.setattr(group_kwargs, "reward_kwargs", counted)
    cfg = compose_config(list(overrides))
    plan = build_plan(cfg, run_dir="/tmp/reward-kwargs-once-run", flash_attn=None)
    verl_cfg = verl_config.build(plan, cfg)
    assert len(builds) == 1, builds
    assert OmegaConf.to_container(verl_cfg.reward.custom_reward_function.reward_kwargs, resolve=True) == \
        plan.reward_kwargs
    # the inspect command scores with the same kwargs (reward.normalise's and reward.credit's included)
    assert inspect_tool.reward_kwargs(cfg) == plan.reward_kwargs
