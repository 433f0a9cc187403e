"""Our config composed from conf/ with overrides, and a sweep's jobs, through Hydra's compose API.

`compose_config(overrides)` is the one way code outside a Hydra app (the pre-launch check, the
evaluation CLI, tests) gets the config a run with those overrides would get: conf/ of the code
this process runs, the schema (src/config/schema.py), the resolvers, resolved to plain dicts.
"""
from __future__ import annotations

import itertools

from omegaconf import DictConfig, OmegaConf

from . import hydra_internal, schema
from .paths import CONF_DIR
from .resolvers import register_resolvers


def register() -> None:
    """What composing conf/ needs registered first: the resolvers and the schema. Idempotent;
    called wherever a config is composed (also in a Slurm job composing from its code snapshot)."""
    register_resolvers()
    schema.register()


def compose(overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """conf/config.yaml with `overrides` (Hydra's compose API), unresolved."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="launch"):
        return hydra_compose(config_name="config", overrides=overrides, return_hydra_config=with_hydra)


def to_plain(cfg: DictConfig) -> dict:
    """A composed config (without its `hydra` node) as the plain dict the plan reads: resolved,
    enums as their names (so it dumps to YAML as written in conf/)."""
    if "hydra" in cfg:
        cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)


def compose_config(overrides: list[str]) -> dict:
    """Our config composed with overrides, resolved to a plain dict."""
    return to_plain(compose(overrides))


def is_hydra_override(line: str) -> bool:
    return line.startswith(("hydra.", "hydra/", "+hydra", "~hydra", "++hydra"))


class SweepError(ValueError):
    """A sweep given where a single run was asked for (or the reverse): one line."""


def sweep_jobs(overrides: list[str], multirun: bool, sweeper_params: dict) -> list[list[str]]:
    """Every job's overrides, as Hydra's BasicSweeper makes them: a sweep config's
    hydra.sweeper.params first, command-line overrides after (the command line wins per key)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    parsed = parser.parse_overrides(overrides)
    if not multirun:
        sweeps = [o.input_line for o in parsed if o.is_sweep_override()]
        if sweeps:
            raise SweepError(f"{sweeps[0]} is a sweep: add --multirun to run every value")
        if sweeper_params:
            raise SweepError("the config defines a sweep (hydra.sweeper.params, e.g. from +sweep=...): "
                             "add --multirun to run it")
        return [overrides]
    params = parser.parse_overrides([f"{k}={v}" for k, v in sweeper_params.items()])
    return hydra_internal.sweep_jobs(params + parsed)


def fixed_overrides(overrides: list[str]) -> list[str]:
    """The overrides that are not sweeps (what every job of a sweep shares)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return [o.input_line for o in OverridesParser.create().parse_overrides(overrides) if not o.is_sweep_override()]


def one_line(exc: BaseException) -> str:
    """Hydra's multi-line errors on one line: what failed, why (OmegaConf's reason for a schema
    refusal, which Hydra keeps on a later line or in the exception's cause), the key
    (`full_key: scorer.placement`), and the options Hydra lists for an unknown group option."""
    lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
    if not lines:
        return type(exc).__name__
    cause = exc.__cause__
    lines += [l.strip() for l in str(cause).splitlines() if l.strip()] if cause is not None else []
    head = lines[0]
    reason = lines[1] if len(lines) > 1 else ""
    # "Error merging override gpus=x" / "... raised while composing config:" say nothing of why
    if reason and not reason.startswith(("full_key:", "Available options")) and (
            head.endswith(":") or head.startswith(("Error merging", "Could not override"))):
        head = f"{head.rstrip(':.')}: {reason}"
    key = next((l.split(":", 1)[1].strip() for l in lines if l.startswith("full_key:")), None)
    if key and key not in head:
        head += f" (key: {key})"
    if any(l.startswith("Available options") for l in lines):
        idx = next(i for i, l in enumerate(lines) if l.startswith("Available options"))
        options = list(itertools.takewhile(lambda l: not l.endswith(":"), lines[idx + 1:]))  # then "Config search path:"
        head += f" ({lines[idx].rstrip(':').lower()}: {', '.join(options)})"
    return head
