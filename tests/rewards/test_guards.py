"""The reward guards (src/rewards/guards.py, issue 24): each on table cases, their settings, their
wiring into compute_score (a guarded answer is never sent to the QE service in training), and the
hack set (tests/fixtures/hack_set.py) held to the targets for the guards on by default: every
hacked kind caught >= 90%, no clean answer flagged."""
from __future__ import annotations

import json

import pytest
from hydra.errors import ConfigCompositionException

from src.data.terms import parse_terms
from src.rewards.compute import compute_score
from src.rewards.guards import NAMES, check, coverage_ratio, repeated_share, untranslated_share
from src.rewards.guards import read_guards
from src.rewards.settings import RewardConfigError
from tests.fixtures import hack_set
from tests.helpers.reward_config import composed, extra_info, kwargs_for

ZH = "孩子们在公园里踢足球，父母在旁边看着。"
EN = "The children are playing football in the park while their parents watch."


def _config(**enable) -> dict:
    """The default yaml's guards, with the given ones switched (all others off)."""
    cfg = json.loads(json.dumps(dict(composed(())["reward"]["guards"]), default=list))
    return {name: {**sub, "enable": bool(enable.get(name, False))} for name, sub in cfg.items()}


def _fired(guard: str, hyp: str, src: str, ref: str, pair: str, **extra) -> bool:
    cfg = _config(**{guard: True})
    cfg[guard].update(extra)
    s, t = pair.split("-")
    return guard in check(hyp, src, ref, s, t, read_guards(cfg)).fired()


@pytest.mark.parametrize("hyp,ref,pair,fired", [
    ("Les enfants jouent au football dans le parc pendant que leurs parents regardent.", EN, "zh-en", True),
    ("Die Kinder spielen im Park Fußball, während ihre Eltern zuschauen.", EN, "zh-en", True),
    ("子供たちは公園でサッカーをしていて、親はそばで見ている。", ZH, "en-zh", True),  # Han + kana: ja, not zh
    ("Die Kinder spielen im Park Fußball.", "", "zh-en", True),  # no reference: judged alone
    ("The kids play soccer in the park as their parents look on.", EN, "zh-en", False),
    ("孩子们在公园踢球，家长们在一旁观看。", ZH, "en-zh", False),
    ("Xi Jinping met Angela Merkel and Emmanuel Macron in Berlin.", "Xi Jinping met Angela Merkel and "
     "Emmanuel Macron in Berlin.", "zh-en", False),  # names only: nothing left to judge
    ("Merci beaucoup.", "Thank you very much.", "zh-en", False),  # too short to judge
    ("Das ist gut.", "Das ist gut.", "zh-en", False),  # the reference is German itself: exempt
    ("苹果在加州推出了新的iPhone 15。", "苹果在加州推出了新款iPhone 15。", "en-zh", False),
])
def test_wrong_language(hyp, ref, pair, fired):
    assert _fired("wrong_language", hyp, "源", ref, pair) is fired


def test_wrong_language_judges_only_targets_it_knows():
    french = "Les enfants jouent au football dans le parc pendant que leurs parents regardent."
    assert _fired("wrong_language", french, ZH, EN, "zh-en")
    assert not _fired("wrong_language", french, ZH, "", "zh-sw")  # sw is not in `languages`


@pytest.mark.parametrize("hyp,ref,pair,fired", [
    ("The kids play soccer in the park as their parents look on as their parents look on as their parents "
     "look on.", EN, "zh-en", True),
    ("孩子们在公园踢球，家长们在一旁观看，家长们在一旁观看，家长们在一旁观看。", ZH, "en-zh", True),
    ("the the the the the the the the the the", EN, "zh-en", True),
    ("Step by step, step by step, don't rush.", "Step by step, step by step, don't rush.", "zh-en", False),
    ("Red, blue, red, blue, red, blue: the flag's colours.", "Red, blue, red, blue, red, blue: the colours.",
     "zh-en", False),  # the reference repeats as much
    ("Run, run, run!", "Run, run, run!", "zh-en", False),  # too short to judge
    ("The kids play soccer in the park as their parents look on.", EN, "zh-en", False),
])
def test_repetition(hyp, ref, pair, fired):
    assert _fired("repetition", hyp, "源", ref, pair) is fired


