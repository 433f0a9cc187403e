"""Standard test sets read from local files as they are released, into the rows evaluation generates for.

`read_any` tells the formats apart by name and content (docs/data-and-report.md, "Standard test sets",
says where each comes from; nothing is downloaded here):

- the parquet of `python -m src.data.prepare` (read by src/evaluate/testset.py, rows as they are);
- WMT24++ (`google/wmt24pp`): jsonl, one segment a line with `lp` ("en-zh_CN"), `source`, `target` (the
  post-edited reference, the one scored against) and `is_bad_source` (such rows are dropped and counted);
- WMT general test sets in the WMT21+ xml format: `<dataset>[<collection>]<doc>`, each doc one `<src lang>`
  and one or more `<ref lang translator>` blocks of `<p><seg id>`; the doc's first `<ref>` is the reference;
- FLORES-200 devtest: one segment a line per language (`eng_Latn.devtest`, `zho_Hans.devtest`), as
  `SRC_FILE:REF_FILE` or the devtest directory with a pair (`DIR@zh-en`);
- two line-aligned files `SRC_FILE:REF_FILE` (languages from their last suffix, `news.en`, or `@en-zh`);
- the WMT23 terminology test set (`zouharvi/wmt-terminology-2023` as jsonl: src, ref, langs, hints), in its three
  settings: no terms, the correct terms and the random terms in the prompt, each its own rows (docs/terminology.md).

Raw sets become rows through src.data.rows.make_row, the function prepare writes training and validation
rows with, so prompts and references are built as the reward sees them. Before any row is returned, the
languages a file claims are checked against the script of its text: Chinese under a claimed English source
means a mislabelled file or a swapped pair, and scoring it would give a number for the wrong direction.
"""
from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from src.data.readers import InputError, iter_json_objects, language_code, language_pair, read_text_lines
from src.data.rows import Example, make_row
from src.data.templates import TEMPLATES, TERMS_SUFFIX, language_name
from src.data.terms import TermsError, parse_terms
from src.rewards.languages import SCRIPTS, base_lang

from .options import UsageError
from .testset import TestRow, from_verl_row, read_testset

PARQUET, WMT24PP, WMT_XML, FLORES, PLAIN = "parquet", "wmt24pp", "wmt-xml", "flores200", "plain"
WMT23_TERMS = "wmt23-terminology"
# FLORES-200 file names (ISO 639-3 + script) -> the project's language codes (src/data/templates.py);
# FLORES+ renamed Mandarin to cmn_Hans. zho_Hant is left out on purpose: the prompts' "Chinese" and the
# training data are simplified.
FLORES_CODES = {
    "zho_Hans": "zh", "cmn_Hans": "zh", "eng_Latn": "en", "deu_Latn": "de", "fra_Latn": "fr", "jpn_Jpan": "ja",
    "rus_Cyrl": "ru", "ces_Latn": "cs", "spa_Latn": "es", "ita_Latn": "it", "por_Latn": "pt", "nld_Latn": "nl",
    "kor_Hang": "ko",
}
FLORES_SPLITS = ("devtest", "dev")
# a side whose words are less than this share in its claimed language's script is refused; real text
# mixes scripts (Latin names and brands in Chinese news), never to the point of being the majority
MIN_SCRIPT_SHARE = 0.5
_PAIR = re.compile(r"[A-Za-z]{2,3}(?:_[A-Za-z]+)?-[A-Za-z]{2,3}(?:_[A-Za-z]+)?")


@dataclass(frozen=True)
class TestSet:
    spec: str                      # what was given (a path, `SRC:REF`, either with `@pair`)
    name: str                      # the dataset name: rows' data_source is f"{name}/{src}-{tgt}"
    kind: str                      # PARQUET, WMT24PP, WMT_XML, FLORES, PLAIN or WMT23_TERMS
    rows: list                     # TestRow, in file order
    segments: int                  # segments in the file, the dropped ones included (a hypotheses= file's lines)
    bad_source_dropped: int = 0    # WMT24++ rows with is_bad_source true, left out
    no_reference_dropped: int = 0  # WMT xml segments whose doc's first <ref> has no text for them, left out
    references: int = 1            # reference translations the file has for a segment (the first is used)


