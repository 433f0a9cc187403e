"""A run's identity as the launcher computes it (src/pipeline identify), for a set of overrides."""
from __future__ import annotations


def identified(overrides: list[str], tmp_path):
    """The identity of the run these overrides launch, its results under `tmp_path`."""
    from src import verl_config
    from src.config import compose_config
    from src.pipeline import identify
    from src.plan import build_plan

    cfg = compose_config(overrides + [f"paths.results_root={tmp_path}/results"])
    plan = build_plan(cfg, run_dir=str(tmp_path / "run"))
    return identify(plan, cfg, overrides, verl_config.build(plan, cfg), None)
