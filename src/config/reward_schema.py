"""The types of the `reward` group (conf/reward_base/default.yaml, conf/reward/*.yaml), merged like the
rest of src/config/schema.py: a misspelt key (`reward.guards.wrong_languag.penalty=-2`,
`+reward.formt.bonus=1`) or a value of the wrong type is refused by Hydra at composition, with the key.

Nothing is written here: RewardSchema is made from the group's one typed definition, src/rewards/group.py
(RewardGroup for the group's own keys, SECTIONS for reward.format, .degenerate, .discrete, .span, .metricx,
.validation, .client and .token_credit, and each registered guard's settings class for reward.guards): the classes
whose fields carry each key's type, doc line and interval, and which the reward is read into (by the launch side,
src/rewards/group_kwargs.py, and the reward workers). The values live in the yaml (`MISSING`: "the group sets it");
what a type cannot say is checked where the reward is read (a guard's penalty is at most 0: its interval, checked
by the plan's range check too, src/plan/values.py RANGES; a mode among its choices). Component names are open
(reward.plugins registers more): weights and clips are maps, checked against the registered components there.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import typing
from dataclasses import field, fields, make_dataclass
from typing import Dict, List, Optional

from omegaconf import MISSING

from src.rewards import guards
from src.rewards.group import GUARDS, LAYOUT, SECTIONS, RewardGroup

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


def _setting_of(f):
    """A settings class's field as a schema field: its default where it has one (the yaml sets the rest), its doc line
    and interval."""
    default = MISSING if f.default is dataclasses.MISSING else f.default
    return setting(default, doc=f.metadata["doc"], interval=f.metadata.get("interval"),
                   example=f.metadata.get("example"))


def _fields_of(settings_cls: type) -> list[tuple]:
    """A settings class's fields as a schema's (name, type, field): OmegaConf's types, the values from the yaml (MISSING
    here, or the class's default), each field's doc line and interval kept (setting(): the plan's range check reads
    them)."""
    hints = typing.get_type_hints(settings_cls)
    return [(f.name, _omegaconf_type(hints[f.name]), _setting_of(f)) for f in fields(settings_cls)]


def schema_of(settings_cls: type, name: str) -> type:
    """The Hydra twin of a reward settings class (src/rewards/typed_settings.py), named `name`."""
    schema = make_dataclass(name, _fields_of(settings_cls))
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


def _schema_name(section: str) -> str:
    return "".join(part.capitalize() for part in section.split("_")) + "Schema"  # token_credit -> TokenCreditSchema


# each section's schema, made from the class it is read into; the group's own keys from RewardGroup
SECTION_SCHEMAS = {section: schema_of(cls, _schema_name(section)) for section, cls in SECTIONS.items()}
_OWN = {spec[0]: spec for spec in _fields_of(RewardGroup)}


def _reward_field(key: str) -> tuple:
    if key == GUARDS:
        return key, GuardsSchema, field(default_factory=GuardsSchema)
    if key in SECTION_SCHEMAS:
        return key, SECTION_SCHEMAS[key], field(default_factory=SECTION_SCHEMAS[key])
    return _OWN[key]


RewardSchema = make_dataclass("RewardSchema", [_reward_field(key) for key in LAYOUT])
RewardSchema.__module__ = __name__
assert set(LAYOUT) == {f.name for f in fields(RewardGroup)} | set(SECTIONS) | {GUARDS}, "src/rewards/group.py LAYOUT"
