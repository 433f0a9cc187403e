"""Read parallel text into `Pair`s: jsonl, two aligned text files, or TSV.

Every problem with the input raises `InputError` with a message that names the file (and line),
so the CLI can print one line and exit 2 before writing anything.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from .templates import LANGUAGE_NAMES
from .terms import Term, TermsError, match_glossary, parse_terms


class InputError(Exception):
    """Bad input: the CLI prints the message on one line and exits 2."""


@dataclass(frozen=True)
class Pair:
    src: str
    tgt: str
    src_lang: str
    tgt_lang: str
    # the segment's required terms (src/data/terms.py); None: the input says nothing of terms
    terms: tuple[Term, ...] | None = None


def language_code(value: str) -> str:
    """A language code the prompt templates know (src/data/templates.py LANGUAGE_NAMES), lower-cased:
    'ZH' -> 'zh'. An unknown code would put "Translate the following xx text" into every prompt and
    make `ZH-EN` a data_source of its own, so it is refused."""
    code = str(value).strip().lower()
    if code not in LANGUAGE_NAMES:
        raise InputError(f"unknown language code {value!r} (known: {', '.join(LANGUAGE_NAMES)}; add a new "
                         f"language to LANGUAGE_NAMES in src/data/templates.py)")
    return code


def language_pair(src: str, tgt: str) -> tuple[str, str]:
    """Both codes checked and lower-cased; a pair from a language into itself is refused."""
    pair = language_code(src), language_code(tgt)
    if pair[0] == pair[1]:
        raise InputError(f"language pair {src}-{tgt} translates {pair[0]} into itself; give two languages")
    return pair


def parse_lang_pair(value: str) -> tuple[str, str]:
    """'zh-en' (or 'ZH-EN') -> ('zh', 'en')."""
    parts = str(value).strip().split("-")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise InputError(f"language pair must look like 'zh-en', got {value!r}")
    return language_pair(*parts)


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise InputError(f"input file not found: {path}")


def read_text_lines(path: Path) -> list[str]:
    """The file's lines, split on "\n" only (a trailing "\r" dropped): str.splitlines would also cut
    at U+2028, U+0085, form feeds... inside a sentence and shift every later pair. A UTF-8 BOM is
    skipped; any other non-UTF-8 byte is one clear line naming the file and where."""
    _require_file(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(f"{path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); convert "
                         f"it first, e.g. iconv -f GBK -t UTF-8 {path.name} > {path.stem}.utf8{path.suffix}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _langs_of(record: dict, default: tuple[str, str] | None, where: str) -> tuple[str, str]:
    try:
        if record.get("src_lang") and record.get("tgt_lang"):
            return language_pair(str(record["src_lang"]), str(record["tgt_lang"]))
        for key in ("lang_pair", "lp"):
            if record.get(key):
                return parse_lang_pair(str(record[key]))
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
    if default is not None:
        return default
    raise InputError(f"{where}: no language pair (give src_lang/tgt_lang or lang_pair fields, or --lang-pair)")


def _text(value, where: str, column: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"{where}: column {column!r} must be text, got {type(value).__name__}")
    return value


class JsonLineError(InputError):
    """A line of a JSON-lines file that is not one JSON object. The message is the readers' own;
    the fields say what is wrong, for a caller that words it its way (src/evaluate/inspect_reward.py)."""

    def __init__(self, path: Path, line: int, kind: str, detail: str = "", column: int = 0):
        self.path, self.line, self.kind, self.detail, self.column = path, line, kind, detail, column
        where = f"{path}:{line}"
        super().__init__({"json": f"{where}: not valid JSON ({detail})",
                          "depth": f"{where}: JSON nested too deeply",
                          "type": f"{where}: expected a JSON object per line"}[kind])


def iter_json_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON-lines file, its text read as
    read_text_lines reads it. A line that is not a JSON object raises JsonLineError: kind `json`
    (not JSON; detail: the parser's message, column), `depth` (nested too deeply for the parser) or
    `type` (JSON, not an object; detail: its type's name)."""
    for lineno, line in enumerate(read_text_lines(path), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise JsonLineError(path, lineno, "json", e.msg, e.colno) from None
        except RecursionError:
            raise JsonLineError(path, lineno, "depth") from None
        if not isinstance(record, dict):
            raise JsonLineError(path, lineno, "type", type(record).__name__)
        yield lineno, record


def _terms_of(value, langs: tuple[str, str], where: str) -> tuple[Term, ...]:
    try:
        return parse_terms(value, *langs)
    except TermsError as e:
        raise InputError(f"{where}: {e}") from None


# WMT23's terminology task (zouharvi/wmt-terminology-2023): per segment, the terms of each setting
HINTS_KEY = "hints"
HINTS = ("term", "rand")


def _hinted_terms(values: dict, record: dict, hints: str | None, langs: tuple[str, str],
                  where: str) -> tuple[Term, ...] | None:
    """The terms of a line: its `terms` column, or its WMT23 `hints` of the setting --terms-hints names."""
    if "terms" in values:
        return _terms_of(values["terms"], langs, where)
    if hints is None or HINTS_KEY not in record:
        return None
    given = record[HINTS_KEY]
    if not isinstance(given, dict) or hints not in given:
        raise InputError(f"{where}: --terms-hints {hints}: the line's {HINTS_KEY!r} has no {hints!r} list "
                         f"(it has: {', '.join(map(str, given)) if isinstance(given, dict) else type(given).__name__})")
    return _terms_of(given[hints], langs, where)


def read_jsonl(path: Path, default_langs: tuple[str, str] | None, hints: str | None = None) -> list[Pair]:
    """One object per line with `src`, `tgt` and `src_lang`/`tgt_lang` or `lang_pair`, under any name a
    TSV header may use for them (COLUMNS: `source`, `target`/`ref`, `target_lang`, `lp`/`langs`, any case);
    its terms from a `terms` list, or WMT23's `hints` (the setting `hints` names: term or rand)."""
    pairs = []
    for lineno, record in iter_json_objects(path):
        where = f"{path}:{lineno}"
        named: dict = {}  # column -> (the key it was read from, value)
        for key, value in record.items():
            column = COLUMNS.get(str(key).strip().lower())
            if column is None or (column in named and named[column][0] == column):
                continue  # not a pair's column, or the column's own name was read already
            if column in named and key != column:
                raise InputError(f"{where}: keys {named[column][0]!r} and {key!r} both give {column}; keep one")
            named[column] = (key, value)
        missing = [c for c in ("src", "tgt") if c not in named]
        if missing:
            found = ", ".join(record) or "none"
            raise InputError(f"{where}: missing column(s) {', '.join(missing)} (found: {found}; "
                             f"src/source and tgt/target are read)")
        values = {column: value for column, (_, value) in named.items()}
        src_lang, tgt_lang = _langs_of(values, default_langs, where)
        src, tgt = (_text(values["src"], where, named["src"][0]), _text(values["tgt"], where, named["tgt"][0]))
        pairs.append(Pair(src, tgt, src_lang, tgt_lang, _hinted_terms(values, record, hints, (src_lang, tgt_lang), where)))
    return pairs


# names a TSV header or a JSON line's keys may use, lower-cased -> the column they mean
COLUMNS = {
    "src": "src", "source": "src",
    "tgt": "tgt", "target": "tgt",
    "src_lang": "src_lang", "source_lang": "src_lang",
    "tgt_lang": "tgt_lang", "target_lang": "tgt_lang",
    "lang_pair": "lang_pair", "lp": "lang_pair", "langs": "lang_pair",
    # WMT23 terminology's reference column
    "ref": "tgt",
    # a segment's terms, JSON (src/data/terms.py)
    "terms": "terms",
}
# words a header row tends to hold besides those: a first row made only of such words (and of
# language codes/names) is a header we cannot read, never a sentence pair to train on
_HEADER_WORDS = {"text", "sentence", "sentences", "segment", "translation", "reference", "ref", "hyp",
                 "hypothesis", "mt", "input", "output", "id", "index", "lang", "language", "pair", "src_text",
                 "tgt_text", "source_text", "target_text", "source_sentence", "target_sentence",
                 "source_language", "target_language"}
_WORD = re.compile(r"[a-z][a-z0-9_ .-]*")


def _header_like(field: str) -> bool:
    word = field.strip().lower()
    names = {n.lower() for n in LANGUAGE_NAMES.values()}
    return bool(_WORD.fullmatch(word)) and (word in COLUMNS or word in _HEADER_WORDS or word in LANGUAGE_NAMES
                                            or word in names or word.replace(" ", "_") in _HEADER_WORDS)


def _tsv_header(path: Path, first: list[str]) -> list[str] | None:
    """The first row's column names mapped to src/tgt/src_lang/tgt_lang/lang_pair when it is a header
    (it names a source and a target column, e.g. `src<TAB>tgt` or `Source<TAB>Target`); None when it is
    data. A first row that looks like a header but is not one we can read is refused."""
    names = [COLUMNS.get(f.strip().lower()) for f in first]
    if "src" in names and "tgt" in names:
        unknown = [f for f, n in zip(first, names) if n is None]
        repeated = sorted({n for n in names if n is not None and names.count(n) > 1})
        if unknown or repeated:
            raise InputError(f"{path}:1: header column(s) {', '.join(map(repr, unknown or repeated))} "
                             f"{'unknown' if unknown else 'named twice'}; a header names columns from "
                             f"{', '.join(COLUMNS)}")
        return names
    if all(_header_like(f) for f in first):
        raise InputError(f"{path}:1: the first row {first!r} looks like a header but names no source and target "
                         f"column; name them src and tgt (or source and target), or drop the row")
    return None


def read_tsv(path: Path, default_langs: tuple[str, str] | None) -> list[Pair]:
    """Tab-separated, no quoting. With a header row naming `src`/`source` and `tgt`/`target` (and
    optionally `src_lang`/`tgt_lang`/`lang_pair`, any case), columns are found by name; without one,
    each line must have exactly two fields, source then target, and --lang-pair gives the languages."""
    lines = read_text_lines(path)
    if not lines:
        return []
    header = _tsv_header(path, lines[0].split("\t"))
    pairs = []
    for lineno, line in enumerate(lines[1:] if header else lines, 2 if header else 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        where = f"{path}:{lineno}"
        if header:
            if len(fields) != len(header):
                raise InputError(f"{where}: {len(fields)} fields, the header has {len(header)}")
            record = dict(zip(header, fields))
        else:
            if len(fields) != 2:
                raise InputError(
                    f"{where}: expected 2 tab-separated fields (src, tgt) or a header row with src and tgt, "
                    f"got {len(fields)}"
                )
            record = {"src": fields[0], "tgt": fields[1]}
        src_lang, tgt_lang = _langs_of(record, default_langs, where)
        terms = _terms_of(record["terms"], (src_lang, tgt_lang), where) if "terms" in record else None
        pairs.append(Pair(record["src"], record["tgt"], src_lang, tgt_lang, terms))
    return pairs


def read_aligned(src_path: Path, tgt_path: Path, langs: tuple[str, str] | None,
                 terms_path: Path | None = None) -> list[Pair]:
    """Two files, line i of one translating line i of the other; `terms_path`: line i holds the terms of pair
    i as a JSON list ("[]" or an empty line: none), as WMT23's <pair>.term.proper and .term.random files."""
    _require_file(src_path)
    _require_file(tgt_path)
    if langs is None:
        raise InputError("two aligned text files need --lang-pair (e.g. --lang-pair zh-en)")
    src_lines = read_text_lines(src_path)
    tgt_lines = read_text_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise InputError(
            f"aligned files differ in length: {src_path} has {len(src_lines)} lines, {tgt_path} has {len(tgt_lines)}"
        )
    if terms_path is None:
        return [Pair(s, t, *langs) for s, t in zip(src_lines, tgt_lines)]
    term_lines = read_text_lines(terms_path)
    if len(term_lines) != len(src_lines):
        raise InputError(f"--terms-file {terms_path} has {len(term_lines)} lines, {src_path} has {len(src_lines)}: "
                         f"line i must hold the terms of pair i")
    return [Pair(s, t, *langs, _terms_of(line, langs, f"{terms_path}:{i}"))
            for i, (s, t, line) in enumerate(zip(src_lines, tgt_lines, term_lines), 1)]


def read_pairs(
    input_path: Path | None = None,
    src_path: Path | None = None,
    tgt_path: Path | None = None,
    lang_pair: str | None = None,
    terms_path: Path | None = None,
    terms_hints: str | None = None,
) -> list[Pair]:
    """Dispatch on what was given: one jsonl/tsv file, or two aligned files (and a terms file beside them)."""
    langs = parse_lang_pair(lang_pair) if lang_pair else None
    if input_path is not None:
        if src_path is not None or tgt_path is not None:
            raise InputError("give either --input or --src-file/--tgt-file, not both")
        suffix = input_path.suffix.lower()
        if terms_path is not None:
            raise InputError("--terms-file goes with --src-file/--tgt-file; a jsonl or TSV --input carries its terms "
                             "in a `terms` field")
        if suffix in (".jsonl", ".json"):
            return read_jsonl(input_path, langs, terms_hints)
        if suffix in (".tsv", ".txt"):
            return read_tsv(input_path, langs)
        raise InputError(f"unsupported input format {suffix or '(no suffix)'} for {input_path}: use .jsonl or .tsv")
    if src_path is not None and tgt_path is not None:
        return read_aligned(src_path, tgt_path, langs, terms_path)
    raise InputError("no input: give --input FILE.jsonl|FILE.tsv, or --src-file and --tgt-file")


def read_glossary(path: Path, pairs: list[Pair]) -> dict[tuple[str, str], list[Term]]:
    """A TSV glossary, direction -> its terms: source<TAB>target per line, for the one language pair of `pairs`
    (an input of several pairs needs the header), or a first row of two language codes (`zh<TAB>en`) that says
    which column is which language, whichever way a pair translates. Blank lines are skipped."""
    lines = [line for line in read_text_lines(path)]
    rows = [(i, line.split("\t")) for i, line in enumerate(lines, 1) if line.strip()]
    if not rows:
        raise InputError(f"--glossary {path} has no entries")
    first = rows[0][1]
    try:
        langs = language_pair(*first) if len(first) == 2 and all(f.strip().lower() in LANGUAGE_NAMES for f in first) \
            else None
    except InputError as e:
        raise InputError(f"{path}:1: {e}") from None
    if langs is None:
        given = sorted({(p.src_lang, p.tgt_lang) for p in pairs})
        if len(given) != 1:
            raise InputError(f"--glossary {path}: the input has {len(given)} language pairs "
                             f"({', '.join('-'.join(g) for g in given) or 'none'}); start the glossary with a header "
                             f"of its two columns' language codes, e.g. zh<TAB>en")
        langs = given[0]
    else:
        rows = rows[1:]
    terms = []
    for lineno, fields in rows:
        if len(fields) != 2:
            raise InputError(f"{path}:{lineno}: expected 2 tab-separated fields (source term, target term), "
                             f"got {len(fields)}")
        try:
            (term,) = parse_terms([fields], *langs)
        except TermsError as e:
            raise InputError(f"{path}:{lineno}: {e}") from None
        terms.append(term)
    return {langs: terms, (langs[1], langs[0]): [t.reversed() for t in terms]}


def with_glossary(pairs: list[Pair], glossary: dict[tuple[str, str], list[Term]]) -> list[Pair]:
    """Each pair with the glossary's entries found in its source added to its own terms (a source term it has
    already keeps its own target)."""
    out = []
    for p in pairs:
        own = p.terms or ()
        matched = match_glossary(p.src, glossary.get((p.src_lang, p.tgt_lang), ()))
        known = {t.src for t in own}
        out.append(replace(p, terms=own + tuple(t for t in matched if t.src not in known)))
    return out
