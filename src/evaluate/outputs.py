"""The evaluation's results: one table row per direction (console via rich, markdown, csv), every
segment with its scores and spans (jsonl), and a summary.json with the settings and signatures. With
baseline=, each compared metric gets a column of its difference to the baseline (`+1.23* (p=0.004)`) and
a note under the table saying how it was tested; summary.json's `baseline` holds the full comparison.

The output dir is built in a temp dir beside it and renamed at the end to a name created then
(src/data/safe_write.py): an existing directory is never replaced or written into, two evaluations
never share a directory, and a failed write leaves nothing behind.
"""
from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from statistics import fmean

from src.data import terms
from src.data.safe_write import new_dir_beside, publish_dir
from src.data.terms import parse_terms

from src.scorer.backends import OWN_METRICS, metric_label, scale_of

from .options import ALL_METRICS
from .significance import CORPUS_METRICS

# (key in a direction's row, column header, decimals); a column shows only when some row has it.
# A backend's own metric (on a scale of its own) says its label and scale in its header, after the rest.
COLUMNS = (
    # run= (src/evaluate/run_results.py): which run and step a row of its results table evaluated
    ("run", "run", None),
    ("step", "step", None),
    ("direction", "direction", None),
    ("segments", "segments", None),
    ("format_ok", "format ok %", 1),
    # where the test set carries terms (src/data/terms.py): required terms found, and source terms required in
    # two segments or more translated as required in all of them
    ("term_success", "term success %", 1),
    ("term_consistency", "term consistency %", 1),
    ("bleu", "BLEU", 2),
    ("chrf", "chrF", 2),
    ("comet", "COMET-DA", 4),
    ("kiwi", "CometKiwi", 4),
    ("xcomet", "XCOMET", 4),
    ("xcomet_mqm", "XCOMET MQM", 4),
    ("n_minor", "minor/seg", 3),
    ("n_major", "major/seg", 3),
    ("n_critical", "critical/seg", 3),
    *((metric, metric_label(metric), 3) for metric in OWN_METRICS),
)
_HEADERS = {key: header for key, header, _ in COLUMNS}
_DECIMALS = {key: decimals for key, _, decimals in COLUMNS}
SEGMENT_MEANS = ("comet", "kiwi", "xcomet", "xcomet_mqm", "n_minor", "n_major", "n_critical", *OWN_METRICS)
TABLE_MD, TABLE_CSV, SEGMENTS_JSONL, SUMMARY_JSON = "scores.md", "scores.csv", "segments.jsonl", "summary.json"


def term_metrics(segments: list[dict]) -> dict:
    """term_success and term_consistency (%) of segments that carry their `terms` (a test set with terms), with
    the counts they are over; nothing for a set without terms or where no source holds a required term."""
    with_terms = [s for s in segments if s.get("terms") is not None]
    if not with_terms:
        return {}
    rows = [(parse_terms(s["terms"], s["src_lang"], s["tgt_lang"]), s["src"], s["translation"]) for s in with_terms]
    rate, required = terms.success(rows)
    same, repeated = terms.consistency(rows)
    out = {"terms_required": required, "terms_repeated": repeated}
    if rate is not None:
        out["term_success"] = 100.0 * rate
    if same is not None:
        out["term_consistency"] = 100.0 * same
    return out


def direction_row(direction: str, segments: list[dict], corpus) -> dict:
    """One table row: corpus BLEU/chrF (`corpus`: text_metrics.CorpusScores or None), the share of
    well-formed responses (none when the format was not judged: extract=raw), and the mean of each QE
    value over the segments that have one."""
    row = {"direction": direction, "segments": len(segments)}
    if all(s["format_ok"] is not None for s in segments):
        row["format_ok"] = 100.0 * sum(1 for s in segments if s["format_ok"]) / len(segments)
    row.update(term_metrics(segments))
    if corpus is not None:
        row.update(bleu=corpus.bleu, chrf=corpus.chrf)
    for key in SEGMENT_MEANS:
        values = [s[key] for s in segments if s.get(key) is not None]
        if values:
            row[key] = fmean(values)
    return row


def _columns(rows: list[dict], trained_on: list[str] | None = None) -> list[tuple]:
    """The columns some row has; with `trained_on`, each metric's header says "(trained)" or
    "(held out)" (XCOMET MQM and error counts follow XCOMET: columns named after their metric)."""
    cols = [c for c in COLUMNS if any(c[0] in r for r in rows)]
    if not trained_on:
        return cols
    marked = []
    for key, header, decimals in cols:
        metric = key.split("_")[0]
        if decimals is not None and key != "format_ok" and metric in ALL_METRICS:  # a column's metric: its key's first part
            header = f"{header} ({'trained' if metric in trained_on else 'held out'})"
        marked.append((key, header, decimals))
    return marked


