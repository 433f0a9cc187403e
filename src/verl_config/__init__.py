"""verl config: the plan as verl 0.9.1's own ppo_trainer config, composed from verl's files and validated by verl (verdicts cached).
May import: src.config, src.plan, src.rewards; verl itself only inside validation (it imports torch).
"""
from .ppo_trainer import VERL_KEYS, build, compose, derived_keys, overrides, to_yaml, unvalidated, validate, verl_config_dir

__all__ = ["VERL_KEYS", "build", "compose", "derived_keys", "overrides", "to_yaml", "unvalidated", "validate",
           "verl_config_dir"]
