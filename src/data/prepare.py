"""Parallel text -> verl parquet with translation prompts.

    python -m src.data.prepare --input wmt_zh_en.jsonl --name wmt_zh_en --split train \\
        --template chat --directions both --tokenizer /models/Qwen2.5-3B-Instruct \\
        --max-prompt-tokens 256 --out data/wmt_zh_en/train.parquet

Inputs: `--input FILE.jsonl` (src, tgt, src_lang/tgt_lang or lang_pair per line), `--input FILE.tsv`
(header with src, tgt[, src_lang, tgt_lang | lang_pair], or two columns with --lang-pair), or
`--src-file A --tgt-file B --lang-pair zh-en` (aligned lines). Terminology (src/data/terms.py, docs/terminology.md):
a `terms` list per jsonl line or TSV row, WMT23's `hints` with `--terms-hints term|rand`, `--terms-file` beside
aligned files (a JSON list per line), or `--glossary FILE.tsv` matched against each source; the terms are kept in
each row's extra_info and given in the prompt by the `*_terms` templates. Writes the parquet and
`<out>.stats.json` next to it (both atomically, together) and prints a table. Bad input (including an
output dir that cannot be written, or an existing output without --overwrite): one line on stderr,
exit status 2, nothing written. A write that fails anyway (disk full): one line, exit 1, the earlier
files as they were.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .filters import (
    LengthLimits,
    cap_per_direction,
    drop_empty_and_duplicates,
    expand_directions,
    filter_by_length,
    new_counts,
)
from .parquet_io import json_writer, parquet_writer
from .readers import HINTS, InputError, read_glossary, read_pairs, with_glossary
from .rows import SPLITS, make_row
from .safe_write import atomic_files, os_reason, writable_dir_problem
from .stats import build_stats, format_table
from .templates import TEMPLATES, TERMS_SUFFIX, UnknownTemplateError, expected_format, gives_terms
from .tokens import TINY_TOKENIZER_HINT, load_tokenizer, not_the_policys, token_lengths

EXIT_BAD_INPUT, EXIT_WRITE_FAILED = 2, 1
# Ctrl-C: 128 + SIGINT, as the shell reports it
EXIT_INTERRUPTED = 130


class WriteError(Exception):
    """The checked output could not be written after all (disk full); nothing was replaced."""


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage + error on two lines; the contract is one clear line, exit 2."""

    def error(self, message):
        sys.stderr.write(f"prepare: error: {message}\n")
        sys.exit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="python -m src.data.prepare", description=__doc__.split("\n\n")[0])
    src = p.add_argument_group("input (one of)")
    src.add_argument("--input", type=Path, help="a .jsonl or .tsv file of pairs")
    src.add_argument("--src-file", type=Path, help="source side, one sentence per line")
    src.add_argument("--tgt-file", type=Path, help="target side, aligned with --src-file")
    p.add_argument("--lang-pair", help="languages when the input does not say, e.g. zh-en")
    p.add_argument(
        "--directions",
        default="as-is",
        help='"as-is" (default), "both" (each pair and its reverse), or a list such as "zh-en,en-zh"',
    )
    p.add_argument("--glossary", type=Path,
                   help="a TSV glossary (source<TAB>target per line, or a header of two language codes) whose "
                        "entries found in a source become that segment's terms")
    p.add_argument("--terms-file", type=Path,
                   help="with --src-file/--tgt-file: line i holds pair i's terms as a JSON list (WMT23's *.term.proper)")
    p.add_argument("--terms-hints", choices=HINTS,
                   help="a WMT23 terminology jsonl: the terms of its `hints` to keep (term: the proper ones, "
                        "rand: the random ones)")
    p.add_argument("--name", help="dataset name for data_source (default: the input file's stem)")
    p.add_argument("--split", required=True, help=f"one of {', '.join(SPLITS)}")
    p.add_argument("--template", required=True, help=f"one of {', '.join(TEMPLATES)}")
    # not required= here: argparse's refusal would not say what to give on a machine without weights
    p.add_argument("--tokenizer", type=Path, metavar="DIR (required)",
                   help=f"required: local tokenizer/model directory ({TINY_TOKENIZER_HINT})")
    p.add_argument("--max-src-tokens", type=int)
    p.add_argument("--max-tgt-tokens", type=int, help="reference length; keep under max_response_length")
    p.add_argument("--max-prompt-tokens", type=int, help="as verl counts it; set data.max_prompt_length to it")
    p.add_argument("--max-per-direction", type=int, help="keep a seeded random sample of at most N per direction")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, type=Path, help="output .parquet")
    p.add_argument("--stats", type=Path, help="stats json (default: <out without .parquet>.stats.json)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out and stats file")
    return p