def parse_spec(spec: str) -> tuple[str, str | None]:
    """`'flores200/devtest@zh-en'` -> ('flores200/devtest', 'zh-en'); without `@PAIR`, (spec, None)."""
    path, sep, pair = str(spec).rpartition("@")
    if sep and path and _PAIR.fullmatch(pair):
        return path, pair
    return str(spec), None


def read_any(spec: str | Path, pair: str | None = None, limit: int | None = None,
             template: str | None = None) -> TestSet:
    """The test set `spec` names (see the module doc for the formats), its first `limit` rows; every row
    is read and checked either way. `pair` ('zh-en') says the languages where the files do not, and
    must agree where they do. `template` (base | chat | rl) builds the prompts of a raw set and must be
    the one the policy was trained with; a parquet carries its own. Bad input: UsageError, one line."""
    path_text, spec_pair = parse_spec(str(spec))
    if pair and spec_pair and _langs(pair, spec) != _langs(spec_pair, spec):
        raise UsageError(f"testsets: {spec} says {spec_pair} and pair= says {pair}; give one pair")
    langs = _langs(pair or spec_pair, spec) if (pair or spec_pair) else None
    path = Path(path_text).expanduser()
    if path.is_dir():
        test = _flores_dir(spec, path, langs, template)
    elif not path.exists() and ":" in path_text:
        src, ref = path_text.split(":", 1)
        test = _two_files(spec, Path(src).expanduser(), Path(ref).expanduser(), langs, template)
    else:
        test = _one_file(spec, path, langs, template)
    if limit is not None:
        test = dataclasses.replace(test, rows=test.rows[:limit])
    return test


def read_testsets(specs: list[str], template: str | None) -> list[TestSet]:
    """Each spec read whole with `read_any`, its rows numbered on from the last set's (index 0..N-1 over
    all sets, in the order given: what canned responses key on). Two sets giving the same data_source
    (the same set twice, one direction of FLORES from two copies) are refused: their scores would merge."""
    sets, first_of, start = [], {}, 0
    for spec in specs:
        test = read_any(spec, template=template)
        for source in dict.fromkeys(r.data_source for r in test.rows):
            if source in first_of:
                raise UsageError(f"testsets: {first_of[source]} and {spec} both give {source}; keep one of them")
            first_of[source] = spec
        rows = [dataclasses.replace(r, index=start + i) for i, r in enumerate(test.rows)]
        sets.append(dataclasses.replace(test, rows=rows))
        start += len(rows)
    return sets


def _langs(pair: str, spec) -> tuple[str, str]:
    """'zh-en' or 'en-zh_CN' -> ('zh', 'en') / ('en', 'zh'): codes the prompts know."""
    src, sep, tgt = str(pair).partition("-")
    if not sep:
        raise UsageError(f"testsets: {spec}: pair {pair!r} must look like zh-en")
    try:
        return language_pair(base_lang(src), base_lang(tgt))
    except InputError as exc:
        raise UsageError(f"testsets: {spec}: {exc}") from None


def _template(spec, template: str | None) -> str:
    if template not in TEMPLATES:
        raise UsageError(f"testsets: {spec} is a raw test set, so its prompts are built here: give template="
                         f"{'|'.join(TEMPLATES)}, the one the policy was trained with (its data group's template)")
    return template


