"""The metricx reward component (issue 25 part 2): MetricX-24's raw score (0 = no error .. 25, lower is
better) is logged as it is and weighted as 1 - score/25 (0..1, higher is better); a group without a
MetricX model keeps its reward kwargs (verl config, run id) and result keys exactly as before."""
from __future__ import annotations

import math

import pytest
from hydra.errors import ConfigCompositionException

from src.config import one_line
from src.rewards import components
from src.rewards.combine import answer_score
from src.rewards.components import ComponentInput
from src.rewards.group_kwargs import reward_kwargs
from src.rewards.settings import RewardConfigError, RewardSettings
from src.scorer import backends, vocabulary
from tests.helpers.reward_config import composed, kwargs_for

METRICX = components.get_component("metricx")
SIX = {"bleu", "comet", "kiwi", "xcomet", "mqm", "ok_ratio"}  # the components every run has had


def row(answer) -> ComponentInput:
    return ComponentInput("t", "s", "r", "en", {} if answer is None else {"metricx": answer})


def test_the_component_reads_the_metricx_answer_raw():
    assert METRICX.model == "metricx" and "metricx" in components.MODEL_ROLES
    assert METRICX.value(row({"score": 7.25})) == 7.25
    for bad in (None, {}, {"score": None}, {"score": float("nan")}, {"score": float("inf")}, {"score": True}):
        assert METRICX.value(row(bad)) is None, bad


@pytest.mark.parametrize("raw, reward", [(0.0, 1.0), (25.0, 0.0), (5.0, 0.8), (12.5, 0.5), (1.0, 0.96)])
def test_the_transform_is_one_minus_score_over_25(raw, reward):
    assert METRICX.normalised(raw) == pytest.approx(reward)
    assert backends.unit_score("metricx", raw) == pytest.approx(reward)


def test_the_transform_keeps_order_reversed_and_the_range():
    raws = [i * 25 / 100 for i in range(101)]
    rewards = [METRICX.normalised(r) for r in raws]
    assert all(a > b for a, b in zip(rewards, rewards[1:]))  # lower score (better) -> higher reward
    assert min(rewards) == 0.0 and max(rewards) == 1.0
    scale = backends.scale_of("metricx")
    assert (scale.lo, scale.hi, scale.higher_is_better) == (0.0, 25.0, False)
    assert backends.scale_of("kiwi").higher_is_better and backends.unit_score("kiwi", 0.7) == 0.7


def settings(*overrides: str) -> RewardSettings:
    return RewardSettings.from_kwargs(kwargs_for("metricx", *overrides))


@pytest.mark.parametrize("raw, answer", [(0.0, 1.0), (5.0, 0.8), (25.0, 0.0), (None, 0.0),
                                         # outside the model's clip: the reward's clip holds it in [0, 1]
                                         (30.0, 0.0), (-2.0, 1.0)])
def test_the_answer_is_the_clipped_transform(raw, answer):
    s = settings()
    values = {c: None for c in s.train_weights} | {"metricx": raw}
    assert answer_score(values, s, validation=False) == pytest.approx(answer)


def test_weights_and_clip_apply_to_the_transformed_value():
    s = settings("reward.weights.metricx=0.5", "reward.clip.metricx=[0.2,0.9]")
    values = {c: None for c in s.train_weights}
    assert answer_score(values | {"metricx": 0.0}, s, False) == pytest.approx(0.5 * 0.9)
    assert answer_score(values | {"metricx": 15.0}, s, False) == pytest.approx(0.5 * 0.4)
    assert answer_score(values | {"metricx": 24.0}, s, False) == pytest.approx(0.5 * 0.2)


