"""The markdown summary: the key numbers of a run in a few short tables."""

from __future__ import annotations

import pandas as pd

from src.scorer.backends import SCALES, scale_of, unit_score

from .series import OTHER, HeldOut, Throughput, label_metric


def _fmt(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and pd.isna(x)):
        return "-"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def render_summary(
    run_name: str,
    metrics: pd.DataFrame,
    panels: dict[str, dict[str, pd.Series]],
    breakdown: pd.DataFrame,
    wait: pd.Series,
    tp: Throughput,
    files: list[str],
    held: HeldOut | None = None,
) -> str:
    lines = [f"# Run report: {run_name}", ""]
    train_steps = int(breakdown.shape[0]) if not breakdown.empty else 0
    last = int(metrics.index.max()) if not metrics.empty else 0
    lines += [f"Training steps logged: {train_steps} (last step {last}).", ""]

    rows = []
    for panel, series in panels.items():
        for label, s in series.items():
            if s.empty:
                continue
            # best is the lowest value of a lower-is-better metric (a backend's own, logged raw)
            best_step = s.idxmax() if scale_of(panel).higher_is_better else s.idxmin()
            name = f"{panel} ({scale_of(panel).describe()})" if panel in SCALES else panel
            rows.append([name, label, _fmt(float(s.iloc[0])), _fmt(float(s.iloc[-1])),
                         f"{_fmt(float(s[best_step]))} (step {best_step})", str(len(s))])
    if rows:
        lines += ["## Reward", ""]
        lines += _table(["metric", "series", "first", "last", "best (step)", "points"], rows)
        lines.append("")

    if held is not None:
        lines += held_out_lines(held)

    if not breakdown.empty:
        total = breakdown.sum(axis=1).mean()
        lines += ["## Step time", "", f"Mean step time: {total:.1f} s.", ""]
        stage_rows = [
            [col, _fmt(float(breakdown[col].mean()), 1), f"{100 * breakdown[col].mean() / total:.0f}%"]
            for col in breakdown.columns
        ]
        lines += _table(["stage", "mean s", "share"], stage_rows)
        lines += ["", f"'{OTHER}' is step time outside the named stages (driver work, batch balancing, data loading)."]
        if "timing_s/testing" in metrics.columns and metrics["timing_s/testing"].notna().any():
            lines.append(f"Validation (not in the step time): {metrics['timing_s/testing'].dropna().mean():.1f} s "
                         f"on average, {int(metrics['timing_s/testing'].notna().sum())} times.")
        lines.append("")

    if not wait.empty:
        lines += ["## GPU wait", "",
                  f"GPUs wait on non-GPU work for {100 * wait.mean():.1f}% of the step time on average "
                  f"(max {100 * wait.max():.1f}% at step {wait.idxmax()}).", ""]

    table = tp.table.dropna(how="all")
    if not table.empty:
        lines += ["## Throughput (tokens / GPU / s)", ""]
        lines += _table(
            ["", "e2e_tps", "update_tps", "rollout (vllm_tps)"],
            [
                ["mean", *(_fmt(float(table[c].mean()), 1) for c in ("e2e_tps", "update_tps", "rollout_tps"))],
                ["last", *(_fmt(float(table[c].iloc[-1]), 1) for c in ("e2e_tps", "update_tps", "rollout_tps"))],
            ],
        )
        lines += ["", f"{tp.gpus} GPUs; tokens per GPU = {tp.method}.", ""]

    lengths = [k for k in ("response_length/mean", "prompt_length/mean", "response_length/clip_ratio")
               if k in metrics.columns and metrics[k].notna().any()]
    if lengths:
        lines += ["## Lengths (last step)", ""]
        lines += _table(["metric", "value"], [[k, _fmt(float(metrics[k].dropna().iloc[-1]), 3)] for k in lengths])
        lines.append("")

    lines += ["## Files", "", *(f"- {f}" for f in files), ""]
    return "\n".join(lines)


def held_out_lines(held: HeldOut) -> list[str]:
    """Each metric's first and last validation value and change, trained ones first; the gap is
    how much more the trained metric gained than each held-out one (held_out.png plots it), each
    gain taken on the 0-1, higher-is-better scale (backends.unit_score: an error score on 0-25 gains -change/25)."""
    lines = ["## Trained vs held-out", ""]
    if not held.panels:
        return lines + [held.why_empty[:1].upper() + held.why_empty[1:] + ".", ""]
    rows, own_scales = [], set()
    for direction, series in held.panels.items():
        gained = {label: float(s.iloc[-1] - s.iloc[0]) for label, s in series.items()}
        unit = {label: unit_score(label_metric(label), float(s.iloc[-1])) - unit_score(label_metric(label), float(s.iloc[0]))
                for label, s in series.items()}
        trained = [g for label, g in unit.items() if label.endswith("(trained)")]
        for label, s in series.items():
            gap = "" if label.endswith("(trained)") or not trained else _fmt(max(trained) - unit[label])
            metric, name = label_metric(label), label
            if metric in SCALES:  # its own scale, said where its numbers are
                name = f"{label} ({scale_of(metric).describe()})"
                own_scales.add(metric)
            rows.append([direction, name, _fmt(float(s.iloc[0])), _fmt(float(s.iloc[-1])), _fmt(gained[label]), gap])
    lines += _table(["direction", "metric", "first", "last", "change", "gap to trained"], rows)
    notes = ["", "gap to trained: the largest change of a trained metric minus this metric's change; "
                 "a growing gap means the policy gains on the reward model more than on other judges."]
    for metric in sorted(own_scales):
        scale = scale_of(metric)
        notes.append(f"{metric}: first, last and change are its own scale ({scale.describe()}); in the gap its change "
                     f"counts as {'+' if scale.higher_is_better else '-'}change/{scale.hi - scale.lo:g} (0-1, higher is "
                     f"better, as the COMET-family metrics).")
    return lines + notes + [""]