def _one_file(spec, path: Path, langs, template) -> TestSet:
    if not path.is_file():
        raise UsageError(f"testsets: no such file or directory: {path}")
    with open(path, "rb") as f:
        head = f.read(4096)
    if not head.strip():
        raise UsageError(f"testsets: {path} is empty")
    if head.startswith(b"PAR1") or path.suffix == ".parquet":
        rows = read_testset(path)
        return TestSet(spec=str(spec), name=rows[0].data_source.split("/")[0], kind=PARQUET, rows=rows,
                       segments=len(rows))
    text = head.decode("utf-8-sig", errors="replace").lstrip()
    if text.startswith("<"):
        return _wmt_xml(spec, path, langs, template)
    if text.startswith("{"):
        first = text.split("\n", 1)[0]
        if '"hints"' in first:  # WMT23 terminology: src, ref, langs, hints per line
            return _wmt23_terminology(spec, path, langs, template)
        return _wmt24pp(spec, path, langs, template)
    raise UsageError(f"testsets: {path}: unknown format (not a parquet, WMT24++ jsonl or WMT xml); a plain text "
                     f"file goes with its reference as SRC_FILE:REF_FILE, a FLORES-200 directory as DIR@zh-en")


def _wmt24pp(spec, path: Path, langs, template) -> TestSet:
    examples, lines, bad, segments = [], [], 0, 0
    try:
        for segments, (lineno, record) in enumerate(iter_json_objects(path), 1):
            where = f"{path}:{lineno}"
            missing = [k for k in ("lp", "source", "target") if k not in record]
            if missing:
                raise UsageError(f"testsets: {where} lacks {', '.join(missing)}: not a WMT24++ file (jsonl of lp, "
                                 f"source, target, is_bad_source); other jsonl pairs go through python -m "
                                 f"src.data.prepare")
            flag = record.get("is_bad_source", False)
            if not isinstance(flag, bool):
                raise UsageError(f"testsets: {where}: is_bad_source is {flag!r}, expected true or false")
            if flag:  # WMT24++ marks sources its translators found broken; scoring them measures noise
                bad += 1
                continue
            if not all(isinstance(record[k], str) for k in ("lp", "source", "target")):
                raise UsageError(f"testsets: {where}: lp, source and target must be text")
            claimed = _langs(record["lp"], where)
            if langs and claimed != langs:
                raise UsageError(f"testsets: {where} has lp {record['lp']} but the pair given is "
                                 f"{'-'.join(langs)}; use the WMT24++ file of that pair")
            examples.append((Example(record["source"], record["target"], *claimed), f"lp {record['lp']}"))
            lines.append(segments - 1)
    except InputError as exc:  # not UTF-8, a line that is not a JSON object
        raise UsageError(f"testsets: {' '.join(str(exc).splitlines())}") from None
    if not examples:
        raise UsageError(f"testsets: {path} has no rows" + (f" left: all {bad} have is_bad_source" if bad else ""))
    fix = "the lp field is wrong or the file is another pair's; use the WMT24++ file of the pair you mean"
    _check_scripts(path, examples, fix)
    return TestSet(spec=str(spec), name="wmt24pp", kind=WMT24PP,
                   rows=_rows("wmt24pp", examples, lines, spec, template), segments=segments, bad_source_dropped=bad)


# the WMT23 terminology task's three settings: the name of each one's rows, the hints its prompt gives (None: no
# terms in the prompt) and the hints its term metrics are measured against
WMT23_TERMINOLOGY = (("wmt23term-none", None, "term"), ("wmt23term-term", "term", "term"),
                     ("wmt23term-rand", "rand", "rand"))


