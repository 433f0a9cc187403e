"""Read parallel text into `Pair`s: jsonl, two aligned text files, or TSV.

Every problem with the input raises `InputError` with a message that names the file (and line),
so the CLI can print one line and exit 2 before writing anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


class InputError(Exception):
    """Bad input: the CLI prints the message on one line and exits 2."""


@dataclass(frozen=True)
class Pair:
    src: str
    tgt: str
    src_lang: str
    tgt_lang: str


def parse_lang_pair(value: str) -> tuple[str, str]:
    """'zh-en' -> ('zh', 'en')."""
    parts = value.strip().split("-")
    if len(parts) != 2 or not all(parts):
        raise InputError(f"language pair must look like 'zh-en', got {value!r}")
    return parts[0], parts[1]


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise InputError(f"input file not found: {path}")


def _langs_of(record: dict, default: tuple[str, str] | None, where: str) -> tuple[str, str]:
    if record.get("src_lang") and record.get("tgt_lang"):
        return str(record["src_lang"]), str(record["tgt_lang"])
    for key in ("lang_pair", "lp"):
        if record.get(key):
            try:
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


def read_jsonl(path: Path, default_langs: tuple[str, str] | None) -> list[Pair]:
    """One object per line with `src`, `tgt` and `src_lang`/`tgt_lang` or `lang_pair`."""
    _require_file(path)
    pairs = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{where}: not valid JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise InputError(f"{where}: expected a JSON object per line")
            missing = [c for c in ("src", "tgt") if c not in record]
            if missing:
                found = ", ".join(record) or "none"
                raise InputError(f"{where}: missing column(s) {', '.join(missing)} (found: {found})")
            src_lang, tgt_lang = _langs_of(record, default_langs, where)
            src, tgt = _text(record["src"], where, "src"), _text(record["tgt"], where, "tgt")
            pairs.append(Pair(src, tgt, src_lang, tgt_lang))
    return pairs


def read_tsv(path: Path, default_langs: tuple[str, str] | None) -> list[Pair]:
    """Tab-separated, no quoting. With a header row naming `src` and `tgt` (and optionally
    `src_lang`/`tgt_lang`/`lang_pair`), columns are found by name; without one, each line must
    have exactly two fields, source then target, and --lang-pair gives the languages."""
    _require_file(path)
    with path.open(encoding="utf-8", newline="") as f:
        lines = [line.rstrip("\r\n") for line in f]
    if not lines:
        return []
    first = lines[0].split("\t")
    header = [h.strip() for h in first] if {"src", "tgt"} <= {h.strip() for h in first} else None
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
        pairs.append(Pair(record["src"], record["tgt"], src_lang, tgt_lang))
    return pairs


def read_aligned(src_path: Path, tgt_path: Path, langs: tuple[str, str] | None) -> list[Pair]:
    """Two files, line i of one translating line i of the other."""
    _require_file(src_path)
    _require_file(tgt_path)
    if langs is None:
        raise InputError("two aligned text files need --lang-pair (e.g. --lang-pair zh-en)")
    src_lines = src_path.read_text(encoding="utf-8").splitlines()
    tgt_lines = tgt_path.read_text(encoding="utf-8").splitlines()
    if len(src_lines) != len(tgt_lines):
        raise InputError(
            f"aligned files differ in length: {src_path} has {len(src_lines)} lines, {tgt_path} has {len(tgt_lines)}"
        )
    return [Pair(s, t, *langs) for s, t in zip(src_lines, tgt_lines)]


def read_pairs(
    input_path: Path | None = None,
    src_path: Path | None = None,
    tgt_path: Path | None = None,
    lang_pair: str | None = None,
) -> list[Pair]:
    """Dispatch on what was given: one jsonl/tsv file, or two aligned files."""
    langs = parse_lang_pair(lang_pair) if lang_pair else None
    if input_path is not None:
        if src_path is not None or tgt_path is not None:
            raise InputError("give either --input or --src-file/--tgt-file, not both")
        suffix = input_path.suffix.lower()
        if suffix in (".jsonl", ".json"):
            return read_jsonl(input_path, langs)
        if suffix in (".tsv", ".txt"):
            return read_tsv(input_path, langs)
        raise InputError(f"unsupported input format {suffix or '(no suffix)'} for {input_path}: use .jsonl or .tsv")
    if src_path is not None and tgt_path is not None:
        return read_aligned(src_path, tgt_path, langs)
    raise InputError("no input: give --input FILE.jsonl|FILE.tsv, or --src-file and --tgt-file")