def test_repeated_share():
    assert repeated_share("a b c a b c", 3) == pytest.approx(0.5)
    assert repeated_share("a b c d e f", 3) == 0.0
    assert repeated_share("一二三四一二三四", 4) == pytest.approx(0.5)  # zh/ja: characters


@pytest.mark.parametrize("hyp,src,ref,pair,fired", [
    ("The children are playing football 在公园里，父母在旁边看着。", ZH, EN, "zh-en", True),
    ("孩子们在公园里踢足球，while their parents watch。", EN, ZH, "en-zh", True),
    ("这只cat坐在mat上。", "The cat sat on the mat.", "这只猫坐在垫子上。", "en-zh", True),
    ("Die Kinder spielen im Park, while their parents watch.", EN, "Die Kinder spielen im Park, während "
     "ihre Eltern zuschauen.", "en-de", True),  # same script: words copied from the source
    ("去年中国的GDP增长了5.2%。", "China's GDP grew by 5.2 percent last year.", "中国去年的GDP增长了5.2%。",
     "en-zh", False),  # acronyms and numbers are kept in any language
    ("苹果推出了iPhone 15和5G套餐。", "Apple launched the iPhone 15 and a 5G plan.",
     "苹果发布了iPhone 15与5G套餐。", "en-zh", False),
    ("华为推出了Mate 60 Pro。", "Huawei launched the Mate 60 Pro.", "华为发布了Mate 60 Pro。", "en-zh",
     False),  # the reference keeps the words
    ("The symbol 福 means good fortune.", "福字代表好运。", "The character 福 stands for good fortune.",
     "zh-en", False),  # the reference keeps the character
    ("The kids play soccer in the park as their parents look on.", ZH, EN, "zh-en", False),
    ("Angela Merkel在巴黎会见了Emmanuel Macron。", "Angela Merkel met Emmanuel Macron in Paris.",
     "安格拉·默克尔在巴黎会见了埃马纽埃尔·马克龙。", "en-zh", False),  # the source's names kept in Latin letters
    ("Angela Merkel在巴黎会见了many people。", "Angela Merkel met many people in Paris.",
     "安格拉·默克尔在巴黎会见了许多人。", "en-zh", True),  # ... but not its other words
])
def test_code_mix(hyp, src, ref, pair, fired):
    assert _fired("code_mix", hyp, src, ref, pair) is fired


def test_untranslated_share_counts_tokens():
    share, count = untranslated_share("The cat 坐在 mat", "猫坐在垫子上", "The cat sat on the mat", "zh", "en")
    assert count == 2 and share == pytest.approx(2 / 5)  # 2 Han characters among 5 tokens


def test_length_coverage():
    half = "The children are playing."
    assert _fired("length_coverage", half, ZH, EN, "zh-en")
    assert _fired("length_coverage", EN + " " + EN, ZH, EN, "zh-en")  # over-translation
    assert not _fired("length_coverage", "The kids play soccer in the park as their parents look on.", ZH, EN,
                      "zh-en")
    # without a reference: skipped unless asked, then against the source times the pair's ratio
    assert not _fired("length_coverage", half, ZH, "", "zh-en")
    assert _fired("length_coverage", half, ZH, "", "zh-en", without_reference=True)
    # a name kept in Latin letters in a zh answer counts as 2 characters
    assert coverage_ratio("Merkel在巴黎。", "", "默克尔在巴黎。", "en", "zh") == pytest.approx((2 + 3 + 2) / (6 + 2))
    assert coverage_ratio("孩子们在踢球。", EN, "", "en", "zh") == pytest.approx((6 + 2) / (12 * 1.5 + 2))  # 12 words


