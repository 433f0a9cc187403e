"""The reward groups' options and mode semantics, against the live tiny QE service, with the
kwargs the launcher builds from the composed config (so the yaml keys named in the group files'
comments are the ones tested)."""
from __future__ import annotations

import pytest

from src.rewards.compute import compute_score
from src.rewards.settings import RewardConfigError, RewardSettings, reward_kwargs, score_bounds
from tests.rewards.conftest import _composed, extra_info, kwargs_for
from tests.rewards.test_verl_managers import MT, REF, RESPONSE, SRC, bleu, clip01, kiwi_of, ok_share, xcomet_of


def score(loop, kw, split="train", response=RESPONSE, reference=REF):
    return loop.run_until_complete(compute_score("wmt/zh-en", response, reference, extra_info(SRC, split=split),
                                                 **kw))


def test_comet_reference_based_comet_da(loop, scorer_env):
    kw = kwargs_for("comet", "reward.sentence_models=[comet_da]", "reward.weights.kiwi=0", "reward.weights.comet=1")
    out = score(loop, kw)
    da = scorer_env.score("comet_da", [{"src": SRC, "mt": MT, "ref": REF}])[0]["score"]
    assert out["comet"] == pytest.approx(da, abs=1e-4) and out["kiwi"] is None
    assert out["score"] == pytest.approx(1 + bleu() / 100 + clip01(da), abs=1e-4)
    # validation still uses CometKiwi, and logs COMET-DA beside it
    val = score(loop, kw, split="val")
    assert val["comet"] == pytest.approx(da, abs=1e-4)
    assert val["score"] == pytest.approx(1 + bleu() / 100 + clip01(kiwi_of(scorer_env)), abs=1e-4)


def test_comet_discrete_thresholds(loop, scorer_env):
    # thresholds around the tiny model's kiwi so the level is known
    kiwi = kiwi_of(scorer_env)
    kw = kwargs_for("comet", "reward.discrete.enable=true",
                    f"reward.discrete.thresholds=[{kiwi - 2},{kiwi - 1},{kiwi + 1}]",
                    "reward.clip.kiwi=[-5.0,5.0]")
    out = score(loop, kw)
    assert out["kiwi"] == pytest.approx(kiwi, abs=1e-4)  # logged raw
    assert out["score"] == pytest.approx(1 + bleu() / 100 + 2 / 3, abs=1e-6)  # 2 of 3 thresholds reached


def test_comet_mode_train_adds_the_span_model(loop, scorer_env):
    out = score(loop, kwargs_for("comet", "reward.mode=train"))
    mqm = xcomet_of(scorer_env)["mqm"]
    assert out["mqm"] == pytest.approx(mqm, abs=1e-4)
    assert out["score"] == pytest.approx(1 + bleu() / 100 + clip01(kiwi_of(scorer_env)) + clip01(mqm), abs=1e-4)


def test_xcomet_reference_mode(loop, scorer_env):
    out = score(loop, kwargs_for("xcomet_xl", "reward.span.reference=true"))
    with_ref = xcomet_of(scorer_env, ref=REF)["score"]
    assert out["xcomet"] == pytest.approx(with_ref, abs=1e-4)
    assert out["score"] == pytest.approx(1 + clip01(with_ref), abs=1e-4)


def test_xcomet_mqm_only(loop, scorer_env):
    out = score(loop, kwargs_for("xcomet_xl", "reward.weights.xcomet=0", "reward.weights.mqm=1"))
    assert out["score"] == pytest.approx(1 + xcomet_of(scorer_env)["mqm"], abs=1e-4)


def test_word_qe_mixed_with_sentence_qe(loop, scorer_env):
    out = score(loop, kwargs_for("word_qe", "reward.weights.kiwi=0.5"))
    expected = 1 + ok_share(xcomet_of(scorer_env)) + 0.5 * clip01(kiwi_of(scorer_env))
    assert out["score"] == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("reward", ["xcomet_xl", "word_qe"])
def test_mode_eval_trains_without_the_span_model_and_logs_it_at_validation(loop, scorer_env, reward):
    kw = kwargs_for(reward, "reward.mode=eval")
    before = scorer_env.items_by_model().get("xcomet_xl", 0)
    train = score(loop, kw)
    assert scorer_env.items_by_model().get("xcomet_xl", 0) == before  # not asked in training
    # nothing else weighted: the training reward falls back to the validation reward
    assert train["xcomet"] is None and train["ok_ratio"] is None
    assert train["score"] == pytest.approx(1 + bleu() / 100 + clip01(kiwi_of(scorer_env)), abs=1e-4)
    val = score(loop, kw, split="val")
    assert val["xcomet"] == pytest.approx(xcomet_of(scorer_env)["score"], abs=1e-4)


def test_mode_off_never_calls_the_span_model(loop, scorer_env):
    kw = kwargs_for("word_qe", "reward.mode=off")
    before = scorer_env.items_by_model().get("xcomet_xl", 0)
    for split in ("train", "val"):
        out = score(loop, kw, split=split)
        assert out["xcomet"] is None and out["ok_ratio"] is None
    assert scorer_env.items_by_model().get("xcomet_xl", 0) == before
    assert kw["models"]["span"] is None  # and the verl config says so


def test_settings_refuse_what_cannot_work():
    cfg = _composed(("reward=comet",))
    bad = dict(cfg["reward"], weights={**cfg["reward"]["weights"], "comet": 1.0})
    with pytest.raises(RewardConfigError, match=r"reward.weights.comet=1.0 needs a reference-based COMET-DA"):
        reward_kwargs(bad, cfg["scorer"]["models"])
    bad = dict(cfg["reward"], clip={**cfg["reward"]["clip"], "kiwi": [1.0, 0.0]})
    with pytest.raises(RewardConfigError, match="reward.clip.kiwi: lower bound"):
        reward_kwargs(bad, cfg["scorer"]["models"])
    bad = dict(cfg["reward"], sentence_models=["nope"])
    with pytest.raises(RewardConfigError, match="scorer model 'nope'"):
        reward_kwargs(bad, cfg["scorer"]["models"])
    kw = kwargs_for("xcomet_xl")
    with pytest.raises(RewardConfigError, match="span model counts in training only with mode=train"):
        RewardSettings.from_kwargs(dict(kw, mode="eval"))


def test_a_bad_reward_setting_is_one_line_at_launch(tmp_path):
    from tests.launcher.conftest import launch

    out = launch(["reward=comet", "reward.weights.comet=1", "dry_run=true", f"paths.output_dir={tmp_path}",
                  f"paths.results_root={tmp_path}/r"])
    assert out.returncode == 2
    assert "reward.weights.comet=1.0 needs a reference-based COMET-DA model" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("reward", ["comet", "xcomet_xl", "word_qe"])
def test_score_bounds_of_the_shipped_groups(reward):
    s = RewardSettings.from_kwargs(kwargs_for(reward))
    assert score_bounds(s, validation=False)[0] == -3.0  # format failure
    assert score_bounds(s, validation=True) == (-3.0, 3.0)  # 1 + BLEU/100 + Kiwi, each clipped to [0, 1]