def _wmt23_terminology(spec, path: Path, langs, template) -> TestSet:
    """WMT23's terminology test set (zouharvi/wmt-terminology-2023 rows as jsonl: src, ref, langs, hints {term,
    rand}) in its three settings, each a row of the table per direction: no terms in the prompt, the correct terms,
    the random terms (docs/terminology.md); the first measured against the correct terms, each other against the
    terms its prompt gives."""
    plain = _template(spec, template).removesuffix(TERMS_SUFFIX)
    per_setting: dict[str, list] = {name: [] for name, _, _ in WMT23_TERMINOLOGY}
    lines, segments = [], 0
    try:
        for segments, (lineno, record) in enumerate(iter_json_objects(path), 1):
            where = f"{path}:{lineno}"
            hints = record.get("hints")
            if not all(isinstance(record.get(k), str) for k in ("src", "ref", "langs")) or not isinstance(hints, dict):
                raise UsageError(f"testsets: {where}: a WMT23 terminology line needs src, ref and langs (text) and "
                                 f"hints ({{\"term\": [...], \"rand\": [...]}})")
            claimed = _langs(record["langs"], where)
            if langs and claimed != langs:
                raise UsageError(f"testsets: {where} has langs {record['langs']} but the pair given is "
                                 f"{'-'.join(langs)}")
            for name, given, measured in WMT23_TERMINOLOGY:
                try:
                    terms = parse_terms(hints.get(measured), *claimed)
                except TermsError as exc:
                    raise UsageError(f"testsets: {where}: hints.{measured}: {exc}") from None
                example = Example(record["src"], record["ref"], *claimed, terms)
                per_setting[name].append((example, given))
            lines.append(segments - 1)
    except InputError as exc:
        raise UsageError(f"testsets: {' '.join(str(exc).splitlines())}") from None
    if not lines:
        raise UsageError(f"testsets: {path} has no rows")
    rows = []
    for name, given, _ in WMT23_TERMINOLOGY:
        setting_template = plain if given is None else plain + TERMS_SUFFIX
        rows += [from_verl_row(make_row(e, dataset_name=name, template=setting_template, split="test",
                                        index=len(rows) + i), line=line)
                 for i, ((e, _), line) in enumerate(zip(per_setting[name], lines, strict=True))]
    return TestSet(spec=str(spec), name="wmt23term", kind=WMT23_TERMS, rows=rows, segments=segments)


def _segments(block: ET.Element, path: Path, doc_id: str) -> dict[int, str]:
    """seg id -> its text (whitespace at the ends dropped), for one <src> or <ref> block."""
    segs = {}
    for seg in block.iter("seg"):
        try:
            seg_id = int(seg.get("id", ""))
        except ValueError:
            raise UsageError(f"testsets: {path}: doc {doc_id} has <seg id={seg.get('id')!r}>; seg ids are "
                             f"integers in the WMT xml format") from None
        if seg_id in segs:
            raise UsageError(f"testsets: {path}: doc {doc_id} <{block.tag}> has seg id {seg_id} twice")
        segs[seg_id] = "".join(seg.itertext()).strip()
    return segs


