"""Scorer placement: which QE models each node's scoring service loads, on which device, how.

The service itself is src/scorer (its own env); src/node/scorer_service.py starts it from a
ScorerPlan. The evaluation CLI (src/evaluate/) builds one with `scorer_plan` too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from src.config.schema import Placement

from .values import PlanError, at_least, positive


@dataclass(frozen=True)
class ScorerModelSpec:
    name: str
    path: str
    kind: str
    encoder: Optional[str]
    tokenizer: Optional[str] = None  # the tokenizer's dir, for a backend that reads one (src/scorer/backends)


@dataclass(frozen=True)
class ScorerPlan:
    """The QE scoring service each node runs (src/node/scorer_service.py starts it from this)."""
    placement: Placement
    device: str                     # the service's `device`: cuda (sees only its own GPU(s)) or cpu
    # shared: index among this node's training GPUs the service runs on (the last one: rank 0's GPU
    # also hosts verl's driver-side allocations); None otherwise
    training_gpu_index: Optional[int]
    dtype: str
    python: str
    batch_tokens: int
    ready_timeout_s: float
    restarts: int
    models: tuple[ScorerModelSpec, ...]
    # placement external: the running service's URL (scorer.url); its token is read from the environment at launch
    url: Optional[str] = None


def models_needed(cfg: dict) -> list[str]:
    """The QE models the reward scores with (training and validation), each once, in order. The
    reward's settings were checked before (src/rewards/launch.py, from build_plan)."""
    reward = cfg["reward"]
    names = list(reward["sentence_models"]) + list(reward["validation_models"])
    if reward["mode"] != "off":
        names.append(reward["span_model"])
    known = set(cfg["scorer"]["models"])
    for name in names:
        if name not in known:
            raise PlanError(f"reward {reward['name']} needs scorer model {name!r}, which conf/scorer does "
                            f"not define (known: {', '.join(sorted(known))})")
    return list(dict.fromkeys(names))


def scorer_plan(scorer: dict, models: list[str], placement: Placement, gpus_per_node: int) -> Optional[ScorerPlan]:
    """Where and how the QE service runs (`scorer`: the composed scorer group; `placement`: shared,
    dedicated, cpu or external); None when no QE model is needed."""
    if not models:
        return None
    url = scorer.get("url")
    if placement == Placement.external and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        raise PlanError(f"scorer.placement=external needs the running service's URL: scorer.url=http://HOST:PORT "
                        f"(got {url!r}); its token goes in the environment variable QE_SCORER_TOKEN")
    if placement != Placement.external and url:
        raise PlanError(f"scorer.url={url} is read only with scorer.placement=external (placement is {placement}): "
                        f"set scorer.placement=external, or drop scorer.url")
    specs = tuple(ScorerModelSpec(name=name, path=str(scorer["models"][name]["path"]),
                                  kind=str(scorer["models"][name]["kind"]),
                                  encoder=scorer["models"][name].get("encoder"),
                                  tokenizer=scorer["models"][name].get("tokenizer")) for name in models)
    on_gpu = placement in (Placement.shared, Placement.dedicated)
    return ScorerPlan(
        placement=placement, device="cuda" if on_gpu else "cpu",
        training_gpu_index=gpus_per_node - 1 if placement == Placement.shared else None,
        # bf16/fp16 are autocast on CUDA; the CPU path runs fp32
        dtype=scorer["dtype"] if on_gpu else "fp32", python=str(scorer["python"]),
        batch_tokens=at_least(scorer["batch_tokens"], 1, "scorer.batch_tokens", "scorer.batch_tokens=16384"),
        ready_timeout_s=float(positive(scorer["ready_timeout_s"], "scorer.ready_timeout_s",
                                       "scorer.ready_timeout_s=600")),
        restarts=at_least(scorer["restarts"], 0, "scorer.restarts", "scorer.restarts=1"), models=specs,
        url=url.rstrip("/") if placement == Placement.external else None)
