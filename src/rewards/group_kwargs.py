"""Reward settings, the launch side: the composed reward group (conf/reward/*.yaml) -> the plain dict
verl passes to `compute_score` as keyword arguments (`reward.custom_reward_function.reward_kwargs`).

The mode is resolved here (which components count in training), so the verl config in the snapshot
shows the exact reward that runs; the dict is read back with the workers' own
`RewardSettings.from_kwargs` (src/rewards/settings.py), so what would fail there is refused at launch.
Nothing here varies per launch (no URL, token or path but the plug-in files and the LID model,
absolute): a re-run from a snapshot must give a byte-identical verl config; the service URL and
token reach the workers through the environment. Stdlib only.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from src.rewards import components, guards, plugins
from src.rewards.group import RewardGroup, read_group
from src.rewards.settings import RewardSettings, ValidationGroup, clips_of, weights_of
from src.rewards.typed_settings import read_section
from src.rewards.values import RewardConfigError
from src.scorer.backends import OWN_METRICS, model_metric


def sentence_model_components(group: RewardGroup, scorer_models: Mapping[str, Any]) -> dict:
    """Model role -> scorer model name, from the group's sentence and validation models, by the metric
    its kind gives (src.scorer.backends.model_metric): a model that needs the reference is
    COMET-DA-like (comet), one that does not is QE (kiwi), one whose backend has a metric of its own
    takes that role. comet and kiwi are always keys (None: no such model); a backend's own metric only
    when the group names a model for it, so the reward kwargs (verl config, run id) of a group
    without one stay as they were."""
    out: dict[str, str | None] = {"comet": None, "kiwi": None}
    names = list(dict.fromkeys(group.sentence_models + group.validation_models))
    for name in names:
        if name not in scorer_models:
            raise RewardConfigError(f"reward {group.name} names scorer model {name!r}, which "
                                    f"conf/scorer does not define (known: {', '.join(sorted(scorer_models))})")
        spec = scorer_models[name]
        comp = model_metric(spec.get("kind"), bool(spec.get("needs_ref")))
        if out.get(comp) is not None:
            raise RewardConfigError(f"reward {group.name}: two {comp} models ({out[comp]}, {name}); "
                                    f"keep one in reward.sentence_models/validation_models")
        out[comp] = name
    return out


def reward_kwargs(reward_cfg: Mapping[str, Any], scorer_models: Mapping[str, Any],
                  root: str | Path | None = None, logged: tuple[str, ...] = ()) -> dict:
    """The reward group (composed, resolved) -> the kwargs verl passes to compute_score. `root`: the
    checkout that relative reward.plugins paths are read from (default: the working directory). `logged`:
    components computed and logged in this run even at weight 0 (src/rewards/launch.py: the term component
    where the data's template gives terms)."""
    group = read_group(reward_cfg)  # the group's own keys, by their one typed definition (src/rewards/group.py)
    try:
        specs = plugins.resolve(list(group.plugins), Path(root or Path.cwd()))
        names = plugins.component_names(specs)  # the plugins' names must be known to check the weights
    except (plugins.PluginError, components.ComponentError) as exc:
        raise RewardConfigError(str(exc)) from None
    mode = group.mode
    span_model = group.span_model if mode != "off" else None
    models = {**sentence_model_components(group, scorer_models), "span": span_model}
    train = weights_of(group.weights, "weights", names)
    held_out = read_section(ValidationGroup, reward_cfg["validation"], "reward.validation")
    validation = weights_of(held_out.weights, "validation.weights", names)
    clips_of(group.clip, names)  # a clip of a component that does not exist would be dropped below
    names = run_components(names, models, train, validation, logged)
    train = {c: w for c, w in train.items() if c in names}
    validation = {c: w for c, w in validation.items() if c in names}
    span_only = {}
    if mode != "train":
        # the span model is not part of the training reward (it is not loaded with mode=off)
        span_only = {c: w for c, w in train.items() if w and components.get_component(c).model == "span"}
        train = {c: (0.0 if c in span_only else w) for c, w in train.items()}
    negative = {c: w for c, w in train.items() if w < 0}
    if negative and not group.allow_negative_weights:
        comp, w = next(iter(negative.items()))
        raise RewardConfigError(f"reward.weights.{comp}={w:g} is negative: the policy would be trained toward answers "
                                f"{comp} scores worse; set it >= 0, or add reward.allow_negative_weights=true if "
                                f"that is what you mean")
    if not any(train.values()):
        # the policy would learn the format bonus alone, whatever the run's name says it trains on
        raise RewardConfigError(_no_training_weight_message(group.name, mode, span_only, validation))
    kw = {
        "reward": group.name,
        "mode": mode,
        "models": models,
        "train_weights": train,
        "validation_weights": validation,
        "clip": {c: [float(x) for x in (group.clip.get(c) or components.get_component(c).clip)] for c in names},
        "format": dict(reward_cfg["format"]),
        "degenerate": dict(reward_cfg["degenerate"]),
        "discrete": {"enable": bool(reward_cfg["discrete"]["enable"]),
                     "components": list(reward_cfg["discrete"]["components"]),
                     "thresholds": list(reward_cfg["discrete"]["thresholds"])},
        "span": dict(reward_cfg["span"]),
        "validation_splits": list(held_out.splits),
        "round_decimals": group.round_decimals,
        "client": dict(reward_cfg["client"]),
    }
    if specs:  # only then: the verl config (and run id) of a run without plugins stays as it was
        kw["plugins"] = specs
    for metric in OWN_METRICS:  # idem: only a run with a backend's own metric has its settings
        if metric in names:
            kw[metric] = {"reference": (reward_cfg.get(metric) or {}).get("reference", False)}
    if reward_cfg.get("guards") is not None:
        kw["guards"] = guards.launch_kwargs(reward_cfg["guards"], root, train)
    RewardSettings.from_kwargs(kw)  # refuse at launch what would fail in the workers
    return kw


def _no_training_weight_message(group: str | None, mode: str, span_only: Mapping[str, float],
                                validation: Mapping[str, float]) -> str:
    """One line: why the training reward has no weighted component, and the two ways out."""
    if span_only:
        why = (f"its weighted components ({', '.join(f'reward.weights.{c}={w:g}' for c, w in span_only.items())}) "
               f"come from the span model, which trains only with reward.mode=train (this run: reward.mode={mode})")
        fix = "set reward.mode=train, or weight a sentence-level component"
    else:
        why = "every reward.weights.* is 0"
        fix = "weight a component"
    example = " ".join(f"reward.weights.{c}={w:g}" for c, w in validation.items() if w) or "reward.weights.kiwi=1"
    return (f"reward {group}: no component has a training weight: {why}, so the policy would learn the format "
            f"bonus alone; {fix}, e.g. {example} (what validation scores)")


def run_components(names: tuple[str, ...], models: Mapping[str, str | None], train: Mapping[str, float],
                   validation: Mapping[str, float], logged: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The components of this run: every one `in_every_run`, and each other one (a backend's own metric, the term
    component) when the group names a model for its role (then it is logged at validation: a held-out metric when
    its training weight is 0), weights it (a missing model is refused by RewardSettings then) or `logged` names it."""
    def used(name: str) -> bool:
        comp = components.get_component(name)
        return (comp.in_every_run or name in logged or train.get(name, 0.0) != 0.0 or validation.get(name, 0.0) != 0.0
                or (comp.model is not None and models.get(comp.model) is not None))

    return tuple(n for n in names if used(n))
