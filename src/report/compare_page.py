"""A comparison written out: compare.md and compare.html (one table row per configuration, the plots
below it on the page; the evaluations of the checkpoints found in the sweep's eval/, src/report/evaluations.py)
and compare.json (the same numbers, unrounded). Every run-provided string (parameter values, errors, paths) is
HTML-escaped on the page."""
from __future__ import annotations

import html
import json
from pathlib import Path

from src.evaluate.run_results import over_seeds_markdown
from src.record.run_params import FAILED, RunEntry

from .compare import Comparison, Configuration, Spread
from .compare_plots import file_name
from .evaluations import Evaluation, over_seeds, page_link
from .series import TRAIN_SCORE

TRAINING_STEP_METRICS = (TRAIN_SCORE, "timing_s/step")  # logged at every training step
COMPARE_HEADER = "# Comparison: "  # compare.md's first line: how a later report knows the dir is its own
RANGE_NOTE = ("step: the step each configuration is compared at, the last training step all its seeds reached "
              "(the steps they reached in brackets where they differ: a seed failed or is still training); "
              "final: each seed's value at that step; best: each seed's best value up to it (none where no "
              "direction is better: length, entropy, KL); each as the mean over the configuration's seeds, then "
              "[min, max] over them when there are several (max - min is the spread, in compare.json); a value "
              "marked @N is compared at step N (validation runs every test_freq steps); seeds marked failed "
              "ended with an error")


def primary(name: str) -> bool:
    """The metrics compare.md shows: the trained reward and each validation reward (the rest: compare.html,
    compare.json)."""
    return name == TRAIN_SCORE or name.startswith("val-core/")


def _fmt(x: float) -> str:
    return f"{x:.1f}" if abs(x) >= 100 else f"{x:.4f}"


def _cell(s: Spread | None, runs: int, at: int | None = None) -> str:
    if s is None:
        return "-"
    return _fmt(s.mean) + (f" [{_fmt(s.min)}, {_fmt(s.max)}]" if runs > 1 else "") + (
        f" @{at}" if at is not None else "")


def _states(config: Configuration) -> str:
    return ", ".join(f"{n} {state}" for state, n in sorted(config.states().items()))


def _seeds(config: Configuration) -> str:
    """`2 (1, 2 failed)`: the seeds, each failed one marked."""
    runs = sorted(config.runs, key=lambda r: (r.seed is None, r.seed))
    return f"{len(runs)} (" + ", ".join(("?" if r.seed is None else str(r.seed))
                                        + (" failed" if r.state == FAILED else "") for r in runs) + ")"


def _step(config: Configuration) -> int | None:
    """The training step the configuration is compared at (of the trained reward, logged every step;
    validation metrics only every test_freq)."""
    result = next((config.metrics[k] for k in TRAINING_STEP_METRICS if k in config.metrics), None)
    return None if result is None else result.step


def _step_cell(config: Configuration) -> str:
    result = next((config.metrics[k] for k in TRAINING_STEP_METRICS if k in config.metrics), None)
    if result is None:
        return "-"
    lo, hi = result.last_step
    return str(result.step) + (f" (reached {lo}-{hi})" if lo != hi else "")


def table(comparison: Comparison, only_primary: bool = False) -> tuple[list[str], list[list[str]]]:
    metrics = [m for m in comparison.metrics if primary(m.name) or not only_primary]
    header = [*comparison.swept, "seeds", "runs", "step"]
    for m in metrics:
        header += [f"{m.short} final", f"{m.short} best"]
    rows = []
    for config in comparison.configurations:
        step = _step(config)
        row = [config.params[k] for k in comparison.swept] + [_seeds(config), _states(config), _step_cell(config)]
        for m in metrics:
            r = config.metrics.get(m.name)
            at = None if r is None or r.step == step else r.step
            row += [_cell(r.final, r.runs, at), _cell(r.best, r.runs, at)] if r else ["-", "-"]
        rows.append(row)
    return header, rows


def _problems(comparison: Comparison, entries: list[RunEntry]) -> list[tuple[str, str]]:
    """(run dir, what is wrong) for every failed run and every run without metrics."""
    out = [(str(e.run_dir), f"failed: {e.error or 'no error recorded'}") for e in entries if e.state == FAILED]
    out += [(str(d), f"nothing to compare: {why}") for d, why in comparison.unusable.items()]
    return out


def _labels(comparison: Comparison) -> dict[str, str]:
    """A run dir's name -> its configuration's label (how an evaluation names its runs)."""
    return {r.run_dir.name: c.label for c in comparison.configurations for r in c.runs}


def _evaluations_md(evaluations: list[Evaluation], comparison: Comparison) -> list[str]:
    lines = []
    for e in evaluations:
        n = len(e.results.get("evaluations") or [])
        lines += ["", f"### {e.dir.parent.name}/{e.dir.name} ({n} checkpoints)", "", e.table.rstrip()]
        # an evaluation written since it averages seeds itself has that table in its own (results.json over_seeds)
        seeds = "" if "over_seeds" in e.results else over_seeds_markdown(over_seeds(e, _labels(comparison)))
        lines += ["", *seeds.rstrip("\n").splitlines()] if seeds else []
    return ["", "## Evaluations of the checkpoints (python -m src.evaluate run=)", *lines] if lines else []


