"""The reward group's top-level keys (conf/reward_base/default.yaml, conf/reward/*.yaml), typed once: `RewardGroup`, a
settings class like each section's (src/rewards/typed_settings.py), whose fields carry their doc lines. The launcher's
Hydra schema is made from it and from the sections' classes (src/config/reward_schema.py), and the launch side reads the
composed group into it (src/rewards/group_kwargs.py) before it writes the reward kwargs.

SECTIONS is the one table of the group's sections and the class each is read into (reward.guards is a section per
registered guard: src/rewards/guards.py). The keys of the group, leaves and sections, in the order the group has
them: LAYOUT.
Stdlib only: the reward workers import the modules it imports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from src.rewards import degenerate, normalise
from src.rewards import settings as reward_settings
from src.rewards.credit import ranges as credit_ranges
from src.rewards.typed_settings import read_section, setting_field
from src.rewards.values import RewardConfigError


@dataclass(frozen=True, kw_only=True)  # keyword-only: a field with a default may stand before one without
class RewardGroup:
    """The reward group's own keys; each section is its settings class (SECTIONS)."""
    name: str = setting_field("the group's name (conf/reward/<name>.yaml): the run's names and its checkpoint path "
                              "carry it")
    mode: str = setting_field("where the span model (span_model) counts: off (not loaded), train (in the training "
                              "reward), eval (scored and logged at validation only)", choices=reward_settings.MODES)
    sentence_models: tuple[str, ...] = setting_field("QE/COMET models of conf/scorer scoring every answer (each gives "
                                                     "the component its kind names: comet, kiwi, metricx)")
    span_model: str | None = setting_field("the error-span model of conf/scorer (XCOMET): the xcomet, mqm and "
                                           "ok_ratio components; null: none")
    validation_models: tuple[str, ...] = setting_field("models scored at validation only (held-out metrics), beside "
                                                       "the sentence models")
    plugins: tuple[str, ...] = setting_field(".py files (relative to the checkout) or modules that register "
                                             "components or guards of your own (docs/rewards.md)")
    weights: Mapping[str, float] = setting_field("component -> its weight in the training reward (components: "
                                                 "src/rewards/components.py and reward.plugins)")
    allow_negative_weights: bool = setting_field(
        "a negative reward.weights.<component> is refused unless this is true (it trains toward answers that "
        "component scores worse)", default=False)
    clip: Mapping[str, tuple[float, ...]] = setting_field("component -> [lo, hi] it is clipped to before it is "
                                                          "weighted")
    round_decimals: int = setting_field("decimals the reward is rounded to (DAPO's filter compares rounded scores)")
    # normalise and credit: a group written before they existed reads them as sum and sequence
    normalise: str = setting_field("sum: GRPO normalises the summed reward; per_component: each part within its "
                                   "group, then summed (src/rewards/normalise.py)", choices=normalise.MODES,
                                   default=normalise.SUM)
    credit: str = setting_field("sequence: one reward an answer; token: the span model's error spans also penalise "
                                "their tokens (src/rewards/credit/)", choices=credit_ranges.CREDITS,
                                default=credit_ranges.SEQUENCE)


# section -> the settings class it is read into; reward.guards: one section per registered guard
SECTIONS: dict[str, type] = {
    "format": reward_settings.FormatSettings,
    "degenerate": degenerate.DegenerateSettings,
    "discrete": reward_settings.DiscreteSettings,
    "span": reward_settings.SpanSettings,
    "metricx": reward_settings.OwnMetricSettings,
    "validation": reward_settings.ValidationGroup,
    "client": reward_settings.ClientSettings,
    "token_credit": credit_ranges.TokenCreditGroup,
}
GUARDS = "guards"
# every key of the group in its order (the composed config and the snapshot show them so)
LAYOUT = ("name", "mode", "sentence_models", "span_model", "validation_models", "plugins", "weights",
          "allow_negative_weights", "clip", "format", "degenerate", GUARDS, "discrete", "span", "metricx", "validation",
          "round_decimals", "client", "normalise", "credit", "token_credit")


def read_group(reward_cfg: Mapping[str, Any]) -> RewardGroup:
    """The composed group's own keys, read by their types and choices (RewardConfigError, one line naming the key);
    a group written before allow_negative_weights, normalise or credit existed reads them as their defaults. The
    sections are read by their own classes where they are used."""
    if not isinstance(reward_cfg, Mapping):
        raise RewardConfigError(f"reward is a group of settings, got {reward_cfg!r}")
    own = {k: v for k, v in reward_cfg.items() if k not in SECTIONS and k != GUARDS}
    return read_section(RewardGroup, own, "reward")
