"""Standard test sets from local files (src/evaluate/testsets.py): each format written as released into
tmp_path, read into the rows evaluation generates for, and each kind of bad input refused in one line."""
from __future__ import annotations

import json

import pytest

from src.data.parquet_io import write_parquet_atomic
from src.data.rows import Example, make_row
from src.data.templates import build_prompt
from src.evaluate.cli import main
from src.evaluate.options import UsageError
from src.evaluate.testset import read_testset
from src.evaluate.testsets import FLORES, PARQUET, PLAIN, WMT24PP, WMT_XML, read_any, read_testsets, script_shares
from tests.helpers.refusals import assert_one_line_refusal

# (English, Chinese): made up, in the register of news and FLORES (Wikinews, Wikivoyage) segments
PAIRS = [
    ("The museum reopened on Monday after two years of renovation.", "这座博物馆经过两年的翻修，于周一重新开放。"),
    ("Heavy rain is expected in the south of the country this weekend.", "预计本周末该国南部将有大雨。"),
    ("The company said its profits rose by 12 percent last year.", "该公司表示，其去年的利润增长了百分之十二。"),
    ("Visitors should book their tickets at least a week in advance.", "游客应至少提前一周预订门票。"),
    ("Scientists have found water ice near the moon's south pole.", "科学家在月球南极附近发现了水冰。"),
]
EN = [en for en, _ in PAIRS]
ZH = [zh for _, zh in PAIRS]


