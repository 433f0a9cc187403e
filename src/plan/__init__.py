"""Plan: every derived value of a run (batch geometry, scorer placement, memory, stop rules, names) from the composed config.
May import: src.config (dotted flatten), src.rewards (the token-credit plan), src.scorer (the backends' KINDS and descriptors: a QE model's memory formula); pure, no I/O (the plan table only prints; src/plan/algorithm.py reads the conf/algo preset a run names).
"""
from .batch import PIN_KEYS, BatchPlan, plan_batch
from . import run_names
from .resources import ray_cpus_for
from .run_names import checkpoint_prefix, earlier_names
from .run_plan import RunPlan, build_plan, with_identity, with_train_rows, with_trains
from .scorer import ScorerModelSpec, ScorerPlan, scorer_plan
from .values import Adjustment, PlanError, flatten

__all__ = ["PIN_KEYS", "Adjustment", "BatchPlan", "PlanError", "RunPlan", "ScorerModelSpec", "ScorerPlan",
           "build_plan", "checkpoint_prefix", "earlier_names", "flatten", "plan_batch", "ray_cpus_for", "run_names",
           "scorer_plan", "with_identity", "with_train_rows", "with_trains"]