def _wmt_xml(spec, path: Path, langs, template) -> TestSet:
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise UsageError(f"testsets: {path} is not well-formed xml ({exc})") from None
    if root.tag != "dataset":
        raise UsageError(f"testsets: {path}: root element <{root.tag}>, not a WMT xml test set (<dataset> of "
                         f"<doc>s with <src> and <ref> blocks)")
    # test-suite docs ride along in some WMT files and are not part of the test set (sacrebleu skips them too)
    docs = [d for d in root.iter("doc") if "testsuite" not in d.attrib]
    if not docs:
        raise UsageError(f"testsets: {path} has no <doc> (test-suite docs are not counted)")
    # segments numbered as the rows are read: docs in file order (test suites skipped), each doc's by seg id
    examples, lines, segments, no_ref, most_refs, claims = [], [], 0, 0, 0, set()
    for doc in docs:
        doc_id = doc.get("id", "?")
        srcs, refs = doc.findall("src"), doc.findall("ref")
        if len(srcs) != 1:
            raise UsageError(f"testsets: {path}: doc {doc_id} has {len(srcs)} <src> blocks; the format has one")
        source = _segments(srcs[0], path, doc_id)
        first, segments = segments, segments + len(source)
        if not refs:
            no_ref += len(source)
            continue
        most_refs = max(most_refs, len(refs))
        src_lang, tgt_lang = srcs[0].get("lang") or doc.get("src_lang"), refs[0].get("lang") or doc.get("tgt_lang")
        for attr, value in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
            if doc.get(attr) and value and base_lang(doc.get(attr)) != base_lang(value):
                raise UsageError(f"testsets: {path}: doc {doc_id} says {attr}={doc.get(attr)} but its block says "
                                 f"lang={value}")
        if not src_lang or not tgt_lang:
            raise UsageError(f"testsets: {path}: doc {doc_id} has no lang on its <src> or <ref>")
        claim = f"<src lang={src_lang}>/<ref lang={tgt_lang}>"
        pair = _langs(f"{src_lang}-{tgt_lang}", path)
        claims.add(pair)
        reference = _segments(refs[0], path, doc_id)
        for n, seg_id in enumerate(sorted(source)):
            if not reference.get(seg_id):
                no_ref += 1
                continue
            examples.append((Example(source[seg_id], reference[seg_id], *pair), claim))
            lines.append(first + n)
    if most_refs == 0:
        raise UsageError(f"testsets: {path} has no <ref> blocks: a source-only release; use the file with "
                         f"references (released after the evaluation campaign)")
    if len(claims) > 1:
        raise UsageError(f"testsets: {path} mixes pairs {', '.join('-'.join(p) for p in sorted(claims))}; "
                         f"one pair per file")
    if langs and claims != {langs}:
        raise UsageError(f"testsets: {path} is {'-'.join(next(iter(claims)))} (its <src>/<ref> lang) but the "
                         f"pair given is {'-'.join(langs)}")
    if not examples:
        raise UsageError(f"testsets: {path} has no segment with a reference")
    _check_scripts(path, examples, "the lang attributes are wrong or the blocks are swapped; fix the file")
    name = root.get("id") or path.name.split(".")[0]
    return TestSet(spec=str(spec), name=name, kind=WMT_XML, rows=_rows(name, examples, lines, spec, template),
                   segments=segments, no_reference_dropped=no_ref, references=most_refs)


def _language_of_name(path: Path) -> tuple[str, str] | None:
    """(code, FLORES or PLAIN) the file name gives: `zho_Hans.devtest` -> ('zh', FLORES), `news.en` ->
    ('en', PLAIN); None when it says nothing."""
    stem, _, split = path.name.partition(".")
    if split in FLORES_SPLITS and stem in FLORES_CODES:
        return FLORES_CODES[stem], FLORES
    suffix = path.suffix.lstrip(".")
    try:
        return (language_code(suffix), PLAIN) if suffix else None
    except InputError:
        return None


def _two_files(spec, src: Path, ref: Path, langs, template) -> TestSet:
    for path in (src, ref):
        if not path.is_file():
            raise UsageError(f"testsets: no such file: {path}" + (f" (in {spec})" if str(spec) != str(path) else ""))
    named = [_language_of_name(src), _language_of_name(ref)]
    from_names = _langs(f"{named[0][0]}-{named[1][0]}", spec) if all(named) else None
    if langs and from_names and from_names != langs:
        raise UsageError(f"testsets: {spec}: the file names say {'-'.join(from_names)}, the pair given says "
                         f"{'-'.join(langs)}; give the files in source:reference order")
    langs = langs or from_names
    if langs is None:
        raise UsageError(f"testsets: {spec}: the file names do not say the languages; add the pair: "
                         f"{src}:{ref}@zh-en (source-target)")
    kind = FLORES if all(n and n[1] == FLORES for n in named) else PLAIN
    claim = f"file names {src.name}/{ref.name}" if from_names else f"pair {'-'.join(langs)}"
    sides = []
    for path in (src, ref):
        try:
            lines = read_text_lines(path)
        except InputError as exc:
            raise UsageError(f"testsets: {exc}") from None
        if not lines:
            raise UsageError(f"testsets: {path} is empty")
        sides.append(lines)
    if len(sides[0]) != len(sides[1]):
        raise UsageError(f"testsets: {src} has {len(sides[0])} lines but {ref} has {len(sides[1])}; a source and "
                         f"its reference must be line-aligned")
    examples = [(Example(s, r, *langs), claim) for s, r in zip(*sides)]
    _check_scripts(src, examples, f"give the files in source:reference order, or the pair they hold "
                                  f"({src.name}:{ref.name}@<src>-<tgt>)", ref_path=ref)
    name = f"flores200_{src.name.partition('.')[2]}" if kind == FLORES else src.name.split(".")[0]
    return TestSet(spec=str(spec), name=name, kind=kind, rows=_rows(name, examples, range(len(examples)), spec,
                                                                   template), segments=len(examples))