def refused(call, *needles) -> str:
    """The one-line UsageError `call` raises, holding every needle."""
    with pytest.raises(UsageError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and message.startswith("testsets: "), message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def write_lines(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def wmt24pp_file(tmp_path, bad=(1, 3), lp="en-zh_CN", sources=EN, targets=ZH):
    """A WMT24++ jsonl as google/wmt24pp ships it; rows at `bad` have is_bad_source true."""
    path = tmp_path / f"{lp}.jsonl"
    lines = [json.dumps({"lp": lp, "domain": "news", "document_id": f"doc{i // 2}", "segment_id": i,
                         "is_bad_source": i in bad, "source": src, "target": tgt,
                         "original_target": tgt + "（原译）"}, ensure_ascii=False)
             for i, (src, tgt) in enumerate(zip(sources, targets))]
    return write_lines(path, lines)


def test_wmt24pp_rows_are_scored_against_the_post_edit_and_bad_sources_are_dropped_and_counted(tmp_path):
    test = read_any(wmt24pp_file(tmp_path), template="chat")
    assert test.kind == WMT24PP and test.name == "wmt24pp"
    assert test.bad_source_dropped == 2
    assert [r.src for r in test.rows] == [EN[0], EN[2], EN[4]]
    assert [r.ref for r in test.rows] == [ZH[0], ZH[2], ZH[4]]  # `target`, not `original_target`
    row = test.rows[0]
    assert (row.src_lang, row.tgt_lang, row.data_source, row.index) == ("en", "zh", "wmt24pp/en-zh", 0)
    # the prompt is the one prepare writes for training and validation
    assert row.messages == build_prompt("chat", EN[0], "en", "zh") and row.template == "chat"


def test_chinese_under_a_claimed_english_source_is_refused_in_one_line(tmp_path):
    path = wmt24pp_file(tmp_path, bad=(), sources=ZH, targets=EN)  # a zh-en file labelled en-zh_CN
    refused(lambda: read_any(path, template="chat"), str(path), "lp en-zh_CN", "source is en", "cjk",
            "use the WMT24++ file")


def test_wmt24pp_with_only_bad_sources_says_so(tmp_path):
    path = wmt24pp_file(tmp_path, bad=range(5))
    refused(lambda: read_any(path, template="rl"), "no rows left: all 5 have is_bad_source")


def test_wmt24pp_pair_must_agree_with_its_lp(tmp_path):
    path = wmt24pp_file(tmp_path)
    refused(lambda: read_any(f"{path}@zh-en", template="rl"), "has lp en-zh_CN but the pair given is zh-en")


WMT_XML_DOC = """<?xml version='1.0' encoding='utf-8'?>
<dataset id="generaltest2023">
  <collection id="general">
    <doc id="news.1" origlang="zh" domain="news">
      <src lang="zh">
        <p>
          <seg id="2">{zh1}</seg>
          <seg id="1">{zh0}</seg>
        </p>
        <p>
          <seg id="3">{zh2}</seg>
        </p>
      </src>
      <ref lang="en" translator="A">
        <p>
          <seg id="1">{en0}</seg>
          <seg id="2">{en1}</seg>
        </p>
        <p>
          <seg id="3"></seg>
        </p>
      </ref>
      <ref lang="en" translator="B">
        <p>
          <seg id="1">The museum opened again on Monday after being renovated for two years.</seg>
          <seg id="2">Strong rain is forecast for the southern part of the country this weekend.</seg>
          <seg id="3">The firm said last year's profit grew 12 percent.</seg>
        </p>
      </ref>
    </doc>
    <doc id="travel.7" origlang="zh" domain="speech" testsuite="robustness">
      <src lang="zh"><p><seg id="1">这一段属于测试套件。</seg></p></src>
      <ref lang="en" translator="A"><p><seg id="1">This segment belongs to a test suite.</seg></p></ref>
    </doc>
    <doc id="travel.2" origlang="zh" domain="literary">
      <src lang="zh"><p><seg id="1">{zh3}</seg><seg id="2">{zh4}</seg></p></src>
      <ref lang="en" translator="A"><p><seg id="1">{en3}</seg><seg id="2">{en4}</seg></p></ref>
    </doc>
  </collection>
</dataset>
"""


def wmt_xml_file(tmp_path, text=None, langs=("zh", "en")):
    """WMT_XML_DOC (or `text`) with the <src> and <ref> blocks saying `langs`."""
    path = tmp_path / "generaltest2023.zh-en.all.xml"
    text = text or WMT_XML_DOC.format(**{f"zh{i}": z for i, z in enumerate(ZH)},
                                      **{f"en{i}": e for i, e in enumerate(EN)})
    text = text.replace('<src lang="zh">', f'<src lang="{langs[0]}">')
    text = text.replace('<ref lang="en"', f'<ref lang="{langs[1]}"')
    path.write_text(text, encoding="utf-8")
    return path


def test_wmt_xml_takes_each_docs_first_reference_in_segment_order(tmp_path):
    test = read_any(wmt_xml_file(tmp_path), template="base")
    assert test.kind == WMT_XML and test.name == "generaltest2023"
    assert test.references == 2  # translators A and B; A, the first, is the reference
    # segment 3 of the first doc has no text in A: dropped and counted; the test-suite doc is not read
    assert test.no_reference_dropped == 1
    assert [r.src for r in test.rows] == [ZH[0], ZH[1], ZH[3], ZH[4]]
    assert [r.ref for r in test.rows] == [EN[0], EN[1], EN[3], EN[4]]
    assert {r.data_source for r in test.rows} == {"generaltest2023/zh-en"}
    assert [r.index for r in test.rows] == [0, 1, 2, 3]


def test_wmt_xml_whose_text_is_not_its_lang_is_refused(tmp_path):
    path = wmt_xml_file(tmp_path, langs=("en", "zh"))  # Chinese segments under <src lang="en">
    refused(lambda: read_any(path, template="base"), str(path), "<src lang=en>/<ref lang=zh>", "source is en", "cjk")


def test_a_source_only_wmt_xml_release_is_refused(tmp_path):
    text = ('<dataset id="wmttest2024"><collection id="general"><doc id="a" origlang="en"><src lang="en"><p>'
            f'<seg id="1">{EN[0]}</seg></p></src></doc></collection></dataset>')
    refused(lambda: read_any(wmt_xml_file(tmp_path, text), template="base"), "no <ref> blocks",
            "source-only release")


def flores_dir(tmp_path):
    devtest = tmp_path / "flores200_dataset" / "devtest"
    write_lines(devtest / "eng_Latn.devtest", EN)
    write_lines(devtest / "zho_Hans.devtest", ZH)
    return tmp_path / "flores200_dataset"


def test_flores_pair_of_files_is_read_aligned(tmp_path):
    devtest = flores_dir(tmp_path) / "devtest"
    test = read_any(f"{devtest / 'eng_Latn.devtest'}:{devtest / 'zho_Hans.devtest'}", template="rl")
    assert test.kind == FLORES and test.name == "flores200_devtest"
    assert [(r.src, r.ref, r.direction) for r in test.rows] == [(e, z, "en-zh") for e, z in PAIRS]


@pytest.mark.parametrize("how", ["spec", "argument"])
def test_flores_directory_with_a_pair(tmp_path, how):
    root = flores_dir(tmp_path)
    test = read_any(f"{root}@zh-en", template="rl") if how == "spec" else read_any(root, pair="zh-en", template="rl")
    assert [(r.src, r.ref) for r in test.rows] == [(z, e) for e, z in PAIRS]
    assert {r.data_source for r in test.rows} == {"flores200_devtest/zh-en"}


def test_flores_directory_without_a_pair_or_the_language_is_refused(tmp_path):
    root = flores_dir(tmp_path)
    refused(lambda: read_any(root, template="rl"), "is a directory", "@zh-en")
    refused(lambda: read_any(f"{root}@zh-de", template="rl"), "no deu_Latn.devtest")


def test_plain_files_take_their_languages_from_suffixes_or_a_pair(tmp_path):
    src, ref = write_lines(tmp_path / "news2024.en", EN), write_lines(tmp_path / "news2024.zh", ZH)
    test = read_any(f"{src}:{ref}", template="chat")
    assert test.kind == PLAIN and test.name == "news2024" and test.rows[2].direction == "en-zh"
    bare_src, bare_ref = write_lines(tmp_path / "a.txt", ZH), write_lines(tmp_path / "b.txt", EN)
    refused(lambda: read_any(f"{bare_src}:{bare_ref}", template="chat"), "do not say the languages", "@zh-en")
    assert read_any(f"{bare_src}:{bare_ref}@zh-en", template="chat").rows[0].ref == EN[0]
    refused(lambda: read_any(f"{src}:{ref}@zh-en", template="chat"), "file names say en-zh")
    # swapped: English lines under a pair that says the source is Chinese
    refused(lambda: read_any(f"{bare_ref}:{bare_src}@zh-en", template="chat"), "source is zh", "latin")


def test_unaligned_files_are_refused(tmp_path):
    src, ref = write_lines(tmp_path / "t.en", EN), write_lines(tmp_path / "t.zh", ZH[:4])
    refused(lambda: read_any(f"{src}:{ref}", template="chat"), "has 5 lines but", "has 4", "line-aligned")


def test_missing_empty_and_unknown_files_are_refused(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    unknown = write_lines(tmp_path / "notes.txt", EN)
    refused(lambda: read_any(tmp_path / "nope.jsonl", template="chat"), "no such file or directory")
    refused(lambda: read_any(f"{tmp_path / 'nope.en'}:{unknown}", template="chat"), "no such file")
    refused(lambda: read_any(empty, template="chat"), "is empty")
    refused(lambda: read_any(unknown, template="chat"), "unknown format", "SRC_FILE:REF_FILE")
    refused(lambda: read_any(wmt24pp_file(tmp_path)), "give template=")


def test_the_prepared_parquet_is_read_as_evaluation_always_read_it(tmp_path):
    rows = [make_row(Example(e, z, "en", "zh"), dataset_name="tiny", template="rl", split="test", index=10 + i)
            for i, (e, z) in enumerate(PAIRS)]
    path = tmp_path / "test.parquet"
    write_parquet_atomic(rows, path)
    test = read_any(path, limit=3)
    assert test.kind == PARQUET and test.name == "tiny"
    assert test.rows == read_testset(path)[:3]


def test_several_sets_are_numbered_on_and_one_source_twice_is_refused(tmp_path):
    root = flores_dir(tmp_path)
    sets = read_testsets([str(wmt24pp_file(tmp_path)), f"{root}@zh-en", f"{root}@en-zh"], template="chat")
    assert [len(s.rows) for s in sets] == [3, 5, 5]
    assert [r.index for s in sets for r in s.rows] == list(range(13))
    refused(lambda: read_testsets([f"{root}@zh-en", f"{root}@zh-en"], template="chat"),
            "both give flores200_devtest/zh-en")


def test_script_shares_count_a_han_character_as_a_word():
    shares = script_shares(["我用iPhone拍照。"])  # 4 Han characters, one Latin word
    assert shares == {"cjk": 0.8, "latin": 0.2}
    assert script_shares(["12 345, 6."]) == {}


def test_evaluate_scores_each_standard_set_and_direction_on_its_own(tmp_path, capsys):
    wmt, flores = wmt24pp_file(tmp_path), flores_dir(tmp_path)
    # rows are numbered over the sets in the order given: WMT24++'s 3 kept rows, then FLORES zh-en's 5
    refs = [ZH[0], ZH[2], ZH[4], *EN]
    responses = tmp_path / "responses.jsonl"
    write_lines(responses, [json.dumps({"index": i, "response": f"<translate>{r}</translate>"}, ensure_ascii=False)
                            for i, r in enumerate(refs)])
    out = tmp_path / "eval"
    code = main([f"testsets={wmt},{flores}@zh-en", "template=rl", "generator=file", f"responses={responses}",
                 "metrics=bleu,chrf", f"out={out}"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"{wmt}: 3 segments; left out 2 with is_bad_source" in err
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    table = {row["direction"]: row for row in summary["directions"]}
    assert set(table) == {"wmt24pp/en-zh", "flores200_devtest/zh-en"}
    assert (table["wmt24pp/en-zh"]["segments"], table["flores200_devtest/zh-en"]["segments"]) == (3, 5)
    assert table["wmt24pp/en-zh"]["bleu"] == pytest.approx(100.0)
    assert "tok:zh" in summary["sacrebleu_signatures"]["wmt24pp/en-zh"]["bleu"]
    assert [(s["format"], s["rows"], s["bad_source_dropped"]) for s in summary["testsets"]] == [
        ("wmt24pp", 3, 2), ("flores200", 5, 0)]
    assert summary["data"] is None


@pytest.mark.parametrize("argv, needle", [
    (["testsets={wmt}"], "testsets= needs template=base|chat|rl"),
    (["testsets={wmt}", "data={wmt}", "template=rl"], "give data= or testsets=, not both"),
    (["data={wmt}", "template=rl"], "template= is for testsets= only"),
    (["testsets={swapped}", "template=rl"], "lp en-zh_CN says the source is en (English), but"),
    (["testsets=,", "template=rl"], "testsets: empty"),
])
def test_evaluate_refuses_bad_test_sets_in_one_line_before_anything(tmp_path, capsys, argv, needle):
    wmt = wmt24pp_file(tmp_path)
    swapped = wmt24pp_file(tmp_path / "swapped", bad=(), sources=ZH, targets=EN)
    out = tmp_path / "eval"
    argv = [a.format(wmt=wmt, swapped=swapped) for a in argv] + ["generator=file", f"responses={wmt}", f"out={out}"]
    assert main(argv) == 2
    assert_one_line_refusal(capsys.readouterr().err, "evaluate: error: ", needle)
    assert not out.exists()
