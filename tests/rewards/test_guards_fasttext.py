"""reward.guards.wrong_language.model: the anchors' fastText LID models (OpenLID-v2, GlotLID) instead of
py3langid (src/rewards/guards.py, issue 24). The model here is a real fastText supervised model, tiny,
trained in this module from sentences it writes, its labels in the OpenLID/GlotLID format
(__label__eng_Latn); Toki Pona (tok_Latn), which py3langid does not know, shows the guard asks the
fastText model and not py3langid."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from src.rewards.compute import compute_score
from src.rewards.guards import read_guards
from src.rewards.group_kwargs import reward_kwargs
from src.rewards.guards import check, identify
from src.rewards.lid import fasttext_lid, known_languages, lid_code
from src.rewards.settings import RewardConfigError
from tests import launch_server
from tests.helpers.reward_config import composed, extra_info, kwargs_for

ZH = "孩子们在公园里踢足球，父母在旁边看着。"
EN = "The children are playing football in the park while their parents watch."
FRENCH = "Les enfants jouent au football dans le parc pendant que leurs parents regardent."
TOKI_PONA = "jan lili li musi lon ma kasi. mama ona li lukin pona e ona."

# words each language's generated sentences draw from (subject, verb, object, place)
WORDS = {
    "eng_Latn": (["the children", "my mother", "our teacher", "the old man", "a young woman", "their parents"],
                 ["are playing", "is reading", "watches", "likes", "is buying", "found"],
                 ["football", "a new book", "the red car", "some bread", "the small dog", "their house"],
                 ["in the park", "at home", "near the river", "in the city", "after school", "every morning"]),
    "fra_Latn": (["les enfants", "ma mère", "notre professeur", "le vieil homme", "une jeune femme", "leurs parents"],
                 ["jouent", "lit", "regarde", "aime", "achète", "a trouvé"],
                 ["au football", "un nouveau livre", "la voiture rouge", "du pain", "le petit chien", "leur maison"],
                 ["dans le parc", "à la maison", "près de la rivière", "en ville", "après l'école", "chaque matin"]),
    "deu_Latn": (["die Kinder", "meine Mutter", "unser Lehrer", "der alte Mann", "eine junge Frau", "ihre Eltern"],
                 ["spielen", "liest", "sieht", "mag", "kauft", "fand"],
                 ["Fußball", "ein neues Buch", "das rote Auto", "etwas Brot", "den kleinen Hund", "ihr Haus"],
                 ["im Park", "zu Hause", "am Fluss", "in der Stadt", "nach der Schule", "jeden Morgen"]),
    "tok_Latn": (["jan lili", "mama mi", "jan sona", "jan suli", "meli lili", "mama ona"],
                 ["li musi e", "li lukin e", "li olin e", "li esun e", "li pali e", "li moku e"],
                 ["sike", "lipu sin", "tomo tawa loje", "pan", "soweli lili", "tomo ona"],
                 ["lon ma kasi", "lon tomo", "lon poka telo", "lon ma tomo", "tenpo suno ale", "tenpo pimeja"]),
    # two labels for one code: the guard sums them (both are zh)
    "zho_Hans": (["孩子们", "我的母亲", "我们的老师", "那位老人", "一位年轻女子", "他们的父母"],
                 ["在踢", "在读", "看着", "喜欢", "在买", "找到了"],
                 ["足球", "一本新书", "那辆红色的汽车", "一些面包", "那只小狗", "他们的房子"],
                 ["在公园里", "在家里", "在河边", "在城市里", "放学后", "每天早上"]),
    "zho_Hant": (["孩子們", "我的母親", "我們的老師", "那位老人", "一位年輕女子", "他們的父母"],
                 ["在踢", "在讀", "看著", "喜歡", "在買", "找到了"],
                 ["足球", "一本新書", "那輛紅色的汽車", "一些麵包", "那隻小狗", "他們的房子"],
                 ["在公園裡", "在家裡", "在河邊", "在城市裡", "放學後", "每天早上"]),
    "jpn_Jpan": (["子供たちは", "私の母は", "先生は", "おじいさんは", "若い女性は", "両親は"],
                 ["遊んでいる", "読んでいる", "見ている", "好きだ", "買っている", "見つけた"],
                 ["サッカーを", "新しい本を", "赤い車を", "パンを", "小さい犬を", "家を"],
                 ["公園で", "家で", "川の近くで", "町で", "放課後に", "毎朝"]),
}
LINES_PER_LABEL = 300


def _sentence(rng: random.Random, label: str) -> str:
    subj, verb, obj, place = (rng.choice(part) for part in WORDS[label])
    if label == "jpn_Jpan":
        return f"{subj}{place}{obj}{verb}。"
    if label.startswith("zho"):
        return f"{subj}{place}{verb}{obj}。"
    return f"{subj} {verb} {obj} {place}."


@pytest.fixture(scope="module")
def lid_model(tmp_path_factory) -> str:
    """A fastText LID model in the OpenLID-v2/GlotLID label format, trained here (about a second)."""
    rng = random.Random(0)
    folder = tmp_path_factory.mktemp("lid")
    train = folder / "train.txt"
    lines = [f"__label__{label} {_sentence(rng, label)}" for label in WORDS for _ in range(LINES_PER_LABEL)]
    rng.shuffle(lines)
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # character n-grams as OpenLID/GlotLID use (minn/maxn), a small dim and bucket: a ~1 MB model.
    # Trained in a process of its own: inside the full test run (after torch and friends were loaded in
    # this process) fastText's training loss went NaN at lr 0.5; a fresh interpreter and a lower lr
    # give the same model every time.
    path = folder / "model.bin"
    code = ("import sys, fasttext; m = fasttext.train_supervised(sys.argv[1], dim=16, epoch=50, lr=0.2, minn=1, "
            "maxn=4, bucket=20000, thread=1, seed=0, verbose=0); m.save_model(sys.argv[2])")
    done = subprocess.run([sys.executable, "-c", code, str(train), str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return str(path)


def _config(model: str | None, languages=("en", "fr", "de", "zh", "ja", "tok")) -> dict:
    """The default yaml's guards with only wrong_language on, using `model`."""
    cfg = json.loads(json.dumps(dict(composed(())["reward"]["guards"]), default=list))
    cfg = {name: {**sub, "enable": name == "wrong_language"} for name, sub in cfg.items()}
    cfg["wrong_language"].update(model=model, languages=list(languages))
    return cfg