def render_markdown(title: str, comparison: Comparison, entries: list[RunEntry],
                    evaluations: list[Evaluation] = ()) -> str:
    header, rows = table(comparison, only_primary=True)
    rest = [m.short for m in comparison.metrics if not primary(m.name)]
    lines = [f"{COMPARE_HEADER}{title}", "",
             f"{len(entries)} runs in {len(comparison.configurations)} configurations; swept: "
             f"{', '.join(comparison.swept) or 'nothing (the runs differ in seed only)'}.", "",
             "| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|",
             *("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows), "", RANGE_NOTE + "."]
    if rest:
        lines += ["", f"The other {len(rest)} metrics ({', '.join(rest)}) are in compare.html and compare.json."]
    problems = _problems(comparison, entries)
    if problems:
        lines += ["", "## Runs that failed or have nothing to compare", ""]
        lines += [f"- `{d}`: {why}" for d, why in problems]
    if comparison.absent:
        lines += ["", f"Not logged by any run: {', '.join(comparison.absent)}."]
    lines += _evaluations_md(list(evaluations), comparison)
    lines += ["", "## Plots", "", *(f"- {file_name(m)}: {m.title}" for m in comparison.metrics), ""]
    return "\n".join(lines)


_STYLE = """body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:right}th{background:#f3f3f3}
td.param{text-align:left}tr.failed td{background:#fdecea}img{max-width:100%;display:block;margin:1em 0}
.note{color:#555;font-size:12px}"""


def render_html(title: str, comparison: Comparison, entries: list[RunEntry], evaluations: list[Evaluation] = (),
                page_dir: Path | None = None) -> str:
    """`page_dir`: where the page is written, which links to each evaluation's own page are relative to."""
    esc = html.escape
    header, rows = table(comparison)
    n_params = len(comparison.swept)
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for config, row in zip(comparison.configurations, rows):
        cls = ' class="failed"' if config.states().get(FAILED) else ""
        cells = "".join(f'<td class="param">{esc(c)}</td>' if i < n_params + 3 else f"<td>{esc(c)}</td>"
                        for i, c in enumerate(row))
        body.append(f"<tr{cls}>{cells}</tr>")
    problems = "".join(f"<li><code>{esc(d)}</code>: {esc(why)}</li>" for d, why in _problems(comparison, entries))
    plots = "".join(f'<h3>{esc(m.title)}</h3><img src="{esc(file_name(m))}" alt="{esc(m.name)}">'
                    for m in comparison.metrics)
    absent = (f'<p class="note">Not logged by any run: {esc(", ".join(comparison.absent))}.</p>'
              if comparison.absent else "")
    evaluated = "".join(f'<li><a href="{esc(page_link(e, page_dir or e.dir))}">{esc(e.dir.name)}</a>: '
                        f'{len(e.results.get("evaluations") or [])} checkpoints</li>' for e in evaluations)
    if evaluated:
        absent += f"<h2>Evaluations of the checkpoints (python -m src.evaluate run=)</h2><ul>{evaluated}</ul>"
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{esc("Comparison: " + title)}</title>'
            f"<style>{_STYLE}</style></head><body><h1>{esc('Comparison: ' + title)}</h1>"
            f"<p>{len(entries)} runs in {len(comparison.configurations)} configurations; swept: "
            f"{esc(', '.join(comparison.swept) or 'nothing (the runs differ in seed only)')}.</p>"
            f'<table class="compare"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
            f'<p class="note">{esc(RANGE_NOTE)}.</p>'
            + (f"<h2>Runs that failed or have nothing to compare</h2><ul>{problems}</ul>" if problems else "")
            + absent + f"<h2>Plots</h2>{plots}</body></html>\n")


def render_json(comparison: Comparison, entries: list[RunEntry], evaluations: list[Evaluation] = ()) -> str:
    config_of = {str(r.run_dir): c.label for c in comparison.configurations for r in c.runs}
    body = {
        "swept": comparison.swept,
        "metrics": [{"name": m.name, "title": m.title, "better": m.better, "role": m.role or None,
                     "plot": file_name(m)} for m in comparison.metrics],
        "absent_metrics": comparison.absent,
        "configurations": [{"label": c.label, "params": c.params, "seeds": c.seeds,
                            "runs": [str(r.run_dir) for r in c.runs], "states": c.states(),
                            "metrics": {name: r.to_dict() for name, r in c.metrics.items()}}
                           for c in comparison.configurations],
        "runs": [{"run_dir": str(e.run_dir), "configuration": config_of[str(e.run_dir)], "params": e.params,
                  "seed": e.seed, "state": e.state, "error": e.error,
                  "nothing_to_compare": comparison.unusable.get(e.run_dir)} for e in entries],
        "evaluations": [{"dir": str(e.dir), "results": e.results, "over_seeds": over_seeds(e, _labels(comparison))}
                        for e in evaluations],
    }
    return json.dumps(body, indent=2, ensure_ascii=False) + "\n"