def test_guards_off_are_not_computed_and_logged_as_none():
    g = check("Les enfants jouent au football dans le parc.", ZH, EN, "zh", "en", read_guards(_config()))
    assert g.fired() == () and g.flags() == {f"guard_{n}": None for n in NAMES}


def test_settings_of_a_verl_config_before_the_guards_turn_them_off():
    s = read_guards(None)
    assert s.enabled() == ()


@pytest.mark.parametrize("change,message", [
    (lambda c: c.update(speling={}), "reward.guards: unknown guard 'speling'"),
    (lambda c: c.update(repetition=False), "reward.guards.repetition is a group of settings, got False; to turn "
                                           "the guard off: reward.guards.repetition.enable=false"),
    (lambda c: c["repetition"].pop("margin"), "reward.guards.repetition lacks 'margin'"),
    (lambda c: c["code_mix"].update(max_shares=1), "reward.guards.code_mix has unknown key 'max_shares'"),
    (lambda c: c["code_mix"].update(enable="yes"), "reward.guards.code_mix.enable must be true or false"),
    (lambda c: c["wrong_language"].update(languages=["en", "klingon"]),
     "reward.guards.wrong_language.languages: 'klingon' is not a language"),
    (lambda c: c["wrong_language"].update(languages="en"), "must be a list of language codes"),
    (lambda c: c["repetition"].update(max_share=0), r"reward.guards.repetition.max_share must be in \(0, 1\]"),
    (lambda c: c["length_coverage"].update(min_ratio=1.2), "needs 0 < min_ratio < 1 < max_ratio"),
    (lambda c: c["repetition"].update(min_tokens=2.5), "reward.guards.repetition.min_tokens must be an integer"),
    (lambda c: c["code_mix"].update(penalty="low"), "reward.guards.code_mix.penalty must be a finite number"),
])
def test_bad_guard_settings_are_one_line(change, message):
    cfg = _config(wrong_language=True)
    change(cfg)
    with pytest.raises(RewardConfigError, match=message) as err:
        read_guards(cfg)
    assert "\n" not in str(err.value)


def test_bad_guard_setting_is_refused_when_the_kwargs_are_built():
    with pytest.raises(RewardConfigError, match="reward.guards.code_mix.max_share"):
        kwargs_for("comet", "reward.guards.code_mix.max_share=3")


def test_a_bool_in_place_of_a_guards_group_is_refused_at_composition_with_its_key():
    # the reward group's types (src/config/reward_schema.py); it crashed the builder once ("'bool' object is
    # not iterable"), and the builder still refuses it from kwargs built elsewhere (read_guards, above)
    with pytest.raises(ConfigCompositionException, match="reward.guards.repetition=false") as err:
        kwargs_for("comet", "reward.guards.repetition=false")
    assert "RepetitionSchema" in str(err.value.__cause__)


def test_guards_absent_from_the_kwargs_are_off():
    # reward kwargs written before a guard existed: that guard has no settings and is not computed
    s = read_guards({"repetition": {"enable": True, "penalty": -1.0, "max_share": 0.3, "margin": 0.2,
                                    "min_tokens": 8}})
    assert s.enabled() == ("repetition",) and s.wrong_language is None and not s.on("length_coverage")


FRENCH = "<think>ok</think><translate>Les enfants jouent au football dans le parc pendant que leurs parents " \
         "regardent.</translate>"


@pytest.mark.parametrize("reward", ["comet", "xcomet_xl", "word_qe"])
def test_a_guarded_answer_scores_the_penalty_without_a_scorer_call(reward, loop, no_scorer_env):
    kw = kwargs_for(reward, "reward.guards.wrong_language.penalty=-1.5")
    out = loop.run_until_complete(compute_score("wmt/zh-en", FRENCH, EN, extra_info(ZH), **kw))
    assert out["guard_wrong_language"] == 1.0 and out["guard_repetition"] == 0.0 and out["guard_code_mix"] == 0.0
    assert out["guard_length_coverage"] is None  # off by default: not computed
    assert out["answer"] == -1.5 and out["score"] == 1.0 - 1.5
    assert all(v == 0.0 for k, v in out.items() if k.startswith("degenerate_"))
    assert out["kiwi"] is None and out["bleu"] is None


