"""The evaluation's results: one table row per direction (console via rich, markdown, csv), every
segment with its scores and spans (jsonl), and a summary.json with the settings and signatures.

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

from src.data.safe_write import new_dir_beside, publish_dir

from src.scorer.backends import OWN_METRICS, metric_label

from .options import ALL_METRICS

# (key in a direction's row, column header, decimals); a column shows only when some row has it.
# A backend's own metric (on a scale of its own) says its label and scale in its header, after the rest.
COLUMNS = (
    ("direction", "direction", None),
    ("segments", "segments", None),
    ("format_ok", "format ok %", 1),
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
SEGMENT_MEANS = ("comet", "kiwi", "xcomet", "xcomet_mqm", "n_minor", "n_major", "n_critical", *OWN_METRICS)
TABLE_MD, TABLE_CSV, SEGMENTS_JSONL, SUMMARY_JSON = "scores.md", "scores.csv", "segments.jsonl", "summary.json"


def direction_row(direction: str, segments: list[dict], corpus) -> dict:
    """One table row: corpus BLEU/chrF (`corpus`: text_metrics.CorpusScores or None), the share of
    well-formed responses, and the mean of each QE value over the segments that have one."""
    row = {"direction": direction, "segments": len(segments),
           "format_ok": 100.0 * sum(1 for s in segments if s["format_ok"]) / len(segments)}
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


def markdown_table(rows: list[dict], trained_on: list[str] | None = None) -> str:
    cols = _columns(rows, trained_on)
    lines = ["| " + " | ".join(h for _, h, _ in cols) + " |",
             "| " + " | ".join("---" if d is None else "---:" for _, _, d in cols) + " |"]
    lines += ["| " + " | ".join(_cell(r, k, d) for k, _, d in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def csv_table(rows: list[dict]) -> str:
    """Full precision (the markdown is for reading, the csv for further processing)."""
    cols = _columns(rows)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([k for k, _, _ in cols])
    for r in rows:
        writer.writerow(["" if r.get(k) is None else r[k] for k, _, _ in cols])
    return buf.getvalue()


def print_table(rows: list[dict], title: str, trained_on: list[str] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for _, header, decimals in _columns(rows, trained_on):
        table.add_column(header, justify="left" if decimals is None else "right")
    for r in rows:
        table.add_row(*(_cell(r, k, d) for k, _, d in _columns(rows)))
    # rich cuts to 80 columns when stdout is not a terminal (a log file, a pipe): there the table
    # gets the width it needs, so no number is ever wrapped or elided
    width = None if sys.stdout.isatty() else Console(width=10_000).measure(table).maximum
    Console(width=width).print(table)


def write_outputs(out: Path, rows: list[dict], segments: list[dict], summary: dict, unique: bool,
                  trained_on: list[str] | None = None) -> Path:
    """All files into a temp dir next to `out`, then renamed to `out` (with `unique`, the first free
    `out-N` when `out` exists by then), returned. Raises FileExistsError (an existing `out` without
    `unique`) or OSError (disk full...); the temp dir is removed either way."""
    out = Path(out)
    with new_dir_beside(out) as tmp:
        (tmp / TABLE_MD).write_text(markdown_table(rows, trained_on), encoding="utf-8")
        (tmp / TABLE_CSV).write_text(csv_table(rows), encoding="utf-8")
        with open(tmp / SEGMENTS_JSONL, "w", encoding="utf-8") as f:
            for seg in segments:
                f.write(json.dumps(seg, ensure_ascii=False) + "\n")
        (tmp / SUMMARY_JSON).write_text(json.dumps({**summary, "directions": rows}, ensure_ascii=False, indent=2)
                                        + "\n", encoding="utf-8")
        return publish_dir(tmp, out, unique)