def _cell(row: dict, key: str, decimals) -> str:
    value = row.get(key)
    if value is None:
        return ""
    return f"{value:.{decimals}f}" if decimals is not None else str(value)


def _delta_columns(versus: dict | None) -> list[tuple[str, str, int]]:
    """(metric, header, decimals) per metric compared with the baseline: ΔBLEU, ΔMetricX-24 (its label
    without the scale: the difference is signed so that + is better for every metric)."""
    return [(m, f"Δ{_name(m)}", _DECIMALS[m]) for m in versus["metrics"]] if versus else []


def _name(metric: str) -> str:
    """A metric's column header without a scale: BLEU, COMET-DA, MetricX-24."""
    return OWN_METRICS[metric].label if metric in OWN_METRICS else _HEADERS[metric]


def _compared(versus: dict, row: dict) -> dict:
    """A table row's comparisons with the baseline, by metric (run=: its results rows carry their own key)."""
    return versus["rows"].get(row.get("versus_key", row["direction"]), {})


def _delta_cell(versus: dict, row: dict, metric: str, decimals: int) -> str:
    result = _compared(versus, row).get(metric)
    if result is None:  # no segment of this row has both systems' score (a QE score the service gave as NaN)
        return ""
    return f"{result['delta']:+.{decimals}f}{'*' if result['significant'] else ''} (p={result['p_value']:.3f})"


def versus_note(versus: dict) -> str:
    """The line under a table with Δ columns: what they hold and how they were tested."""
    lower = [_name(m) for m in versus["metrics"] if not scale_of(m).higher_is_better]
    flipped = f" ({', '.join(lower)}: lower is better, so baseline minus this)" if lower else ""
    corpus = [_name(m) for m in versus["metrics"] if m in CORPUS_METRICS]
    by = f" (sacrebleu's for {' and '.join(corpus)})" if corpus else ""
    return (f"Δ: this evaluation minus the baseline {versus['dir']}, + is better{flipped}; p: paired bootstrap "
            f"over the segments, {versus['resamples']} resamples, seed {versus['seed']}{by}; "
            f"* p < {versus['alpha']:g}.")


def table_cells(rows: list[dict], trained_on: list[str] | None = None,
                versus: dict | None = None) -> tuple[list[tuple[str, bool]], list[list[str]]]:
    """The table as text: its headers (with whether the column holds numbers, right-aligned) and its rows' cells."""
    cols, deltas = _columns(rows, trained_on), _delta_columns(versus)
    headers = [(h, d is not None) for _, h, d in cols] + [(h, True) for _, h, _ in deltas]
    return headers, [[_cell(r, k, d) for k, _, d in cols] + [_delta_cell(versus, r, m, d) for m, _, d in deltas]
                     for r in rows]


# the columns of a wide table's group: what a test set's (or direction's) row holds beside its identity
_IDENTITY = ("run", "step", "direction", "segments")


def wide_table(rows: list[dict], trained_on: list[str] | None = None, versus: dict | None = None) -> dict:
    """run=: the results as a paper lays them out, a row per (run, step) and a column group per table row key of an
    evaluation (its direction, or test set and direction), each group the metrics some of its rows have, each cell
    the value and, with `versus`, its Δ to the baseline (`*` where significant). {"groups": [(name, [(key,
    header, decimals)])], "rows": [{"run", "step", "cells": {group: {key: text}}, "values": {group: {key: {value,
    delta, p_value, significant}}}}]}."""
    groups: dict[str, list] = {}
    for row in rows:
        groups.setdefault(row["direction"], []).append(row)
    layout = [(name, [c for c in _columns(members, trained_on) if c[0] not in _IDENTITY])
              for name, members in groups.items()]
    out: dict[tuple, dict] = {}
    for row in rows:
        entry = out.setdefault((row.get("run"), row.get("step")), {"run": row.get("run"), "step": row.get("step"),
                                                                   "cells": {}, "values": {}})
        cols = dict((name, c) for name, c in layout)[row["direction"]]
        compared = _compared(versus, row) if versus else {}
        cells, values = entry["cells"].setdefault(row["direction"], {}), entry["values"].setdefault(row["direction"], {})
        for key, _, decimals in cols:
            if row.get(key) is None:
                continue
            text, value = _cell(row, key, decimals), {"value": row[key]}
            found = compared.get(key)
            if found is not None:
                text += f" ({found['delta']:+.{decimals}f}{'*' if found['significant'] else ''})"
                value.update({k: found[k] for k in ("delta", "p_value", "significant")})
            cells[key], values[key] = text, value
    return {"groups": layout, "rows": list(out.values())}