def test_a_switched_off_guard_lets_the_answer_reach_the_scorer(loop, no_scorer_env):
    kw = kwargs_for("comet", "reward.guards.wrong_language.enable=false")
    with pytest.raises(Exception, match="QE_SCORER_URL is not set"):
        loop.run_until_complete(compute_score("wmt/zh-en", FRENCH, EN, extra_info(ZH), **kw))


def test_the_lowest_penalty_applies_across_degenerate_and_guards(loop, no_scorer_env):
    # the zh source copied into an en answer: a source copy (-1), the wrong script (-1), code-mixing
    kw = kwargs_for("comet", "reward.guards.code_mix.penalty=-1.7")
    out = loop.run_until_complete(compute_score(
        "wmt/zh-en", f"<think>a</think><translate>{ZH}</translate>", EN, extra_info(ZH), **kw))
    assert out["degenerate_source_copy"] == 1.0 and out["guard_code_mix"] == 1.0
    assert out["answer"] == -1.7


# ----------------------------------------------------------------------------------------------
# the hack set
# ----------------------------------------------------------------------------------------------
def test_the_hack_set_file_is_written_from_its_module():
    want = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in hack_set.rows())
    assert hack_set.OUT.read_text(encoding="utf-8") == want, "run: .venv/bin/python -m tests.fixtures.hack_set"


def test_the_hack_set_covers_both_directions_and_every_kind():
    rows = hack_set.rows()
    for pair in ("zh-en", "en-zh"):
        kinds = {r["kind"] for r in rows if r["lang_pair"] == pair}
        assert kinds == set(hack_set.CLEAN_KINDS) | set(hack_set.HACK_KINDS)
    assert len({r["id"] for r in rows}) == len(rows)


def test_default_guards_meet_the_targets_on_the_hack_set():
    """For each guard on by default: >= 90% of its kind caught; no clean answer flagged by any."""
    cfg = json.loads(json.dumps(dict(composed(())["reward"]["guards"]), default=list))
    s = read_guards(cfg)
    on = s.enabled()
    assert {"wrong_language", "repetition", "code_mix"} <= set(on)
    rows = hack_set.rows()
    caught: dict[str, list[bool]] = {}
    flagged_clean = []
    for r in rows:
        src, tgt = r["lang_pair"].split("-")
        fired = check(r["hyp"], r["src"], r["ref"], src, tgt, s, parse_terms(r.get("terms"), src, tgt)).fired()
        if r["kind"] in hack_set.CLEAN_KINDS:
            if fired:
                flagged_clean.append((r["id"], fired))
        elif r["guard"] in on:
            caught.setdefault(r["kind"], []).append(r["guard"] in fired)
    assert flagged_clean == []
    assert set(caught) == {k for k, g in hack_set.HACK_KINDS.items() if g in on}
    for kind, hits in caught.items():
        assert sum(hits) / len(hits) >= 0.9, f"{kind}: {sum(hits)}/{len(hits)} caught"


def test_every_language_prepare_accepts_is_one_the_guard_can_judge():
    """Issue 51 (finding 1): the one list of languages (src/data/templates.py) is what the identifier
    chooses among by default, so each must be a language py3langid knows and have its script."""
    from src.data.templates import LANGUAGE_NAMES
    from src.rewards.languages import SCRIPTS
    from src.rewards.lid import known_languages

    assert read_guards(_config(wrong_language=True)).wrong_language.languages == tuple(LANGUAGE_NAMES)
    assert [lang for lang in LANGUAGE_NAMES if lang not in known_languages() or lang not in SCRIPTS] == []


