"""verl 0.9.1's own reward managers driven as verl drives them: loaded from the verl config the launcher
builds (verl/trainer/ppo/reward.py load_reward_manager), handed one finished trajectory as a DataProto
and run with run_single on the manager's event loop, as verl's reward loop worker does
(verl/experimental/reward_loop/reward_loop.py RewardLoopWorker)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from tests.helpers.reward_example import DATA_SOURCE, REF


@lru_cache(maxsize=None)
def verl_config_for(*overrides: str):
    """verl's config exactly as the launcher builds it (validated by verl)."""
    from src import verl_config
    from src.config import compose_config
    from src.plan import build_plan

    cfg = compose_config(list(overrides))
    return verl_config.build(build_plan(cfg, run_dir="/tmp/reward-tests-run"), cfg)


def manager(tokenizer, *overrides: str):
    from verl.trainer.ppo.reward import load_reward_manager

    return load_reward_manager(verl_config_for(*overrides), tokenizer)


def sample(tokenizer, response: str, info: dict, reference: str = REF):
    """One finished trajectory as verl hands it to run_single (right-padded response)."""
    from verl import DataProto

    prompt = tokenizer.apply_chat_template([{"role": "user", "content": info["src"]}], tokenize=False,
                                           add_generation_prompt=True)
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r = tokenizer(response, add_special_tokens=False)["input_ids"]
    pad = [tokenizer.pad_token_id] * 4
    return DataProto.from_dict(
        tensors={"prompts": torch.tensor([p]), "responses": torch.tensor([r + pad]),
                 "attention_mask": torch.tensor([[1] * (len(p) + len(r)) + [0] * len(pad)])},
        non_tensors={"data_source": np.array([DATA_SOURCE], dtype=object),
                     "reward_model": np.array([{"style": "rule", "ground_truth": reference}], dtype=object),
                     "extra_info": np.array([info], dtype=object)})


def run(mgr, data) -> dict:
    """run_single on the manager's own event loop, as verl's reward loop worker drives it."""
    from src.rewards.client import close_clients

    try:
        return mgr.loop.run_until_complete(mgr.run_single(data))
    finally:
        mgr.loop.run_until_complete(close_clients())
