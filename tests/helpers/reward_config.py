"""The reward's inputs as the launcher and src.data.prepare make them: the reward kwargs verl's config
carries for a reward group, and a row's extra_info."""
from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=None)
def composed(overrides: tuple[str, ...]) -> dict:
    """The project config composed from these overrides (cached: composing takes a Hydra pass)."""
    from src.config import compose_config

    return compose_config(list(overrides))


def kwargs_for(reward: str, *overrides: str) -> dict:
    """The reward kwargs the launcher puts into verl's config for this reward group."""
    from src.rewards.group_kwargs import reward_kwargs

    cfg = composed((f"reward={reward}", *overrides))
    return reward_kwargs(cfg["reward"], cfg["scorer"]["models"])


def extra_info(src: str, src_lang: str = "zh", tgt_lang: str = "en", template: str = "chat",
               split: str = "train", **more) -> dict:
    """extra_info as src.data.prepare writes it."""
    return {"split": split, "src": src, "src_lang": src_lang, "tgt_lang": tgt_lang,
            "lang_pair": f"{src_lang}-{tgt_lang}", "template": template, "index": 0, **more}
