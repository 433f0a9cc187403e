"""reward=metricx and MetricX-24 as a held-out validation metric, end to end (issue 25 part 2): verl's
own reward managers, built from the verl config the launcher writes, call compute_score against the
real QE service serving the tiny random MetricX-24 (src/tiny_models/metricx.py, built with the tiny
COMET models by `python -m src.tiny_models qe`) beside the tiny CometKiwi. Every number is checked
against what the service itself answers for the same item: the raw MetricX score (0-25, lower is
better) is logged, 1 - score/25 is what the reward adds."""
from __future__ import annotations

import json

import pytest

from tests.helpers.reward_config import extra_info, kwargs_for
from tests.helpers.reward_example import MT, REF, RESPONSE, SRC, bleu, check_common, clip01
from tests.helpers.scorer_service import METRICX_MODEL, TOKEN
from tests.helpers.verl_reward_harness import manager, run, sample


def metricx_of(svc, ref: str | None = None) -> float:
    """The raw MetricX-24 score the service gives MT (QE mode; reference mode with `ref`)."""
    return svc.results(METRICX_MODEL, [{"src": SRC, "mt": MT, **({"ref": ref} if ref else {})}])[0]["score"]


def kiwi_of(svc) -> float:
    return svc.results("cometkiwi_da", [{"src": SRC, "mt": MT}])[0]["score"]


@pytest.mark.parametrize("algo", ["grpo", "dapo"])
def test_metricx_group_training_row_through_verls_manager(tokenizer, metricx_env, algo):
    mgr = manager(tokenizer, "reward=metricx", f"algo={algo}")
    before = metricx_env.items_by_model()
    info = extra_info(SRC)
    extra = check_common(run(mgr, sample(tokenizer, RESPONSE, info)), info)
    after = metricx_env.items_by_model()
    assert after.get(METRICX_MODEL, 0) == before.get(METRICX_MODEL, 0) + 1  # one item, for this answer
    assert after.get("cometkiwi_da", 0) == before.get("cometkiwi_da", 0)
    raw = metricx_of(metricx_env)  # QE mode: source + translation
    assert 0.0 < raw < 25.0 and raw != metricx_of(metricx_env, REF)  # a score the two modes tell apart
    assert extra["metricx"] == pytest.approx(raw, abs=1e-4)  # logged raw: 0-25, lower is better
    # format 1 + (1 - MetricX/25): the transform, clipped to [0, 1]
    assert extra["score"] == pytest.approx(1.0 + clip01(1.0 - raw / 25.0), abs=1e-4)
    assert extra["kiwi"] is None  # not in the training reward: not asked


def test_metricx_group_validation_row_logs_both_and_scores_the_validation_reward(tokenizer, metricx_env):
    mgr = manager(tokenizer, "reward=metricx", "algo=grpo")
    info = extra_info(SRC, split="val")
    extra = check_common(run(mgr, sample(tokenizer, RESPONSE, info)), info)
    kiwi, raw = kiwi_of(metricx_env), metricx_of(metricx_env)
    assert extra["kiwi"] == pytest.approx(kiwi, abs=1e-4) and extra["metricx"] == pytest.approx(raw, abs=1e-4)
    # the validation reward is every group's (format + CometKiwi + BLEU); MetricX is logged beside it
    assert extra["score"] == pytest.approx(1.0 + bleu() / 100 + clip01(kiwi), abs=1e-4)


def test_reference_mode_sends_the_reference(loop, metricx_env):
    from src.rewards.compute import compute_score

    kw = kwargs_for("metricx", "reward.metricx.reference=true")
    assert kw["metricx"] == {"reference": True}
    out = loop.run_until_complete(compute_score("wmt_zh_en/zh-en", RESPONSE, REF, extra_info(SRC), **kw))
    assert out["metricx"] == pytest.approx(metricx_of(metricx_env, REF), abs=1e-4)
    # a row without a reference is scored in QE mode (an empty `ref` is not sent)
    out = loop.run_until_complete(compute_score("wmt_zh_en/zh-en", RESPONSE, "", extra_info(SRC), **kw))
    assert out["metricx"] == pytest.approx(metricx_of(metricx_env), abs=1e-4)


