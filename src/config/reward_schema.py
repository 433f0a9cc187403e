"""The types of the `reward` group (conf/reward_base/default.yaml, conf/reward/*.yaml), merged like the
rest of src/config/schema.py: a misspelt key (`reward.guards.wrong_languag.penalty=-2`,
`+reward.formt.bonus=1`) or a value of the wrong type is refused by Hydra at composition, with the key.

The values live in the yaml (`MISSING`: "the group sets it"); what a type cannot say is checked where
the reward is built: a guard's penalty is at most 0 (its interval, checked by the plan's range
check, src/plan/values.py RANGES), the rest by the reward's own settings (src/rewards/settings.py
RewardSettings, which the reward workers run too and the launcher reads the reward kwargs back through).
The groups reward.format, .degenerate, .discrete, .span, .client, .metricx, .token_credit, .validation and
each of reward.guards are not written here: each is made from the reward's own settings class
(src/rewards/settings.py, degenerate.py, guards.py, credit/ranges.py; src/rewards/typed_settings.py), the one
definition of its keys, types, doc lines and intervals that the reward workers read the kwargs into.
Component names are open (reward.plugins registers more): weights and clips are maps, checked
against the registered components there.
"""
from __future__ import annotations

import collections.abc
import typing
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Dict, List, Optional

from omegaconf import MISSING

from src.rewards import degenerate, guards
from src.rewards import settings as reward_settings
from src.rewards.credit import ranges as credit_ranges

from .settings_field import setting


def _omegaconf_type(kind):
    """A setting's type as OmegaConf types a structured config: a tuple is a List, `X | None` Optional[X]."""
    args = typing.get_args(kind)
    if type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return Optional[_omegaconf_type(inner)]
    if typing.get_origin(kind) is tuple:
        return List[typing.get_args(kind)[0]]
    if typing.get_origin(kind) is collections.abc.Mapping:
        return Dict[str, _omegaconf_type(typing.get_args(kind)[1])]
    return kind


def schema_of(settings_cls: type, name: str) -> type:
    """The Hydra twin of a reward settings class (src/rewards/typed_settings.py), named `name`: its fields with
    OmegaConf's types, the values from the yaml (MISSING here), each field's doc line and interval kept (setting():
    the plan's range check reads them)."""
    hints = typing.get_type_hints(settings_cls)
    schema = make_dataclass(name, [
        (f.name, _omegaconf_type(hints[f.name]), setting(doc=f.metadata["doc"], interval=f.metadata.get("interval"),
                                                         example=f.metadata.get("example")))
        for f in fields(settings_cls)])
    # a module attribute, as a written class is: OmegaConf's nodes are pickled (src/config/hydra_internal.py) and a
    # Hydra error names the class
    schema.__module__ = __name__
    assert schema.__name__ not in globals(), schema.__name__
    globals()[schema.__name__] = schema
    return schema


# reward.guards: one group per registered guard (src/rewards/guards.py), made from its own settings class
GuardsSchema = make_dataclass("GuardsSchema", [
    (name, schema, field(default_factory=schema))
    for name, schema in ((name, schema_of(guard.Settings, f"{type(guard).__name__}Schema"))
                         for name, guard in guards.registered().items())])
GuardsSchema.__module__ = __name__


# the groups whose one typed definition is the reward's own settings class
FormatSchema = schema_of(reward_settings.FormatSettings, "FormatSchema")
DegenerateSchema = schema_of(degenerate.DegenerateSettings, "DegenerateSchema")
DiscreteSchema = schema_of(reward_settings.DiscreteSettings, "DiscreteSchema")
SpanSchema = schema_of(reward_settings.SpanSettings, "SpanSchema")
ClientSchema = schema_of(reward_settings.ClientSettings, "ClientSchema")
MetricXSchema = schema_of(reward_settings.OwnMetricSettings, "MetricXSchema")
TokenCreditSchema = schema_of(credit_ranges.TokenCreditGroup, "TokenCreditSchema")
ValidationSchema = schema_of(reward_settings.ValidationGroup, "ValidationSchema")


@dataclass
class RewardSchema:
    name: str = MISSING
    # off | train | eval: where the span model is used (src/rewards/settings.py MODES)
    mode: str = MISSING
    sentence_models: List[str] = MISSING
    span_model: Optional[str] = MISSING
    validation_models: List[str] = MISSING
    plugins: List[str] = MISSING
    # component -> weight; components are registered classes (src/rewards/components.py, reward.plugins)
    weights: Dict[str, float] = MISSING
    # a negative training weight trains the policy away from what that component rewards (src/rewards/group_kwargs.py)
    allow_negative_weights: bool = setting(
        False, doc="a negative reward.weights.<component> is refused unless this is true (it trains toward answers "
                   "that component scores worse)")
    # component -> [lo, hi]
    clip: Dict[str, List[float]] = MISSING
    format: FormatSchema = field(default_factory=FormatSchema)
    degenerate: DegenerateSchema = field(default_factory=DegenerateSchema)
    guards: GuardsSchema = field(default_factory=GuardsSchema)
    discrete: DiscreteSchema = field(default_factory=DiscreteSchema)
    span: SpanSchema = field(default_factory=SpanSchema)
    metricx: MetricXSchema = field(default_factory=MetricXSchema)
    validation: ValidationSchema = field(default_factory=ValidationSchema)
    round_decimals: int = MISSING
    client: ClientSchema = field(default_factory=ClientSchema)
    # sum | per_component (src/rewards/normalise.py)
    normalise: str = MISSING
    # sequence | token (src/rewards/credit/launch.py)
    credit: str = MISSING
    token_credit: TokenCreditSchema = field(default_factory=TokenCreditSchema)