def _fired(hyp: str, ref: str, pair: str, model: str | None, **kw) -> bool:
    s, t = pair.split("-")
    return "wrong_language" in check(hyp, ZH, ref, s, t, read_guards(_config(model, **kw))).fired()


@pytest.mark.parametrize("label,code", [
    ("__label__eng_Latn", "en"), ("__label__fra_Latn", "fr"), ("__label__deu_Latn", "de"),
    ("__label__jpn_Jpan", "ja"), ("__label__kor_Hang", "ko"), ("__label__rus_Cyrl", "ru"),
    ("__label__zho_Hans", "zh"), ("__label__zho_Hant", "zh"), ("__label__cmn_Hani", "zh"),  # GlotLID: Mandarin
    ("__label__arb_Arab", "ar"), ("__label__pes_Arab", "fa"), ("__label__zsm_Latn", "ms"),  # macrolanguages
    ("__label__nob_Latn", "nb"), ("__label__ekk_Latn", "et"),
    ("__label__yue_Hant", "yue"), ("__label__tok_Latn", "tok"),  # no ISO 639-1 code: kept
])
def test_labels_map_to_the_projects_codes(label, code):
    assert lid_code(label) == code


def test_the_model_knows_its_labels_codes(lid_model):
    assert known_languages(lid_model) == ["de", "en", "fr", "ja", "tok", "zh"]
    assert fasttext_lid(lid_model) is fasttext_lid(lid_model)  # loaded once per process


def test_a_french_answer_for_an_english_target_is_caught(lid_model):
    assert _fired(FRENCH, EN, "zh-en", lid_model)
    assert _fired("Die Kinder spielen im Park Fußball, während ihre Eltern zuschauen.", EN, "zh-en", lid_model)
    assert not _fired("The kids play football in the park while their parents are watching.", EN, "zh-en", lid_model)
    assert not _fired("孩子们在公园里踢足球，父母在一旁看着。", ZH, "en-zh", lid_model)
    assert _fired("子供たちは公園でサッカーをして、両親は見ている。", ZH, "en-zh", lid_model)  # ja for zh


