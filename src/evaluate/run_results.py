"""run=: the results over the evaluated checkpoints in results.md, results.html, results.csv and results.json: the
paper's table (a row per run and step, a column group per test set or direction, each cell the value and its Δ to
the baseline when given; outputs.wide_table), the seeds of one configuration at one step averaged (each metric's
mean and sample standard deviation, where the runs hold two seeds or more of it: `over_seeds`, which the sweep's
comparison page shows too), and every row in full (a row per run, step and table row of its evaluation, the
baseline's Δ columns with their p-values), and a plot of each metric against the training step
(`<metric>_by_step.png`), a line per configuration (the mean over its seeds, their band), where some has two steps
or more. Each checkpoint's own evaluation (src/evaluate/outputs.py) lies in `<run>/step_<N>/` beside them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from .options import ALL_METRICS
from .outputs import csv_table, markdown_table, table_cells, versus_note, wide_markdown, wide_table
from .significance import summarise_seeds

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


def over_seeds(entries: list[dict], label_of: Callable[[str], str | None]) -> list[dict]:
    """Per configuration (`label_of`: an entry's run -> its configuration's label, None for a run of none), step and
    direction that `entries` (results.json's "evaluations") hold two seeds or more of: each metric's mean and sample
    standard deviation over them, where every seed has it."""
    groups: dict[tuple, list[dict]] = {}
    for entry in entries:
        label = label_of(str(entry.get("run")))
        if label is None:
            continue
        for row in entry.get("rows") or []:
            groups.setdefault((label, entry.get("step"), row.get("direction")), []).append(row)
    found = []
    for (label, step, direction), rows in groups.items():
        if len(rows) < 2:
            continue
        summary = {"configuration": label, "step": step, "direction": direction, "seeds": len(rows)}
        for metric in PLOTTED:
            values = [r[metric] for r in rows if isinstance(r.get(metric), (int, float))]
            if len(values) == len(rows):
                seeds = summarise_seeds(values)
                summary[metric] = {"mean": seeds.mean, "std": seeds.std}
        found.append(summary)
    return found


def _seeds_cells(found: list[dict]) -> tuple[list[str], list[list[str]]]:
    """over_seeds as table text, for the markdown and the page alike: the metrics some row has, and per row its
    configuration, step, direction, seeds and `mean ± std` per metric ("" where it has none)."""
    metrics = [m for m in PLOTTED if any(m in r for r in found)]
    return metrics, [[str(r["configuration"]), str(r["step"]), str(r["direction"]), str(r["seeds"])]
                     + [f"{r[m]['mean']:.2f} ± {r[m]['std']:.2f}" if m in r else "" for m in metrics] for r in found]


def over_seeds_markdown(found: list[dict]) -> str:
    """over_seeds as a markdown table headed by what it holds ("" when nothing has two seeds)."""
    if not found:
        return ""
    metrics, rows = _seeds_cells(found)
    lines = ["Over seeds (mean ± standard deviation):", "",
             "| configuration | step | direction | seeds | " + " | ".join(metrics) + " |",
             "|---|---|---|---|" + "---|" * len(metrics)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write(folder: Path, evaluations: list[tuple], trained_on: list[str] | None,
          configuration_of: dict[str, str] | None = None) -> list[Path]:
    """The results files and plots into `folder` (a temp dir the caller publishes); their paths.
    `configuration_of`: each run's configuration label (runs.RunCheckpoint.configuration), whose seeds are
    averaged."""
    rows, versus = combined(evaluations)
    wide = wide_table(rows, trained_on, versus)
    # each run's configuration, where there are runs to tell apart
    several = len({entry["run"] for entry in wide["rows"]}) > 1
    for entry in wide["rows"]:
        entry["configuration"] = (configuration_of or {}).get(entry["run"], "") if several else ""
    plots = plot(folder, rows, configuration_of)
    entries = [{"run": run, "step": step, "dir": str(Path(sub).relative_to(folder)), "rows": table,
                "baseline": (summary.get("baseline") or {}).get("rows")} for run, step, sub, table, summary in evaluations]
    seeds = over_seeds(entries, (configuration_of or {}).get)
    seeds_md = over_seeds_markdown(seeds)
    (folder / RESULTS_MD).write_text(f"By run and step:\n\n{wide_markdown(wide, versus)}\n"
                                     + (f"{seeds_md}\n" if seeds_md else "")
                                     + f"Every row:\n\n{markdown_table(rows, trained_on, versus)}", encoding="utf-8")
    (folder / RESULTS_HTML).write_text(html_page(rows, trained_on, versus, [p.name for p in plots], wide, seeds),
                                       encoding="utf-8")
    (folder / RESULTS_CSV).write_text(csv_table(rows, versus), encoding="utf-8")
    by_step = [{"run": e["run"], "step": e["step"], "configuration": e["configuration"], "results": e["values"]}
               for e in wide["rows"]]
    (folder / RESULTS_JSON).write_text(json.dumps({
        "by_step": by_step, "over_seeds": seeds, "configurations": configuration_of or {}, "evaluations": entries,
        "baseline": versus and {k: v for k, v in versus.items() if k != "rows"}}, ensure_ascii=False, indent=2) + "\n",
        encoding="utf-8")
    return [folder / name for name in (RESULTS_MD, RESULTS_HTML, RESULTS_CSV, RESULTS_JSON)] + plots


def html_page(rows: list[dict], trained_on: list[str] | None, versus: dict | None, plots: list[str],
              wide: dict, seeds: list[dict] = ()) -> str:
    """The tables as a page of their own (every cell escaped: run names and test sets are the user's): the paper's
    table with a header cell over each column group, the seeds of a configuration averaged, every row in full, the
    note on how the Δ values were tested, and the plots."""
    from html import escape

    headers, cells = table_cells(rows, trained_on, versus)

    def line(tag: str, texts: list[str]) -> str:
        return "<tr>" + "".join(f'<{tag}{" class=n" if number else ""}>{escape(t)}</{tag}>'
                                for t, (_, number) in zip(texts, headers)) + "</tr>"
    body = "\n".join(line("td", row) for row in cells)
    groups = "".join(f"<th colspan={len(cols)}>{escape(name)}</th>" for name, cols in wide["groups"] if cols)
    metrics = "".join(f"<th class=n>{escape(header)}</th>" for _, cols in wide["groups"] for _, header, _ in cols)
    named = any(e.get("configuration") for e in wide["rows"])
    by_step = "\n".join(
        f"<tr><td>{escape(str(e['run']))}</td><td class=n>{escape(str(e['step']))}</td>"
        + (f"<td>{escape(str(e.get('configuration') or ''))}</td>" if named else "")
        + "".join(f"<td class=n>{escape(e['cells'].get(name, {}).get(key, ''))}</td>"
                  for name, cols in wide["groups"] for key, _, _ in cols) + "</tr>" for e in wide["rows"])
    note = f"<p>{escape(versus_note(versus))} In parentheses: Δ to the baseline.</p>" if versus else ""
    images = "".join(f'<p><img src="{escape(name)}" alt="{escape(name)}"></p>' for name in plots)
    return ("<!doctype html><meta charset=utf-8><title>evaluation results</title>"
            "<style>table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}.n{text-align:right}"
            "</style>\n<h2>By run and step</h2>\n<table>\n<tr><th rowspan=2>run</th><th rowspan=2>step</th>"
            f"{'<th rowspan=2>configuration</th>' if named else ''}{groups}</tr>\n<tr>{metrics}</tr>\n{by_step}\n</table>\n{_seeds_html(seeds)}<h2>Every row</h2>\n"
            f"<table>\n{line('th', [h for h, _ in headers])}\n{body}\n</table>\n{note}{images}\n")


def _seeds_html(found: list[dict]) -> str:
    from html import escape

    if not found:
        return ""
    metrics, rows = _seeds_cells(found)
    head = "".join(f"<th class=n>{escape(m)}</th>" for m in metrics)
    # the configuration and the direction read as text, the rest as numbers
    body = "\n".join("<tr>" + "".join(f"<td>{escape(c)}</td>" if i in (0, 2) else f"<td class=n>{escape(c)}</td>"
                                       for i, c in enumerate(row)) + "</tr>" for row in rows)
    return ("<h2>Over seeds (mean ± standard deviation)</h2>\n<table>\n<tr><th>configuration</th><th class=n>step"
            f"</th><th>direction</th><th class=n>seeds</th>{head}</tr>\n{body}\n</table>\n")


def curves(rows: list[dict], metric: str, configuration_of: dict[str, str] | None = None) -> dict[tuple, list[tuple]]:
    """{(configuration, direction): [(step, mean, lowest, highest, seeds)]} of `metric` over the steps, where a
    configuration has it at two steps or more; the mean, lowest and highest over its seeds' values at each step
    (`configuration_of`: each run's configuration; a run without one is its own)."""
    label_of = configuration_of or {}
    lines: dict[tuple[str, str], dict[int, list]] = {}
    for row in rows:
        if row.get(metric) is not None:
            key = (label_of.get(row["run"]) or row["run"], row["direction"])
            lines.setdefault(key, {}).setdefault(row["step"], []).append(row[metric])
    return {key: [(step, sum(v) / len(v), min(v), max(v), len(v)) for step, v in sorted(by_step.items())]
            for key, by_step in sorted(lines.items()) if len(by_step) >= 2}


def plot(folder: Path, rows: list[dict], configuration_of: dict[str, str] | None = None) -> list[Path]:
    """`<metric>_by_step.png` per metric that `curves` has a line of: a line per configuration and direction, the
    mean over its seeds, with the band from the lowest seed to the highest where it has two or more."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for metric in PLOTTED:
        series = curves(rows, metric, configuration_of)
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for (label, direction), points in series.items():
            steps = [p[0] for p in points]
            ax.plot(steps, [p[1] for p in points], marker="o", label=f"{label} {direction}")
            if any(p[4] > 1 for p in points):
                ax.fill_between(steps, [p[2] for p in points], [p[3] for p in points], alpha=0.2)
        ax.set_xlabel("training step")
        ax.set_ylabel(metric)
        ax.legend(fontsize="small")
        fig.tight_layout()
        path = folder / f"{metric}_by_step.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