def _flores_dir(spec, directory: Path, langs, template) -> TestSet:
    if langs is None:
        raise UsageError(f"testsets: {directory} is a directory: name the pair to read from it, "
                         f"{directory}@zh-en (FLORES-200 devtest)")
    where = directory / "devtest" if (directory / "devtest").is_dir() else directory
    files = []
    for lang in langs:
        names = [f"{code}.devtest" for code, ours in FLORES_CODES.items() if ours == lang]
        found = [where / n for n in names if (where / n).is_file()]
        if not found:
            raise UsageError(f"testsets: {where} has no {' or '.join(names)} (FLORES-200 devtest files, one "
                             f"segment a line)")
        files.append(found[0])
    return _two_files(spec, files[0], files[1], langs, template)


def _rows(name: str, examples: list[tuple[Example, str]], lines, spec, template) -> list[TestRow]:
    """The rows of the kept `examples`, each the segment of its file that `lines` gives."""
    template = _template(spec, template)
    return [from_verl_row(make_row(e, dataset_name=name, template=template, split="test", index=i), line=line)
            for i, ((e, _), line) in enumerate(zip(examples, lines, strict=True))]


# one regex token a word: a character of an unspaced script (Han, kana), or a run of other letters
_UNSPACED = "".join(dict.fromkeys(s.letters for s in SCRIPTS.values() if s.unspaced))
_WORD = re.compile(rf"[{_UNSPACED}]|(?:(?![{_UNSPACED}])[^\W\d_])+")
_FAMILIES = {family: re.compile("[" + "".join(dict.fromkeys(s.letters for s in SCRIPTS.values()
                                                            if s.family == family)) + "]")
             for family in dict.fromkeys(s.family for s in SCRIPTS.values())}


def script_shares(texts) -> dict[str, float]:
    """Script family ('cjk', 'latin', 'cyrillic'; 'other') -> its share of the words of `texts`, largest
    first; a Han or kana character counts as a word. Empty when the texts have no letters."""
    counts: Counter = Counter()
    for text in texts:
        for word in _WORD.findall(text):
            counts[next((f for f, letters in _FAMILIES.items() if letters.match(word)), "other")] += 1
    total = sum(counts.values())
    return {family: n / total for family, n in counts.most_common()} if total else {}


def _check_scripts(path: Path, examples: list[tuple[Example, str]], fix: str, ref_path: Path | None = None) -> None:
    """Each side's text is mostly in its claimed language's script; else UsageError naming the file, the
    claim, what the text looks like and `fix`."""
    sides = {}
    for example, claim in examples:
        sides.setdefault(("source", example.src_lang, claim, path), []).append(example.src)
        sides.setdefault(("reference", example.tgt_lang, claim, ref_path or path), []).append(example.tgt)
    for (side, lang, claim, file), texts in sides.items():
        script = SCRIPTS.get(lang)
        shares = script_shares(texts)
        if script is None or not shares or shares.get(script.family, 0.0) >= MIN_SCRIPT_SHARE:
            continue
        top, top_share = next(iter(shares.items()))
        raise UsageError(f"testsets: {file}: {claim} says the {side} is {lang} ({language_name(lang)}), but "
                         f"{shares.get(script.family, 0.0):.0%} of its words are {script.family} script and "
                         f"{top_share:.0%} {top}; {fix}")