def test_the_guard_asks_the_fasttext_model_not_py3langid(lid_model):
    # Toki Pona is a language only the fastText model knows: py3langid's settings refuse it
    assert _fired(TOKI_PONA, EN, "zh-en", lid_model, languages=("en", "tok"))
    with pytest.raises(RewardConfigError, match="'tok' is not a language the identifier knows \\(py3langid"):
        read_guards(_config(None, languages=("en", "tok")))
    s = read_guards(_config(lid_model, languages=("en", "tok")))
    code, prob = identify(TOKI_PONA, "en", s.wrong_language)
    assert code == "tok" and prob >= s.wrong_language.min_confidence


def test_labels_of_one_code_are_summed_and_renormalised_over_languages(lid_model):
    ft = fasttext_lid(lid_model)
    text = "孩子們在公园里踢足球"  # simplified and traditional characters: both zh labels get a share
    labels, probs = ft.model.predict(text, k=-1)
    p = dict(zip(labels, map(float, probs)))
    zh = p["__label__zho_Hans"] + p["__label__zho_Hant"]
    assert min(p["__label__zho_Hans"], p["__label__zho_Hant"]) > 0.05
    code, prob = ft.classify(text, ("en", "fr", "de", "zh", "ja", "tok"))
    assert code == "zh" and prob == pytest.approx(zh / sum(p.values()), rel=1e-5)
    code, prob = ft.classify(text, ("zh", "ja"))
    assert code == "zh" and prob == pytest.approx(zh / (zh + p["__label__jpn_Jpan"]), rel=1e-5)


def test_the_option_reaches_the_reward_workers(lid_model, loop, no_scorer_env):
    # the kwargs verl's reward workers get: the French answer is condemned without a scorer call
    kw = kwargs_for("comet", f"reward.guards.wrong_language.model={lid_model}",
                    "reward.guards.wrong_language.languages=[en,fr,de,zh,ja]")
    assert kw["guards"]["wrong_language"]["model"] == lid_model
    answer = f"<think>ok</think><translate>{FRENCH}</translate>"
    out = loop.run_until_complete(compute_score("wmt/zh-en", answer, EN, extra_info(ZH), **kw))
    assert out["guard_wrong_language"] == 1.0 and out["kiwi"] is None


def test_a_relative_model_path_is_under_the_checkout(lid_model, tmp_path):
    cfg = composed(("reward=comet", "reward.guards.wrong_language.model=lid/model.bin",
                     "reward.guards.wrong_language.languages=[en,fr]"))
    (tmp_path / "lid").mkdir()
    (tmp_path / "lid" / "model.bin").write_bytes(open(lid_model, "rb").read())
    kw = reward_kwargs(cfg["reward"], cfg["scorer"]["models"], root=tmp_path)
    assert kw["guards"]["wrong_language"]["model"] == str(tmp_path / "lid" / "model.bin")


@pytest.mark.parametrize("content,message", [
    (None, "reward.guards.wrong_language.model: {path} not found; put an OpenLID-v2 or GlotLID fastText .bin"),
    (lambda model: b"__label__eng_Latn hello\n", "reward.guards.wrong_language.model: {path} is not a fastText model ("),
    # cut short (an interrupted download): fastText's own loader would hang on the first, read zeros on the others
    (lambda model: model[:100], "reward.guards.wrong_language.model: {path} is not a complete fastText model (its 100 "),
    (lambda model: model[:len(model) // 2], "reward.guards.wrong_language.model: {path} is not a complete fastText"),
    (lambda model: model[:-1], "reward.guards.wrong_language.model: {path} is not a complete fastText model"),
])
def test_a_missing_or_corrupt_model_is_one_line(lid_model, tmp_path, content, message):
    path = tmp_path / "openlid-v2.bin"
    if content is not None:
        path.write_bytes(content(open(lid_model, "rb").read()))
    with pytest.raises(RewardConfigError) as err:
        kwargs_for("comet", f"reward.guards.wrong_language.model={path}")
    assert str(err.value).startswith(message.format(path=path)) and "\n" not in str(err.value)


def test_a_missing_model_is_refused_by_the_launcher(tmp_path):
    missing = tmp_path / "glotlid" / "model.bin"
    out = tmp_path / "out"
    res = launch_server.launch(["reward=comet", f"reward.guards.wrong_language.model={missing}",
                                f"paths.output_dir={out}", "dry_run=true"], env=dict(os.environ),
                               cwd=composed(())["paths"]["root_dir"])
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: reward.guards.wrong_language.model: {missing} not found")
    assert not out.exists()
