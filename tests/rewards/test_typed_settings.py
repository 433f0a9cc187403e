"""The reward group's one typed definition (issue 46, item 6): the group's own keys (src/rewards/group.py RewardGroup)
and each section (reward.format, .degenerate, .discrete, .span, .client, .metricx, .token_credit, .validation, each
guard) are settings classes whose fields carry their doc lines; the launcher's Hydra schema is made from them and the
launch side and the workers read the group into them. A new guard is one class and one yaml entry."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from src.config.schema import settings
from src.rewards import group as reward_group
from src.rewards import guards
from src.rewards.group_kwargs import reward_kwargs
from src.rewards.typed_settings import read_section, setting_field
from src.rewards.values import RewardConfigError
from tests.helpers.reward_config import composed

REPO = Path(__file__).resolve().parents[2]
SECTIONS = {**reward_group.SECTIONS,
            **{f"guards.{name}": guard.Settings for name, guard in guards.registered().items()}}


@pytest.mark.parametrize("section", SECTIONS)
def test_each_group_is_its_settings_class_in_the_yaml_the_schema_and_the_docs(section):
    cls = SECTIONS[section]
    group = composed(())["reward"]
    for part in section.split("."):
        group = group[part]
    assert set(group) == {f.name for f in fields(cls)}, section  # the yaml entry holds every key, no other
    documented = settings()
    for f in fields(cls):
        assert f.metadata["doc"].strip(), f"{section}.{f.name} has no doc line"
        # the launcher's schema carries the same doc line (and interval) for the plan's table and range check
        assert documented[f"reward.{section}.{f.name}"].doc == f.metadata["doc"]
        assert documented[f"reward.{section}.{f.name}"].interval == f.metadata["interval"]


def test_the_groups_own_keys_are_its_typed_class_in_the_yaml_the_schema_and_the_docs():
    group = composed(())["reward"]
    assert tuple(group) == reward_group.LAYOUT  # every key of the group, in its order, and no other
    documented = settings()
    for f in fields(reward_group.RewardGroup):
        assert f.metadata["doc"].strip(), f"reward.{f.name} has no doc line"
        assert documented[f"reward.{f.name}"].doc == f.metadata["doc"]
    read = reward_group.read_group(group)
    assert (read.mode, read.normalise, read.credit) == (group["mode"], group["normalise"], group["credit"])


@pytest.mark.parametrize("key, value, says", [
    ("mode", "sometimes", "reward.mode must be off, train or eval, got 'sometimes' (e.g. reward.mode=eval)"),
    ("round_decimals", -1, "reward.round_decimals must be an integer >= 0, got -1"),
    ("sentence_models", "cometkiwi_da", "reward.sentence_models must be a list, got 'cometkiwi_da'"),
])
def test_a_bad_value_of_the_groups_own_keys_is_refused_in_one_line_by_its_type(key, value, says):
    """Read by the launch side before the reward kwargs are written (the Hydra schema types these as str, int, list:
    what it cannot say, a choice or a sign, is the typed class's)."""
    cfg = composed(())
    group = {**cfg["reward"], key: value}
    with pytest.raises(RewardConfigError) as err:
        reward_kwargs(group, cfg["scorer"]["models"])
    assert str(err.value) == says


@dataclass(frozen=True)
class _Example:
    share: float = setting_field("a share", interval="(0, 1]", example="0.5")
    names: tuple[str, ...] = setting_field("some names")
    count: int = setting_field("a count")


@pytest.mark.parametrize("value, says", [
    ({"share": 0.5, "names": ["a"]}, "reward.x lacks 'count' (keys: share, names, count)"),
    ({"share": 0.5, "names": ["a"], "count": 1, "cuont": 2}, "reward.x has unknown key 'cuont'"),
    ({"share": 1.5, "names": ["a"], "count": 1}, r"reward.x.share must be in (0, 1], got 1.5"),
    ({"share": "half", "names": ["a"], "count": 1}, "reward.x.share must be a finite number, got 'half'"),
    ({"share": 0.5, "names": "a", "count": 1}, "reward.x.names must be a list, got 'a'"),
    ({"share": 0.5, "names": ["a"], "count": True}, "reward.x.count must be an integer >= 0, got True"),
    (["share"], "reward.x is a group of settings, got ['share']"),
])
def test_a_section_is_read_by_its_types_with_one_line_refusals(value, says):
    with pytest.raises(RewardConfigError) as err:
        read_section(_Example, value, "reward.x")
    assert str(err.value).startswith(says) and "\n" not in str(err.value)
    assert read_section(_Example, {"share": 1, "names": ["a", "b"], "count": 0}, "reward.x") == _Example(1.0, ("a", "b"), 0)


def test_a_new_guard_is_one_class_and_one_yaml_entry(tmp_path):
    """A guard registered before the config is composed: Hydra takes its yaml entry by the class's schema (and
    refuses a misspelt key), the launcher writes it into the reward kwargs, the workers read it and it scores."""
    script = textwrap.dedent('''
        import asyncio
        from dataclasses import dataclass
        from src.rewards.guard_registry import Guard, GuardSettingsBase, register_guard
        from src.rewards.typed_settings import setting_field

        @register_guard
        class Shouting(Guard):
            name = "shouting"

            @dataclass(frozen=True)
            class Settings(GuardSettingsBase):
                max_caps: float = setting_field("the share of capital letters at or above which it fires",
                                                interval="(0, 1]", example="0.5")

            def fired(self, x, s):
                letters = [c for c in x.translation if c.isalpha()]
                return bool(letters) and sum(c.isupper() for c in letters) / len(letters) >= s.max_caps

        from hydra.errors import ConfigCompositionException
        from src.config import compose_config
        from src.rewards.compute import compute_score
        from src.rewards.launch import reward_launch

        entry = "+reward.guards.shouting={enable: true, penalty: -1.5, max_caps: 0.6}"
        kw = reward_launch(compose_config(["reward=comet", entry])).kwargs
        assert kw["guards"]["shouting"] == {"enable": True, "penalty": -1.5, "max_caps": 0.6}, kw["guards"]
        info = {"split": "train", "src": "猫。", "src_lang": "zh", "tgt_lang": "en", "lang_pair": "zh-en",
                "template": "rl", "index": 0}
        out = asyncio.run(compute_score("x/zh-en", "<translate>THE CAT SLEEPS.</translate>", "The cat sleeps.",
                                        info, **kw))
        assert out["guard_shouting"] == 1.0 and out["answer"] == -1.5, out
        try:
            compose_config(["reward=comet", "+reward.guards.shouting={enable: true, penalty: -1, max_cpas: 0.6}"])
        except ConfigCompositionException as exc:
            assert "max_cpas" in str(exc) + str(exc.__cause__), exc
        else:
            raise AssertionError("a misspelt key of the new guard was composed")
        print("ok")
    ''')
    env_free = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env=env_free)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout[-2000:] + done.stderr[-3000:]
