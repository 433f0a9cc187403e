"""prepare's command line under random input (hypothesis): TSV/jsonl/aligned files with odd unicode
(tabs, CR, U+2028, NUL, emoji), other encodings and broken bytes, headers, good and bad language codes
and direction lists, odd limits. Every run ends in exit 0 with exactly the two output files, or exit 2
with exactly one `prepare: error:` line and nothing written: never a traceback, never a partial or
temp file. In-process (main()), so an uncaught exception fails the test with its traceback."""
from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from src.data.prepare import main
from src.data.templates import LANGUAGE_NAMES

CODES = list(LANGUAGE_NAMES)


RARELY = st.sampled_from([False] * 9 + [True])


def mostly(good, bad):
    """`good` nine times in ten: each bad choice alone should decide a run, so that runs that pass
    every check (exit 0) are common too."""
    return RARELY.flatmap(lambda b: bad if b else good)


GOOD_PAIR = st.sampled_from([f"{a}-{b}" for a in CODES for b in CODES if a != b])


# sentences: any unicode the line/field splitting could trip over, weighted towards the separators
ODD = st.sampled_from(["\r", "\r\n", "\u2028", "\x85", "\x0c", "\x00", "\ufeff", "😀", "龘", " ", '"', "\\"])
CLEAN = st.text(st.characters(blacklist_characters="\t\n", blacklist_categories=("Cs",)), max_size=12)
# a tab or newline inside a sentence breaks a TSV/aligned line: one sentence in ten may have one
TEXT = mostly(st.lists(st.one_of(CLEAN, ODD), max_size=4).map("".join),
              st.lists(st.one_of(st.text(max_size=12), ODD, st.just("\n")), max_size=4).map("".join))
LANG = st.one_of(st.sampled_from(CODES), st.sampled_from(CODES).map(str.upper), st.text(max_size=4))
PAIR = st.one_of(st.tuples(st.sampled_from(CODES), st.sampled_from(CODES)).map("-".join),
                 st.tuples(LANG, LANG).map("-".join), st.text(max_size=7))
PAIR_MOSTLY_GOOD = mostly(GOOD_PAIR, PAIR)
HEADERS = st.sampled_from([None, "src\ttgt", "source\ttarget", "Source\tTarget", "source_text\ttarget_text",
                           "src\ttgt\tlang_pair", "Chinese\tEnglish", "zh\ten", "src\ttgt\tscore"])
ENCODINGS = mostly(st.sampled_from(["utf-8", "utf-8-sig"]), st.sampled_from(["gbk", "utf-16", "latin-1"]))


def _encode(text: str, encoding: str) -> bytes:
    return text.encode(encoding, errors="replace" if encoding in ("gbk", "latin-1") else "surrogatepass")


@st.composite
def inputs(draw):
    """(files {name: bytes}, input args, other args)."""
    kind = draw(st.sampled_from(["tsv", "jsonl", "aligned"]))
    rows = draw(mostly(st.lists(st.tuples(TEXT.map("a ".__add__), TEXT.map("b ".__add__), PAIR_MOSTLY_GOOD),
                                min_size=1, max_size=6),
                       st.lists(st.tuples(TEXT, TEXT, PAIR), max_size=3)))
    encoding = draw(ENCODINGS)
    files: dict[str, bytes] = {}
    if kind == "tsv":
        header = draw(mostly(st.sampled_from([None, "src\ttgt", "source\ttarget", "Source\tTarget",
                                              "src\ttgt\tlang_pair"]), HEADERS))
        lines = ([header] if header else []) + [
            "\t".join([s, t] + ([p] if header and header.endswith("lang_pair") else [])) for s, t, p in rows]
        files["in.tsv"] = _encode("\n".join(lines) + "\n", encoding)
        args = ["--input", "in.tsv"]
    elif kind == "jsonl":
        objs = []
        for s, t, p in rows:
            obj = {"src": s, "tgt": t}
            style = draw(mostly(st.sampled_from(["lang_pair", "fields", "none"]), st.just("junk")))
            if style == "lang_pair":
                obj["lang_pair"] = p
            elif style == "fields":
                obj.update(zip(("src_lang", "tgt_lang"), draw(mostly(GOOD_PAIR, st.tuples(LANG, LANG).map("-".join)))
                               .split("-", 1) + [""]))
            elif style == "junk":
                obj = draw(st.sampled_from([[1, 2], "text", {"src": 3, "tgt": None, "lang_pair": "zh-en"},
                                            {"source": s}]))
            objs.append(json.dumps(obj, ensure_ascii=draw(st.booleans())))
        if draw(RARELY):
            objs.append(draw(st.sampled_from(['{"src": "a", "tgt"', "[[[[", "", "null"])))
        files["in.jsonl"] = _encode("\n".join(objs) + "\n", encoding)
        args = ["--input", "in.jsonl"]
    else:
        files["a.src"] = _encode("\n".join(s for s, _, _ in rows) + "\n", encoding)
        files["a.tgt"] = _encode("\n".join(t for _, t, _ in rows) + "\n", draw(ENCODINGS))
        args = ["--src-file", "a.src", "--tgt-file", "a.tgt"]
    if draw(RARELY):
        files[args[1]] = draw(st.binary(max_size=40)) + files[args[1]]  # broken bytes up front
    other = []
    if kind == "aligned" or draw(mostly(st.just(True), st.just(False))):
        other += ["--lang-pair", draw(PAIR_MOSTLY_GOOD)]
    other += ["--directions", draw(mostly(st.sampled_from(["as-is", "both"]),
                                          st.one_of(st.sampled_from(["", "zh-en,en-zh", "EN-ZH"]), PAIR)))]
    for flag in ("--max-src-tokens", "--max-prompt-tokens", "--max-per-direction"):
        if draw(st.booleans()):
            other += [flag, str(draw(mostly(st.integers(1, 400), st.integers(-2, 0))))]
    other += ["--template", draw(mostly(st.sampled_from(["chat", "rl", "base"]), st.just("xml")))]
    other += ["--split", draw(mostly(st.sampled_from(["train", "val", "test"]), st.just("dev")))]
    return files, args, other


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=inputs())
def test_random_input_ends_in_output_or_one_error_line(tiny_tokenizer_dir, case):
    files, input_args, other = case
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        out = tmp / "out" / "train.parquet"
        argv = [a if a not in files else str(tmp / a) for a in input_args] + other + [
            "--tokenizer", str(tiny_tokenizer_dir), "--out", str(out)]
        err, stdout = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(stdout):
            try:
                code = main(argv)
            except SystemExit as e:  # argparse's refusals
                code = e.code
        written = sorted(p.name for p in out.parent.iterdir()) if out.parent.exists() else []
        lines = err.getvalue().splitlines()
        event(f"exit {code}")
        if code == 0:
            assert lines == [] and written == ["train.parquet", "train.stats.json"], (lines, written)
            rows = pq.read_table(out).to_pylist()
            assert rows, "exit 0 wrote no rows"
            for r in rows:
                info = r["extra_info"]
                assert info["src_lang"] in LANGUAGE_NAMES and info["tgt_lang"] in LANGUAGE_NAMES
                assert info["src_lang"] != info["tgt_lang"]
                assert r["data_source"].endswith(f"/{info['src_lang']}-{info['tgt_lang']}")
                assert info["src"].strip() and r["reward_model"]["ground_truth"].strip()
        else:
            assert code == 2, (code, lines)
            assert len(lines) == 1 and lines[0].startswith("prepare: error: "), lines
            assert written == [], written