def wide_markdown(wide: dict, versus: dict | None = None) -> str:
    """wide_table as markdown: one header row, each column named `<group> <metric>`."""
    cols = [(name, key, header) for name, group in wide["groups"] for key, header, _ in group]
    # each run's configuration (run= gives it: the parameters that differ between the runs, seed aside)
    named = any(entry.get("configuration") for entry in wide["rows"])
    lines = ["| run | step | " + ("configuration | " if named else "")
             + " | ".join(f"{name} {header}" for name, _, header in cols) + " |",
             "| --- | ---: | " + ("--- | " if named else "") + " | ".join("---:" for _ in cols) + " |"]
    for entry in wide["rows"]:
        lines.append(f"| {entry['run']} | {entry['step']} | " + (f"{entry.get('configuration') or ''} | " if named else "")
                     + " | ".join(entry["cells"].get(name, {}).get(key, "") for name, key, _ in cols) + " |")
    note = (f"\n{versus_note(versus)} In parentheses: Δ to the baseline.\n" if versus else "")
    return "\n".join(lines) + "\n" + note


def markdown_table(rows: list[dict], trained_on: list[str] | None = None, versus: dict | None = None) -> str:
    headers, cells = table_cells(rows, trained_on, versus)
    lines = ["| " + " | ".join(h for h, _ in headers) + " |",
             "| " + " | ".join("---:" if number else "---" for _, number in headers) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines) + "\n" + (f"\n{versus_note(versus)}\n" if versus else "")


def csv_table(rows: list[dict], versus: dict | None = None) -> str:
    """Full precision (the markdown is for reading, the csv for further processing); with `versus`, each
    compared metric's delta_<metric> and p_<metric>."""
    cols, deltas = _columns(rows), [m for m, _, _ in _delta_columns(versus)]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([k for k, _, _ in cols] + [f"{what}_{m}" for m in deltas for what in ("delta", "p")])
    for r in rows:
        compared = _compared(versus, r) if versus else {}
        writer.writerow(["" if r.get(k) is None else r[k] for k, _, _ in cols]
                        + ["" if m not in compared else compared[m][key] for m in deltas
                           for key in ("delta", "p_value")])
    return buf.getvalue()


def print_table(rows: list[dict], title: str, trained_on: list[str] | None = None, versus: dict | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    deltas = _delta_columns(versus)
    table = Table(title=title, caption=versus_note(versus) if versus else None)
    for _, header, decimals in _columns(rows, trained_on):
        table.add_column(header, justify="left" if decimals is None else "right")
    for _, header, _ in deltas:
        table.add_column(header, justify="right")
    for r in rows:
        table.add_row(*(_cell(r, k, d) for k, _, d in _columns(rows)),
                      *(_delta_cell(versus, r, m, d) for m, _, d in deltas))
    # rich cuts to 80 columns when stdout is not a terminal (a log file, a pipe): there the table
    # gets the width it needs, so no number is ever wrapped or elided
    width = None if sys.stdout.isatty() else Console(width=10_000).measure(table).maximum
    Console(width=width).print(table)


def write_outputs(out: Path, rows: list[dict], segments: list[dict], summary: dict, unique: bool,
                  trained_on: list[str] | None = None, nested: dict | None = None) -> Path:
    """All files into a temp dir next to `out`, then renamed to `out` (with `unique`, the first free
    `out-N` when `out` exists by then), returned; `nested`: {subdir: (rows, segments, summary)} of evaluations
    written inside it (a baseline evaluated with it). Raises FileExistsError (an existing `out` without
    `unique`) or OSError (disk full...); the temp dir is removed either way."""
    out = Path(out)
    with new_dir_beside(out) as tmp:
        _write_files(tmp, rows, segments, summary, trained_on)
        for name, (n_rows, n_segments, n_summary) in (nested or {}).items():
            (tmp / name).mkdir()
            _write_files(tmp / name, n_rows, n_segments, n_summary, None)
        return publish_dir(tmp, out, unique)


def _write_files(where: Path, rows: list[dict], segments: list[dict], summary: dict, trained_on) -> None:
    versus = summary.get("baseline")
    (where / TABLE_MD).write_text(markdown_table(rows, trained_on, versus), encoding="utf-8")
    (where / TABLE_CSV).write_text(csv_table(rows, versus), encoding="utf-8")
    with open(where / SEGMENTS_JSONL, "w", encoding="utf-8") as f:
        for seg in segments:
            f.write(json.dumps(seg, ensure_ascii=False) + "\n")
    (where / SUMMARY_JSON).write_text(json.dumps({**summary, "directions": rows}, ensure_ascii=False, indent=2)
                                      + "\n", encoding="utf-8")
