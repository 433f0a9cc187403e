"""Config: paths of the code and checkout, conf/ composed with overrides (Hydra), resolvers, schemas.
May import: src.rewards (the guards' settings classes reward.guards' schema is made from); Hydra's private API only in hydra_internal.py.
"""
from .compose import (SweepError, compose, compose_config, compose_config_in_app, fixed_overrides, is_hydra_override,
                      one_line, plus_form, register, sweep_jobs, to_plain)
from .hydra_internal import mode_known
from .paths import CODE_ROOT, CODE_SNAPSHOT_MARKER, CONF_DIR, PROJECT_ROOT

__all__ = ["CODE_ROOT", "CODE_SNAPSHOT_MARKER", "CONF_DIR", "PROJECT_ROOT", "SweepError", "compose",
           "compose_config", "compose_config_in_app", "fixed_overrides", "is_hydra_override", "mode_known", "one_line",
           "plus_form", "register", "sweep_jobs", "to_plain"]
