"""The reward group's one typed definition (issue 46, item 6): each group of settings (reward.format, .degenerate,
.discrete, .span, .client, .metricx, .token_credit, .validation, each guard) is a settings class whose fields carry their doc lines; the launcher's Hydra
schema is made from it and the workers read the kwargs into it. A new guard is one class and one yaml entry."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from src.config.schema import settings
from src.rewards import degenerate, guards
from src.rewards import settings as reward_settings
from src.rewards.credit import ranges as credit_ranges
from src.rewards.typed_settings import read_section, setting_field
from src.rewards.values import RewardConfigError
from tests.helpers.reward_config import composed

REPO = Path(__file__).resolve().parents[2]
SECTIONS = {"format": reward_settings.FormatSettings, "degenerate": degenerate.DegenerateSettings,
            "discrete": reward_settings.DiscreteSettings, "span": reward_settings.SpanSettings,
            "client": reward_settings.ClientSettings, "metricx": reward_settings.OwnMetricSettings,
            "token_credit": credit_ranges.TokenCreditGroup, "validation": reward_settings.ValidationGroup,
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
