"""run=: one results table over the evaluated checkpoints (a row per run, step and table row of its evaluation, the
baseline's Δ columns when given) in results.md, results.html, results.csv and results.json, and a plot of each metric against
the training step, a line per run (`<metric>_by_step.png`), where some run has two steps or more. Each checkpoint's
own evaluation (src/evaluate/outputs.py) lies in `<run>/step_<N>/` beside them."""
from __future__ import annotations

import json
from pathlib import Path

from .options import ALL_METRICS
from .outputs import csv_table, markdown_table, table_cells, versus_note

RESULTS_MD, RESULTS_HTML, RESULTS_CSV, RESULTS_JSON = "results.md", "results.html", "results.csv", "results.json"
# where run= of one run or sweep dir writes by default: <that dir>/eval/<time>_<test set>/
EVAL_DIR = "eval"
# every metric a table row may hold, and the share of well-formed answers
PLOTTED = ("format_ok", *ALL_METRICS)


def _key(run: str, step: int, direction: str) -> str:
    return f"{run} | step {step} | {direction}"


def combined(evaluations: list[tuple]) -> tuple[list[dict], dict | None]:
    """(table rows, the baseline comparison over them or None) from (run, step, its dir, its rows, its summary)."""
    rows, versus = [], None
    for run, step, folder, table, summary in evaluations:
        theirs = summary.get("baseline")
        for row in table:
            rows.append({"run": run, "step": step, **row, "versus_key": _key(run, step, row["direction"])})
            if theirs:
                versus = versus or {k: v for k, v in theirs.items() if k != "rows"} | {"rows": {}}
                versus["rows"][_key(run, step, row["direction"])] = theirs["rows"].get(row["direction"], {})
    return rows, versus


def write(folder: Path, evaluations: list[tuple], trained_on: list[str] | None) -> list[Path]:
    """The results files and plots into `folder` (a temp dir the caller publishes); their paths."""
    rows, versus = combined(evaluations)
    plots = plot(folder, rows)
    (folder / RESULTS_MD).write_text(markdown_table(rows, trained_on, versus), encoding="utf-8")
    (folder / RESULTS_HTML).write_text(html_page(rows, trained_on, versus, [p.name for p in plots]), encoding="utf-8")
    (folder / RESULTS_CSV).write_text(csv_table(rows, versus), encoding="utf-8")
    entries = [{"run": run, "step": step, "dir": str(Path(sub).relative_to(folder)), "rows": table,
                "baseline": (summary.get("baseline") or {}).get("rows")} for run, step, sub, table, summary in evaluations]
    (folder / RESULTS_JSON).write_text(json.dumps({"evaluations": entries, "baseline": versus and {
        k: v for k, v in versus.items() if k != "rows"}}, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return [folder / name for name in (RESULTS_MD, RESULTS_HTML, RESULTS_CSV, RESULTS_JSON)] + plots


def html_page(rows: list[dict], trained_on: list[str] | None, versus: dict | None, plots: list[str]) -> str:
    """The table as a page of its own (every cell escaped: run names and directions are the user's), the note on
    how the Δ columns were tested, and the plots."""
    from html import escape

    headers, cells = table_cells(rows, trained_on, versus)

    def line(tag: str, texts: list[str]) -> str:
        return "<tr>" + "".join(f'<{tag}{" class=n" if number else ""}>{escape(t)}</{tag}>'
                                for t, (_, number) in zip(texts, headers)) + "</tr>"
    body = "\n".join(line("td", row) for row in cells)
    note = f"<p>{escape(versus_note(versus))}</p>" if versus else ""
    images = "".join(f'<p><img src="{escape(name)}" alt="{escape(name)}"></p>' for name in plots)
    return ("<!doctype html><meta charset=utf-8><title>evaluation results</title>"
            "<style>table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}.n{text-align:right}"
            f"</style>\n<table>\n{line('th', [h for h, _ in headers])}\n{body}\n</table>\n{note}{images}\n")


def plot(folder: Path, rows: list[dict]) -> list[Path]:
    """`<metric>_by_step.png` per metric some run has at two steps or more: a line per run and direction."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines: dict[tuple[str, str], list[tuple[int, dict]]] = {}
    for row in rows:
        lines.setdefault((row["run"], row["direction"]), []).append((row["step"], row))
    written = []
    for metric in PLOTTED:
        series = {key: sorted((s, r[metric]) for s, r in points if r.get(metric) is not None)
                  for key, points in lines.items()}
        series = {key: points for key, points in series.items() if len(points) >= 2}
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for (run, direction), points in sorted(series.items()):
            ax.plot([s for s, _ in points], [v for _, v in points], marker="o", label=f"{run} {direction}")
        ax.set_xlabel("training step")
        ax.set_ylabel(metric)
        ax.legend(fontsize="small")
        fig.tight_layout()
        path = folder / f"{metric}_by_step.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