def test_metricx_held_out_in_another_groups_validation(tokenizer, metricx_env):
    """reward=comet trains on CometKiwi; MetricX-24 in validation_models is logged at validation with
    weight 0 (held out: the report sets it beside kiwi) and never asked on training rows."""
    overrides = ("reward=comet", "algo=grpo", f"reward.validation_models=[cometkiwi_da,{METRICX_MODEL}]")
    mgr = manager(tokenizer, *overrides)
    before = metricx_env.items_by_model().get(METRICX_MODEL, 0)
    train = run(mgr, sample(tokenizer, RESPONSE, extra_info(SRC)))["reward_extra_info"]
    assert train["metricx"] is None and metricx_env.items_by_model().get(METRICX_MODEL, 0) == before
    kiwi = kiwi_of(metricx_env)
    assert train["score"] == pytest.approx(1.0 + bleu() / 100 + clip01(kiwi), abs=1e-4)
    val = run(mgr, sample(tokenizer, RESPONSE, extra_info(SRC, split="val")))["reward_extra_info"]
    assert val["metricx"] == pytest.approx(metricx_of(metricx_env), abs=1e-4)
    assert val["score"] == pytest.approx(1.0 + bleu() / 100 + clip01(kiwi), abs=1e-4)  # weight 0: not in it
    assert set(train) == set(val)  # verl stacks key by key


def test_inspect_explains_a_metricx_reward(metricx_service, tmp_path, monkeypatch, capsys):
    """`python -m src.evaluate.inspect_reward reward=metricx`: the training reward of given translations, with
    the raw MetricX-24 score the service gives each (QE mode) and 1 + (1 - score/25) as the score."""
    from src.evaluate import inspect_reward as tool

    for key in ("QE_SCORER_URL", "QE_SCORER_LOG", "QE_REWARD_COMPONENTS_DIR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("QE_SCORER_TOKEN", TOKEN)
    rows = tmp_path / "in.jsonl"
    rows.write_text(json.dumps({"id": "a", "src": SRC, "lang_pair": "zh-en", "hyp": MT, "ref": REF}) + "\n",
                    encoding="utf-8")
    out = tmp_path / "out.jsonl"
    rc = tool.main(["--input", str(rows), "--out", str(out), "reward=metricx", f"scorer_url={metricx_service.url}"])
    assert rc == 0, capsys.readouterr().err
    (got,) = [json.loads(l) for l in out.read_text(encoding="utf-8").splitlines()]
    raw = metricx_of(metricx_service)
    assert got["components"]["metricx"] == pytest.approx(raw, abs=1e-4)
    assert got["score"] == pytest.approx(1.0 + clip01(1.0 - raw / 25.0), abs=1e-4)


def test_fuzz_metricx_scores_stay_finite_and_in_range(loop, metricx_env):
    """The fuzz set of tests/rewards/test_fuzz.py (random unicode, control characters, tag soup, huge
    responses) against reward=metricx: a finite score inside the configured range, a raw MetricX-24 in
    [0, 25] wherever it was computed, and a fair share that reached the service."""
    from tests.helpers.reward_fuzz import fuzz

    def in_range(out):
        assert out["metricx"] is None or 0.0 <= out["metricx"] <= 25.0

    kw = kwargs_for("metricx")
    before = metricx_env.items_by_model().get(METRICX_MODEL, 0)
    seen = fuzz(loop, kw, max_examples=700, also=in_range)
    assert len(seen) >= 500
    assert sum(1 for o in seen if o["metricx"] is not None) >= 20
    assert metricx_env.items_by_model().get(METRICX_MODEL, 0) - before >= 20