# ----------------------------------------------------------------------------------------------
# term stuffing (issue 46): a guard added as one registered class and one yaml entry
# ----------------------------------------------------------------------------------------------
def test_term_stuffing_on_the_hack_set_catches_its_kinds_and_no_clean_answer():
    s = read_guards(_config(term_stuffing=True))
    assert s.enabled() == ("term_stuffing",)
    caught: dict[str, list[bool]] = {}
    for r in hack_set.rows():
        src, tgt = r["lang_pair"].split("-")
        fired = "term_stuffing" in check(r["hyp"], r["src"], r["ref"], src, tgt, s,
                                         parse_terms(r.get("terms"), src, tgt)).fired()
        if r["kind"] in hack_set.CLEAN_KINDS:
            assert not fired, r["id"]
        elif r["guard"] == "term_stuffing":
            caught.setdefault(r["kind"], []).append(fired)
    assert set(caught) == {"term_repeated", "term_list"} and all(len(v) >= 10 for v in caught.values())
    for kind, hits in caught.items():
        assert sum(hits) / len(hits) >= 0.9, f"{kind}: {sum(hits)}/{len(hits)} caught"


@pytest.mark.parametrize("hyp, src, ref, terms, fired", [
    # the term once for its once in the source, the reference saying it twice, no reference
    ("Our machine learning model is good.", "我们的机器学习模型很好。", EN, [("机器学习", "machine learning")], False),
    ("machine learning, machine learning: we like it", "机器学习，机器学习", "machine learning, machine learning",
     [("机器学习", "machine learning")], False),
    ("machine learning machine learning machine learning", "我们的机器学习模型很好。", "",
     [("机器学习", "machine learning")], True),
    # one term short of the whole answer: the source is as much terms (a glossary entry translated)
    ("Machine learning", "机器学习", "", [("机器学习", "machine learning")], False),
    # terms it does not require (not in the source) are never stuffing
    ("cat cat cat cat", "我们的机器学习模型很好。", "", [("猫", "cat")], False),
])
def test_term_stuffing_cases(hyp, src, ref, terms, fired):
    got = check(hyp, src, ref, "zh", "en", read_guards(_config(term_stuffing=True)), parse_terms(terms, "zh", "en"))
    assert ("term_stuffing" in got.fired()) is fired


def test_term_stuffing_is_in_a_run_only_with_the_term_reward():
    # without the term reward: not in the reward kwargs, so no flag in any result, every other run's verl config as it was
    off = kwargs_for("comet")
    assert "term_stuffing" not in off["guards"] and set(off["guards"]) == set(NAMES) - {"term_stuffing"}
    assert "term_stuffing" not in kwargs_for("comet", "data.template=chat_terms")["guards"]  # logged, not trained
    on = kwargs_for("comet", "reward.weights.term=0.5")
    assert on["guards"]["term_stuffing"] == {"enable": True, "penalty": -1.0, "max_share": 0.6, "max_extra": 1}
    off_by_hand = kwargs_for("comet", "reward.weights.term=0.5", "reward.guards.term_stuffing.enable=false")
    assert off_by_hand["guards"]["term_stuffing"]["enable"] is False


def test_a_stuffed_answer_scores_the_penalty_without_a_scorer_call(loop, no_scorer_env):
    kw = kwargs_for("comet", "reward.weights.term=1", "reward.guards.term_stuffing.penalty=-1.3")
    info = extra_info("会议将于明天上午九点在北京举行。", terms=[{"src": "北京", "tgt": "Beijing"}])
    out = loop.run_until_complete(compute_score("wmt/zh-en", "<think>x</think><translate>Beijing.</translate>",
                                                "The meeting will be held in Beijing at nine tomorrow morning.", info,
                                                **kw))
    assert out["guard_term_stuffing"] == 1.0 and out["answer"] == -1.3 and out["kiwi"] is None
    # a run without it has no such key: its results keep the keys they had
    plain = loop.run_until_complete(compute_score("wmt/zh-en", "<think>x</think><translate>Beijing.</translate>",
                                                  "The meeting will be held in Beijing at nine tomorrow morning.",
                                                  info, **kwargs_for("comet", "reward.guards.length_coverage.enable=true")))
    assert "guard_term_stuffing" not in plain and plain["guard_length_coverage"] == 1.0
