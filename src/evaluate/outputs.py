"""The evaluation's results: one table row per direction (console via rich, markdown, csv), every
segment with its scores and spans (jsonl), and a summary.json with the settings and signatures.

The output dir is built in a temp dir beside it and renamed into place at the end, so it is either
the previous result or the complete new one, never a mix or a half-written file.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from statistics import fmean

# (key in a direction's row, column header, decimals); a column shows only when some row has it
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
)
SEGMENT_MEANS = ("comet", "kiwi", "xcomet", "xcomet_mqm", "n_minor", "n_major", "n_critical")
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


def _columns(rows: list[dict]) -> list[tuple]:
    return [c for c in COLUMNS if any(c[0] in r for r in rows)]


def _cell(row: dict, key: str, decimals) -> str:
    value = row.get(key)
    if value is None:
        return ""
    return f"{value:.{decimals}f}" if decimals is not None else str(value)


def markdown_table(rows: list[dict]) -> str:
    cols = _columns(rows)
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


def print_table(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for _, header, decimals in _columns(rows):
        table.add_column(header, justify="left" if decimals is None else "right")
    for r in rows:
        table.add_row(*(_cell(r, k, d) for k, _, d in _columns(rows)))
    Console().print(table)


def write_outputs(out: Path, rows: list[dict], segments: list[dict], summary: dict) -> None:
    """All files into a temp dir next to `out`, then swapped in for `out` (see the module doc)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        (tmp / TABLE_MD).write_text(markdown_table(rows), encoding="utf-8")
        (tmp / TABLE_CSV).write_text(csv_table(rows), encoding="utf-8")
        with open(tmp / SEGMENTS_JSONL, "w", encoding="utf-8") as f:
            for seg in segments:
                f.write(json.dumps(seg, ensure_ascii=False) + "\n")
        (tmp / SUMMARY_JSON).write_text(json.dumps({**summary, "directions": rows}, ensure_ascii=False, indent=2)
                                        + "\n", encoding="utf-8")
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
        tmp.rename(out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