def test_the_metricx_group_asks_metricx_in_qe_mode():
    kw = kwargs_for("metricx")
    assert kw["models"] == {"comet": None, "kiwi": "cometkiwi_da", "metricx": "metricx24_xl", "span": None}
    assert kw["train_weights"]["metricx"] == 1.0 and sum(kw["train_weights"].values()) == 1.0
    assert kw["validation_weights"]["metricx"] == 0.0 and kw["metricx"] == {"reference": False}
    assert set(kw["train_weights"]) == set(kw["clip"]) == SIX | {"metricx"}
    assert vocabulary.request_item("metricx", "s", "m", ref="r") == {"src": "s", "mt": "m"}
    assert vocabulary.request_item("metricx", "s", "m", ref="r", own_reference=True) == \
        {"src": "s", "mt": "m", "ref": "r"}
    assert vocabulary.request_item("metricx", "s", "m", ref=" ", own_reference=True) == {"src": "s", "mt": "m"}


@pytest.mark.parametrize("reward", ["comet", "xcomet_xl", "word_qe"])
def test_a_group_has_metricx_keys_exactly_when_it_names_a_metricx_model(reward):
    """Without a MetricX model, no metricx key anywhere: the verl config, and so the run id, of every
    existing group is as it was. Naming one adds exactly its keys."""
    kw = kwargs_for(reward)
    assert set(kw["train_weights"]) == set(kw["validation_weights"]) == set(kw["clip"]) == SIX
    assert set(kw["models"]) == {"comet", "kiwi", "span"} and "metricx" not in kw
    held = kwargs_for(reward, "reward.validation_models=[cometkiwi_da,metricx24_xl]")
    assert set(held["train_weights"]) == set(held["validation_weights"]) == set(held["clip"]) == SIX | {"metricx"}
    assert held["models"] == {**kw["models"], "metricx": "metricx24_xl"} and held["metricx"] == {"reference": False}
    assert {k: v for k, v in held.items() if k not in ("train_weights", "validation_weights", "clip", "models",
                                                       "metricx")} == {k: v for k, v in kw.items() if k not in (
        "train_weights", "validation_weights", "clip", "models")}


def test_metricx_in_validation_models_is_a_held_out_metric():
    kw = kwargs_for("comet", "reward.validation_models=[cometkiwi_da,metricx24_xl]")
    assert kw["models"]["metricx"] == "metricx24_xl"
    assert kw["train_weights"]["metricx"] == 0.0 == kw["validation_weights"]["metricx"]
    s = RewardSettings.from_kwargs(kw)
    assert "metricx" in s.train_weights and s.models["metricx"] == "metricx24_xl"


def test_the_xxl_model_is_read_as_metricx_too():
    assert kwargs_for("metricx", "reward.sentence_models=[metricx24_xxl]")["models"]["metricx"] == "metricx24_xxl"


@pytest.mark.parametrize("overrides, message", [
    (("reward=comet", "reward.weights.metricx=1"),
     "reward.weights.metricx=1.0 needs a MetricX-24 model (e.g. metricx24_xl) in reward.sentence_models or "
     "reward.validation_models"),
    (("reward=metricx", "reward.sentence_models=[metricx24_xl,metricx24_xxl]"),
     "reward metricx: two metricx models (metricx24_xl, metricx24_xxl); keep one"),
])
def test_refusals_are_one_line(overrides, message):
    cfg = composed(overrides)
    with pytest.raises(RewardConfigError) as err:
        reward_kwargs(cfg["reward"], cfg["scorer"]["models"])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_reference_that_is_not_a_bool_is_refused_at_composition_with_its_key():
    # the reward group's types (src/config/reward_schema.py MetricXSchema)
    with pytest.raises(ConfigCompositionException) as err:
        composed(("reward=metricx", "reward.metricx.reference=yes-please"))
    line = one_line(err.value)
    assert "reward.metricx.reference" in line and "not a valid bool" in line and "\n" not in line


def test_kwargs_of_a_run_are_read_back_by_a_worker_unchanged():
    kw = kwargs_for("metricx")
    s = RewardSettings.from_kwargs(kw)
    assert list(s.train_weights) == list(kw["train_weights"]) and s.own_reference["metricx"] is False
    assert math.isclose(s.clip["metricx"][1], 1.0)
