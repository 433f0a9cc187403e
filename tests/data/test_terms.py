"""Terminology data (issue 46, items 1-3): terms read in every input form, matched in text as a reader would, kept in
the verl parquet, given in the prompt by the *_terms templates, counted in prepare's stats, and measured (term success
rate, term consistency)."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from src.data import terms
from src.data.prepare import main
from src.data.templates import TEMPLATES, build_prompt, expected_format, parse_prompt
from src.data.terms import Term, TermsError, parse_terms

ML_ZH = Term("机器学习", "machine learning")


@pytest.mark.parametrize("term, text, found", [
    ("GPU", "我们的GPU很快", True),             # a Latin term inside Chinese text: no spaces around it
    ("GPU", "two GPUs", False),                 # inside a longer word
    ("GPU", "the GPU's fan", True),
    ("cat", "a category", False),
    ("cat", "Cat!", True),                      # case
    ("ＧＰＵ", "gpu", True),                     # width: full-width letters read as half-width
    ("人工智能", "人工 智能 很 重要", True),       # tokenised Chinese
    ("智能", "人工智能", True),                  # CJK: a substring
    ("machine learning", "Machine  learning rocks", True),
    ("machine learning", "machine-learning", False),
    ("state-of-the-art", "a state-of-the-art model", True),
    ("COVID-19", "COVID-19疫情", True),
])
def test_a_term_is_found_as_a_reader_would_find_it(term, text, found):
    assert terms.appears(term, text) is found


def test_terms_are_read_in_each_form_and_bad_ones_refused():
    assert parse_terms([{"src": "猫", "tgt": "cat"}], "zh", "en") == (Term("猫", "cat"),)
    # WMT23's hints: keyed by language
    assert parse_terms([{"zh": "猫", "en": "cat"}], "zh", "en") == (Term("猫", "cat"),)
    assert parse_terms('[["猫", "cat"], ["猫", "cat"]]', "zh", "en") == (Term("猫", "cat"),)  # once
    assert parse_terms("", "zh", "en") == parse_terms(None, "zh", "en") == parse_terms("[]", "zh", "en") == ()
    for bad, says in ([{"de": "Katze", "en": "cat"}], "src and tgt keys (or zh and en)"), (
            [{"src": "猫", "tgt": " "}], "non-empty text"), ("{oops", "not JSON"), ({"src": "a"}, "a list of terms"), (
            ["cat"], "[source, target]"):
        with pytest.raises(TermsError, match=says.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
            parse_terms(bad, "zh", "en")


def test_a_glossary_gives_each_source_its_longest_entries():
    glossary = [Term("learning", "学习"), Term("machine learning", "机器学习"), Term("cat", "猫"),
                Term("Cat", "猫咪")]
    assert terms.match_glossary("Machine learning for a cat", glossary) == (
        Term("machine learning", "机器学习"), Term("cat", "猫"))
    assert terms.match_glossary("a category", glossary) == ()


def test_term_success_and_consistency_count_what_the_docstring_says():
    cat, dog = Term("猫", "cat"), Term("狗", "dog")
    rows = [((cat,), "一只猫", "a cat"), ((dog,), "一只狗", "a hound"), ((cat, dog), "猫", "a cat"),
            ((cat,), "猫猫", "a kitten"), ((), "鸟", "a bird")]
    # required: cat, dog, cat (dog is not in "猫": not required there), cat -> 2 of 4 found
    assert terms.success(rows) == (0.5, 4)
    # 猫 is required in three segments and missed in one: inconsistent; 狗 once: not counted
    assert terms.consistency(rows) == (0.0, 1)
    assert terms.consistency(rows[:1] + rows[2:3]) == (1.0, 1)
    assert terms.success([((), "x", "y")]) == (None, 0) and terms.consistency([]) == (None, 0)


@pytest.mark.parametrize("src, src_lang, tgt_lang, term", [
    ("我们的机器学习模型很好。", "zh", "en", ML_ZH),
    ("Our machine learning model is good.", "en", "zh", ML_ZH.reversed()),
])
@pytest.mark.parametrize("template", [t for t in TEMPLATES if t.endswith("_terms")])
def test_a_terms_template_gives_the_terms_before_the_source_in_both_directions(template, src, src_lang, tgt_lang, term):
    plain = template.removesuffix("_terms")
    assert expected_format(template) == expected_format(plain)
    with_terms = build_prompt(template, src, src_lang, tgt_lang, (term,))
    last = with_terms[-1]["content"]
    assert f"Required terminology: {term.src} -> {term.tgt}\n" in last
    # the source still ends the prompt, so the validation dumps' parser reads it back
    assert parse_prompt(last) == (src, src_lang, tgt_lang)
    # without terms, or with the plain template, the prompt is the plain template's
    assert build_prompt(template, src, src_lang, tgt_lang) == build_prompt(plain, src, src_lang, tgt_lang) == \
        build_prompt(plain, src, src_lang, tgt_lang, (term,))


WMT23 = [  # the WMT23 terminology task's rows (zouharvi/wmt-terminology-2023): src, ref, langs, hints
    {"src": "我们的机器学习模型很好。", "ref": "Our machine learning model is good.", "langs": "zh-en",
     "hints": {"term": [{"zh": "机器学习", "en": "machine learning"}], "rand": [{"zh": "模型", "en": "model"}]}},
    {"src": "猫在睡觉。", "ref": "The cat is sleeping.", "langs": "zh-en",
     "hints": {"term": [], "rand": [{"zh": "猫", "en": "cat"}]}},
]


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def _prepare(tmp_path, tokenizer, template, *args):
    out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}.parquet"
    rc = main(["--split", "test", "--template", template, "--tokenizer", str(tokenizer), "--out", str(out), *args])
    return rc, out


def _infos(path):
    return [row["extra_info"] for row in pq.read_table(path).to_pylist()]


def test_wmt23_hints_each_setting_kept_in_the_parquet_and_counted(tmp_path, tiny_tokenizer_dir, capsys):
    data = _jsonl(tmp_path / "wmt23.jsonl", WMT23)
    rc, out = _prepare(tmp_path, tiny_tokenizer_dir, "chat_terms", "--input", str(data), "--terms-hints", "term")
    assert rc == 0
    assert [i["terms"] for i in _infos(out)] == [[{"src": "机器学习", "tgt": "machine learning"}], []]
    printed = capsys.readouterr().out
    assert "terms zh-en: 1 of 2 segments carry terms, 1 terms (at most 1 a segment), 0 not found in their source" \
        in printed
    stats = json.loads(out.with_suffix(".stats.json").read_text())
    assert stats["directions"]["zh-en"]["terms"] == {"segments": 2, "segments_with_terms": 1, "terms": 1,
                                                     "max_per_segment": 1, "not_in_source": 0}
    prompts = [row["prompt"][-1]["content"] for row in pq.read_table(out).to_pylist()]
    assert prompts[0].startswith("Required terminology: 机器学习 -> machine learning\n") and "Required" not in prompts[1]

    rc, out = _prepare(tmp_path, tiny_tokenizer_dir, "rl_terms", "--input", str(data), "--terms-hints", "rand")
    assert rc == 0 and [len(i["terms"]) for i in _infos(out)] == [1, 1]
    # the same data without terms in its prompt: the plain template, the terms still kept for the metrics
    rc, out = _prepare(tmp_path, tiny_tokenizer_dir, "chat", "--input", str(data), "--terms-hints", "term")
    assert rc == 0 and _infos(out)[0]["terms"] and "terminology" not in str(pq.read_table(out).to_pylist()[0]["prompt"])
    # no --terms-hints: the file's hints are not read, and nothing is written of terms
    rc, out = _prepare(tmp_path, tiny_tokenizer_dir, "chat", "--input", str(data))
    assert rc == 0 and "terms" not in _infos(out)[0]


def test_a_glossary_with_a_header_serves_both_directions(tmp_path, tiny_tokenizer_dir):
    data = _jsonl(tmp_path / "pairs.jsonl", [{"src": r["src"], "tgt": r["ref"], "lang_pair": "zh-en"} for r in WMT23])
    glossary = tmp_path / "g.tsv"
    glossary.write_text("zh\ten\n机器学习\tmachine learning\n\n猫\tcat\n", encoding="utf-8")
    rc, out = _prepare(tmp_path, tiny_tokenizer_dir, "base_terms", "--input", str(data), "--glossary", str(glossary),
                       "--directions", "both")
    assert rc == 0
    got = {(i["lang_pair"], i["src"]): i["terms"] for i in _infos(out)}
    assert got[("zh-en", "猫在睡觉。")] == [{"src": "猫", "tgt": "cat"}]
    assert got[("en-zh", "The cat is sleeping.")] == [{"src": "cat", "tgt": "猫"}]
    assert got[("en-zh", "Our machine learning model is good.")] == [{"src": "machine learning", "tgt": "机器学习"}]


def test_a_terms_file_beside_aligned_files(tmp_path, tiny_tokenizer_dir):
    (tmp_path / "s.zh").write_text("猫在睡觉。\n我们的机器学习模型很好。\n", encoding="utf-8")
    (tmp_path / "s.en").write_text("The cat is sleeping.\nOur machine learning model is good.\n", encoding="utf-8")
    (tmp_path / "s.term").write_text('[]\n[{"zh": "机器学习", "en": "machine learning"}]\n', encoding="utf-8")
    rc, out = _prepare(tmp_path, tiny_tokenizer_dir, "rl_terms", "--src-file", str(tmp_path / "s.zh"), "--tgt-file",
                       str(tmp_path / "s.en"), "--terms-file", str(tmp_path / "s.term"), "--lang-pair", "zh-en")
    assert rc == 0 and [i["terms"] for i in _infos(out)] == [[], [{"src": "机器学习", "tgt": "machine learning"}]]


def test_bad_terms_input_is_one_line_and_nothing_is_written(tmp_path, tiny_tokenizer_dir, capsys):
    plain = _jsonl(tmp_path / "plain.jsonl", [{"src": "猫", "tgt": "cat", "lang_pair": "zh-en"}])
    bad = _jsonl(tmp_path / "bad.jsonl", [{"src": "猫", "tgt": "cat", "lang_pair": "zh-en", "terms": [{"src": "猫"}]}])
    mixed = _jsonl(tmp_path / "mixed.jsonl", [{"src": "猫", "tgt": "cat", "lang_pair": "zh-en"},
                                              {"src": "cat", "tgt": "猫", "lang_pair": "en-zh"}])
    (tmp_path / "g.tsv").write_text("猫\tcat\n", encoding="utf-8")
    (tmp_path / "g3.tsv").write_text("猫\tcat\textra\n", encoding="utf-8")
    (tmp_path / "a.zh").write_text("猫\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("cat\n", encoding="utf-8")
    (tmp_path / "a.term").write_text("[]\n[]\n", encoding="utf-8")
    cases = [
        (("chat_terms", "--input", str(plain)), "--template chat_terms gives each row's terms in its prompt, but the "
                                                "input has none"),
        (("chat", "--input", str(bad)), f"{bad}:1: a term must have src and tgt keys"),
        (("chat", "--input", str(mixed), "--glossary", str(tmp_path / "g.tsv")), "the input has 2 language pairs"),
        (("chat", "--input", str(plain), "--glossary", str(tmp_path / "g3.tsv")), "g3.tsv:1: expected 2 tab-separated"),
        (("chat", "--input", str(_hints_without_term(tmp_path)), "--terms-hints", "term"), "has no 'term' list"),
        (("chat", "--src-file", str(tmp_path / "a.zh"), "--tgt-file", str(tmp_path / "a.en"), "--lang-pair", "zh-en",
          "--terms-file", str(tmp_path / "a.term")), "a.term has 2 lines"),
        (("chat", "--input", str(plain), "--terms-file", str(tmp_path / "a.term")), "--terms-file goes with --src-file"),
    ]
    for (template, *args), says in cases:
        rc, out = _prepare(tmp_path, tiny_tokenizer_dir, template, *args)
        err = capsys.readouterr().err
        assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, (args, err)
        assert not out.exists()


def _hints_without_term(tmp_path):
    return _jsonl(tmp_path / "hints-without-term.jsonl", [{**WMT23[0], "hints": {"rand": []}}])
