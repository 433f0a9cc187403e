"""baseline=: what this evaluation is compared with. An earlier evaluation, read from its output dir (segments.jsonl
and summary.json, as src/evaluate/outputs.py writes them), or a model or a hypotheses file, which the CLI evaluates
first into <out>/baseline/ (baseline_kind says which; src/evaluate/cli.py). Either is checked against this
evaluation (an earlier one before anything is generated): the same test set, the same segments (index, test set, source, reference; with samples=,
the same answers a sentence) in the same order, and at least one metric both compute. A paired test over other
segments would be a number about nothing, so any difference is refused in one line naming it. Where both judged
the format (extract= other than raw), the share of well-formed answers is compared too (FORMAT)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .options import ALL_METRICS, TEXT_METRICS, EvalOptions, UsageError
from .outputs import SEGMENTS_JSONL, SUMMARY_JSON
from .testset import TestRow

# what a baseline segment must hold: its identity (checked against this evaluation's rows) and what was scored
IDENTITY = ("index", "data_source", "src", "ref")
NEEDED = IDENTITY + ("tgt_lang", "translation")
# the share of well-formed answers (the table's `format ok %` column), compared as a metric where both judged it
FORMAT = "format_ok"
# what baseline= names (baseline_kind)
EVALUATION, MODEL, HYPOTHESES = "evaluation", "model", "hypotheses"
# under this evaluation's output dir: a baseline= model's or hypotheses file's own evaluation
BASELINE_DIR = "baseline"


def segment_key(record: dict) -> tuple[int, int]:
    """A segment record's identity within an evaluation: its row's index and its answer's number (samples=)."""
    return record["index"], record.get("sample", 0)


@dataclass(frozen=True)
class Baseline:
    dir: Path
    by_key: dict            # its segment records (segments.jsonl lines) by segment_key
    metrics: tuple          # the metrics both evaluations compute, in this evaluation's order; FORMAT last
    evaluation: str | None = None  # a model's or hypotheses file's evaluation made here: BASELINE_DIR


def baseline_kind(path: str) -> str:
    """EVALUATION (a dir with an evaluation's files), MODEL (any other dir: the checkpoint resolver checks it) or
    HYPOTHESES (a file); UsageError when nothing is there."""
    where = Path(path).expanduser()
    if where.is_file():
        return HYPOTHESES
    if not where.is_dir():
        raise UsageError(f"baseline: no such file or directory: {where} (give an earlier evaluation's output dir, a "
                         f"model dir or a hypotheses file)")
    if (where / SEGMENTS_JSONL).exists() or (where / SUMMARY_JSON).exists():
        return EVALUATION
    return MODEL


def _short(text) -> str:
    """A value as a one-line message shows it: repr (newlines escaped), long texts cut."""
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _test_set(summary: dict) -> str:
    """What an evaluation's summary.json says it evaluated: `testsets <name>(<format>)+...` or `data <file name>`."""
    sets = summary.get("testsets")
    if sets:
        return "testsets " + "+".join(f"{s.get('name')}({s.get('format')})" if isinstance(s, dict) else repr(s)
                                      for s in sets)
    return f"data {Path(str(summary.get('data'))).name}"


def _records(path: Path) -> list[dict]:
    records = []
    # split on "\n" only, as outputs.py writes one JSON object a line (U+2028 may sit inside a string)
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or any(k not in record for k in NEEDED):
            raise UsageError(f"baseline: line {n} of {path} is not a segment record of python -m src.evaluate "
                             f"(it needs {', '.join(NEEDED)})")
        records.append(record)
    return records