def _check_args(args) -> None:
    if args.tokenizer is None:
        raise InputError(f"--tokenizer is required: the local directory of the policy's tokenizer (e.g. "
                         f"/models/Qwen2.5-3B), whose lengths verl will count; {TINY_TOKENIZER_HINT}")
    if args.split not in SPLITS:
        raise InputError(f"unknown split {args.split!r} (known: {', '.join(SPLITS)})")
    try:
        expected_format(args.template)
    except UnknownTemplateError as e:
        raise InputError(str(e)) from None
    if args.out.suffix != ".parquet":
        raise InputError(f"--out must end in .parquet (verl reads by suffix), got {args.out}")
    for flag in ("max_src_tokens", "max_tgt_tokens", "max_prompt_tokens", "max_per_direction"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            raise InputError(f"--{flag.replace('_', '-')} must be positive, got {value}")


def _stats_path(args) -> Path:
    return args.stats or args.out.with_suffix(".stats.json")


def _check_outputs(args) -> None:
    """Before any work: the output dirs can be written, and nothing there is replaced unasked."""
    if _stats_path(args).resolve() == args.out.resolve():
        raise InputError(f"--stats {args.stats} is the --out file; give the stats file its own name")
    for path in (args.out, _stats_path(args)):
        if path.exists() and (path.is_dir() or not args.overwrite):
            raise InputError(f"{path} is a directory" if path.is_dir() else
                             f"{path} exists; give --overwrite to replace it, or another --out/--stats")
        problem = writable_dir_problem(path.parent)
        if problem:
            raise InputError(f"cannot write {path}: {problem}")


def _default_name(args) -> str:
    source = args.input or args.src_file
    return source.stem if source is not None else "dataset"


def prepare(args) -> dict:
    """Everything after argument parsing; raises InputError before writing anything."""
    _check_args(args)
    _check_outputs(args)
    pairs = read_pairs(args.input, args.src_file, args.tgt_file, args.lang_pair, args.terms_file, args.terms_hints)
    if args.glossary is not None:
        pairs = with_glossary(pairs, read_glossary(args.glossary, pairs))
    if gives_terms(args.template) and all(p.terms is None for p in pairs):
        raise InputError(f"--template {args.template} gives each row's terms in its prompt, but the input has none: "
                         f"add --glossary FILE.tsv, a `terms` field per line, --terms-hints or --terms-file "
                         f"(docs/terminology.md), or use --template {args.template.removesuffix(TERMS_SUFFIX)}")
    tokenizer = load_tokenizer(args.tokenizer)
    name = args.name or _default_name(args)

    counts = new_counts()
    examples = expand_directions(pairs, args.directions, counts)
    examples = drop_empty_and_duplicates(examples, counts)
    lengths = token_lengths(tokenizer, examples, args.template)
    limits = LengthLimits(args.max_src_tokens, args.max_tgt_tokens, args.max_prompt_tokens)
    examples, lengths = filter_by_length(examples, lengths, limits, counts)
    examples, lengths = cap_per_direction(examples, lengths, args.max_per_direction, args.seed, counts)
    if not examples:
        rows_in = sum(c.rows_in for c in counts.values())
        raise InputError(f"no rows left after filtering ({rows_in} in); nothing written")
    for e in examples:
        counts[e.lang_pair].rows_out += 1

    rows = [
        make_row(e, dataset_name=name, template=args.template, split=args.split, index=i)
        for i, e in enumerate(examples)
    ]
    stats = build_stats(
        counts,
        examples,
        lengths,
        meta={
            "output": str(args.out),
            "dataset_name": name,
            "split": args.split,
            "template": args.template,
            "response_format": expected_format(args.template),
            "tokenizer": str(args.tokenizer),
            # None, or the line saying these lengths are not what training counts (tokens.not_the_policys)
            "tokenizer_note": not_the_policys(args.tokenizer, tokenizer),
            "limits": {
                "max_src_tokens": args.max_src_tokens,
                "max_tgt_tokens": args.max_tgt_tokens,
                "max_prompt_tokens": args.max_prompt_tokens,
                "max_per_direction": args.max_per_direction,
            },
        },
    )
    try:
        atomic_files({args.out: parquet_writer(rows), _stats_path(args): json_writer(stats)})
    except OSError as e:
        raise WriteError(f"cannot write {args.out}: {os_reason(e)}; nothing was written") from None
    return stats


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        stats = prepare(args)
    except KeyboardInterrupt:  # one line, no traceback (issue 33): the files are written whole or not at all
        sys.stderr.write(f"prepare: stopped (interrupt): nothing was written to {args.out}\n")
        return EXIT_INTERRUPTED
    except (InputError, WriteError) as e:
        sys.stderr.write(f"prepare: error: {' '.join(str(e).splitlines())}\n")
        return EXIT_BAD_INPUT if isinstance(e, InputError) else EXIT_WRITE_FAILED
    print(format_table(stats))
    if stats.get("tokenizer_note"):
        print(f"note: {stats['tokenizer_note']}")
    print(f"wrote {stats['total']['rows_out']} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