def read_baseline(path: str, opts: EvalOptions, rows: list[TestRow], this_test_set: str) -> Baseline:
    """The baseline at `path`, checked against this evaluation (`rows`, the test set `this_test_set` as
    _test_set describes one); UsageError, one line, on anything that would make the comparison wrong."""
    where = Path(path).expanduser()
    if not where.is_dir():
        raise UsageError(f"baseline: no such directory: {where} (give an earlier evaluation's output dir, "
                         f"which holds {SEGMENTS_JSONL} and {SUMMARY_JSON})")
    for name in (SEGMENTS_JSONL, SUMMARY_JSON):
        if not (where / name).is_file():
            raise UsageError(f"baseline: {where} has no {name}: not an output dir of python -m src.evaluate "
                             f"(one holds {SEGMENTS_JSONL} and {SUMMARY_JSON})")
    try:
        summary = json.loads((where / SUMMARY_JSON).read_text(encoding="utf-8"))
    except ValueError:  # not UTF-8, not JSON
        raise UsageError(f"baseline: {where / SUMMARY_JSON} is not JSON: not an evaluation's summary") from None
    try:
        records = _records(where / SEGMENTS_JSONL)
    except UnicodeDecodeError:
        raise UsageError(f"baseline: {where / SEGMENTS_JSONL} is not UTF-8 text: not an evaluation's "
                         f"segments") from None
    options = summary.get("options") if isinstance(summary, dict) else None
    theirs = options.get("metrics") if isinstance(options, dict) else None
    if not isinstance(theirs, list) or not isinstance(summary.get("testsets") or [], list):
        raise UsageError(f"baseline: {where / SUMMARY_JSON} has no options.metrics list (or a testsets entry that "
                         f"is no list): not an evaluation's summary")
    if _test_set(summary) != this_test_set:
        raise UsageError(f"baseline: {where} evaluated {_test_set(summary)} and this evaluation {this_test_set}; "
                         f"compare evaluations of the same test set")
    return checked(where, records, theirs, opts, rows)


def checked(where: Path, records: list[dict], theirs: list, opts: EvalOptions, rows: list[TestRow],
            evaluation: str | None = None) -> Baseline:
    """A baseline's segment records (`theirs`: the metrics it computed) checked against this evaluation's rows and
    options: the same segments in the same order, as many answers a sentence, a metric in common."""
    answered = [(row, k) for row in rows for k in range(opts.samples)]
    if len(records) != len(answered):
        each = f" ({len(rows)} rows x samples={opts.samples})" if opts.samples > 1 else ""
        raise UsageError(f"baseline: {where} scored {len(records)} segments and this evaluation would score "
                         f"{len(answered)}{each}; evaluate the same rows (the same test set and limit=) with as "
                         f"many samples=")
    for n, (record, (row, k)) in enumerate(zip(records, answered), 1):
        for key in IDENTITY:
            if record[key] != getattr(row, key):
                raise UsageError(f"baseline: segment {n} differs: {key} {_short(record[key])} in {where}, "
                                 f"{_short(getattr(row, key))} here; compare evaluations of the same segments, "
                                 f"in the same order")
        if record.get("sample", 0) != k:
            raise UsageError(f"baseline: segment {n} of {where} is answer {record.get('sample', 0)} of its sentence "
                             f"and here answer {k}; evaluate with the baseline's samples=")
    common = tuple(m for m in opts.metrics if m in theirs and m in ALL_METRICS)
    if not common:
        raise UsageError(f"baseline: {where} scored {','.join(map(str, theirs))} and this evaluation scores "
                         f"{','.join(opts.metrics)}: no metric in common; add one of its metrics to metrics=")
    for metric in (m for m in common if m not in TEXT_METRICS):  # BLEU/chrF are computed from the translations
        lacking = next((n for n, r in enumerate(records, 1) if metric not in r), None)
        if lacking:
            raise UsageError(f"baseline: segment {lacking} of {where / SEGMENTS_JSONL} has no {metric} score "
                             f"though its {SUMMARY_JSON} lists {metric}; the dir is incomplete or edited")
    if opts.extract != "raw" and all(isinstance(r.get(FORMAT), bool) for r in records):
        common += (FORMAT,)
    return Baseline(dir=where.resolve(), by_key={segment_key(r): r for r in records}, metrics=common,
                    evaluation=evaluation)


def describe_test_set(opts: EvalOptions, sets: list) -> str:
    """This evaluation's test set as _test_set describes an earlier one's (sets: testsets.TestSet)."""
    if sets:
        return "testsets " + "+".join(f"{s.name}({s.kind})" for s in sets)
    return f"data {Path(opts.data).name}"
