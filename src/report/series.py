"""The numbers behind each plot, derived from verl's metric names (no plotting here).

verl 0.9.1 metric names used:
- training reward: `critic/score/mean` (mean sequence score = what the reward function returned)
- validation: `val-core|val-aux/<data_source>/<var>/mean@<n>` from `_val_metrics_update`; <var> is
  `reward` (the score) or a key of the reward function's returned dict. data_source has a slash
  ("wmt_zh_en/zh-en"), so names are parsed from both ends.
- timing: `timing_s/<stage>` from `marked_timer` (gen, reward, old_log_prob, ref, values, adv,
  update_critic, update_actor, save_checkpoint, ...; `step` is the whole step; `testing` is the
  validation that V1 runs after the step timer closed).
- lengths: `response_length/mean`, `prompt_length/mean` (tokens, per sample); `perf/total_num_tokens`,
  `perf/time_per_step`, `perf/throughput` (= tokens / (step time * n_gpus)).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from src.scorer.backends import METRICS as QE_METRICS
from src.scorer.backends import OWN_METRICS

from .run_files import RunData, RunShape

TRAIN_SCORE = "critic/score/mean"
_VAL_MEAN = re.compile(r"^(?:val-core|val-aux)/(?P<ds>.+)/(?P<var>[^/]+)/mean@(?P<n>\d+)$")
# Vars that are the total reward under other names, not components of it. verl adds `acc` (= score)
# when the reward function returns a bare float.
_TOTAL_VARS = {"reward", "score", "acc", "acc_success_only"}
_NOT_COMPONENTS = _TOTAL_VARS | {"step", "uid", "split"}

# (metric stage, label) in pipeline order; the six first.
STAGES = [
    ("gen", "generation"),
    ("reward", "reward"),
    ("old_log_prob", "old log-prob"),
    ("ref", "reference"),
    ("values", "values"),
    ("adv", "advantage"),
    ("update_critic", "critic update"),
    ("update_actor", "actor update"),
    ("update_weights", "weight sync"),
    ("save_checkpoint", "checkpoint"),
]
OTHER = "other"
# Stages in which the training GPUs compute. Everything else inside a step (reward scoring on the
# driver or the scorer service, advantage on the driver, checkpoint I/O, driver overhead) is time
# the GPUs wait. With V1's asynchronous reward loop, scoring overlaps generation and is inside `gen`.
GPU_STAGES = {"gen", "old_log_prob", "ref", "values", "update_critic", "update_actor", "update_weights"}


def _column(metrics: pd.DataFrame, key: str) -> pd.Series | None:
    if key not in metrics.columns:
        return None
    s = metrics[key].dropna()
    return s if not s.empty else None


def _training_steps(metrics: pd.DataFrame) -> pd.DataFrame:
    """Rows of training steps (those with a step time); step 0 holds only the initial validation."""
    if "timing_s/step" not in metrics.columns:
        return metrics.iloc[0:0]
    return metrics[metrics["timing_s/step"].notna()]


def val_means(metrics: pd.DataFrame) -> dict[str, dict[str, pd.Series]]:
    """{var: {data_source: series over steps}}, using the largest n of mean@n."""
    best: dict[tuple[str, str], tuple[int, str]] = {}
    for col in metrics.columns:
        m = _VAL_MEAN.match(col)
        if m:
            key, n = (m["var"], m["ds"]), int(m["n"])
            if key not in best or n > best[key][0]:
                best[key] = (n, col)
    out: dict[str, dict[str, pd.Series]] = {}
    for (var, ds), (_, col) in sorted(best.items()):
        s = _column(metrics, col)
        if s is not None:
            out.setdefault(var, {})[ds] = s
    return out


def train_components(run: RunData) -> dict[str, pd.Series]:
    """Per-step mean of each training reward component: from the reward function's sidecar
    when present, else from rollout dumps that carry components (legacy trainer)."""
    out: dict[str, pd.Series] = {}
    rc = run.reward_components
    if rc is not None and "split" in rc.columns:
        train = rc[rc["split"] == "train"]
        for col in train.columns:
            if col not in _NOT_COMPONENTS and pd.api.types.is_numeric_dtype(train[col]):
                s = train.groupby("step")[col].mean().dropna()
                if not s.empty:
                    out[col] = s
    if not out and run.rollout_means is not None:
        for col in run.rollout_means.columns:
            if col not in _NOT_COMPONENTS:
                s = run.rollout_means[col].dropna()
                if not s.empty:
                    out[col] = s
    return out


def _short(ds: str) -> str:
    """'wmt_zh_en/zh-en' -> 'zh-en' (the direction); other names unchanged."""
    return ds.rsplit("/", 1)[-1] if "/" in ds else ds


def reward_panels(run: RunData) -> dict[str, dict[str, pd.Series]]:
    """{panel: {line label: series}}: first the total reward, then one panel per component.
    Train lines are labelled "train", validation lines "val <direction>"."""
    val = val_means(run.metrics)
    panels: dict[str, dict[str, pd.Series]] = {"reward": {}}
    train = _column(run.metrics, TRAIN_SCORE)
    if train is not None:
        panels["reward"]["train"] = train
    labels = {ds: _short(ds) for var in val.values() for ds in var}
    if len(set(labels.values())) < len(labels):  # two datasets share a direction: keep full names
        labels = {ds: ds for ds in labels}
    for ds, s in val.get("reward", {}).items():
        panels["reward"][f"val {labels[ds]}"] = s
    comps = train_components(run)
    for name in sorted(set(comps) | {v for v in val if v not in _TOTAL_VARS}):
        panel = {}
        if name in comps:
            panel["train"] = comps[name]
        for ds, s in val.get(name, {}).items():
            panel[f"val {labels[ds]}"] = s
        panels[name] = panel
    return panels


@dataclass
class HeldOut:
    """Validation QE metrics (comet, kiwi, xcomet, each backend's own) the training reward weighs (`trained`) beside the
    ones it does not (`held_out`: logged at validation with training weight 0, e.g. COMET-DA through
    reward.validation_models or XCOMET through reward.mode=eval), per direction. A held-out metric
    that stalls or falls while the trained one climbs is the policy learning the reward model.
    A backend's own metric is logged raw, on its own scale (src.scorer.backends.SCALES); the plot and
    the summary read each line's scale from its metric (label_metric)."""
    trained: list[str]
    held_out: list[str]
    panels: dict[str, dict[str, pd.Series]]  # direction -> {"<metric> (trained|held out)": series}
    why_empty: str = ""  # what the run lacks when there is nothing to compare


def metric_label(name: str, trained: bool) -> str:
    return f"{name} ({'trained' if trained else 'held out'})"


def label_metric(label: str) -> str:
    """The metric of a metric_label: 'kiwi (held out)' -> 'kiwi'."""
    return label.rsplit(" (", 1)[0]


def held_out_panels(run: RunData) -> HeldOut:
    """The trained and held-out validation metrics side by side, one panel per direction."""
    weights = run.train_weights
    if weights is None:
        return HeldOut([], [], {}, "the run's verl config (snapshot/verl_config.yaml) names no training "
                                   "weights: which metric was trained on is unknown")
    val = val_means(run.metrics)
    # the QE scores logged at validation (COMET-family scores share a scale, a backend's own metric has its own;
    # BLEU, at 0-100, and the other components are in rewards.png)
    logged = [v for v in val if v in weights and v in QE_METRICS]
    trained = [v for v in logged if weights[v] != 0.0]
    held_out = [v for v in logged if weights[v] == 0.0]
    if not held_out:
        return HeldOut(trained, [], {}, "no held-out metric was logged at validation: add one with "
                                        "reward.validation_models=[...,comet_da]"
                                        + "".join(f" (or {m.example_model})" for m in OWN_METRICS.values())
                                        + " or reward.mode=eval")
    labels = {ds: _short(ds) for v in logged for ds in val[v]}
    if len(set(labels.values())) < len(labels):
        labels = {ds: ds for ds in labels}
    panels: dict[str, dict[str, pd.Series]] = {}
    for names, is_trained in ((trained, True), (held_out, False)):
        for name in names:
            for ds, series in val[name].items():
                panels.setdefault(labels[ds], {})[metric_label(name, is_trained)] = series
    return HeldOut(trained, held_out, dict(sorted(panels.items())))


def step_time_breakdown(metrics: pd.DataFrame) -> pd.DataFrame:
    """Seconds per stage for each training step (columns in STAGES order, plus "other" = step time
    not covered by a known stage). Stages never timed are left out."""
    steps = _training_steps(metrics)
    if steps.empty:
        return pd.DataFrame()
    cols = {}
    for stage, label in STAGES:
        key = f"timing_s/{stage}"
        if key in steps.columns and steps[key].notna().any():
            cols[label] = steps[key].fillna(0.0)
    df = pd.DataFrame(cols, index=steps.index)
    df[OTHER] = (steps["timing_s/step"] - df.sum(axis=1)).clip(lower=0.0)
    return df


def gpu_wait_share(metrics: pd.DataFrame) -> pd.Series:
    """Per training step: share of the step time outside GPU stages (see GPU_STAGES)."""
    steps = _training_steps(metrics)
    if steps.empty:
        return pd.Series(dtype=float)
    gpu = sum(
        (steps[f"timing_s/{s}"].fillna(0.0) for s in GPU_STAGES if f"timing_s/{s}" in steps.columns),
        start=pd.Series(0.0, index=steps.index),
    )
    return (1.0 - gpu / steps["timing_s/step"]).clip(lower=0.0, upper=1.0)


def infer_gpus(metrics: pd.DataFrame) -> int | None:
    """verl logs perf/throughput = perf/total_num_tokens / (perf/time_per_step * n_gpus)."""
    need = ["perf/total_num_tokens", "perf/throughput", "perf/time_per_step"]
    if not all(k in metrics.columns for k in need):
        return None
    m = metrics[need].dropna()
    m = m[(m["perf/throughput"] > 0) & (m["perf/time_per_step"] > 0)]
    if m.empty:
        return None
    est = (m["perf/total_num_tokens"] / (m["perf/throughput"] * m["perf/time_per_step"])).median()
    return max(1, int(round(est)))


@dataclass
class Throughput:
    table: pd.DataFrame  # columns e2e_tps, update_tps, rollout_tps (tokens per GPU per second)
    gpus: int | None
    method: str  # how tokens per GPU per step were counted


def throughput(metrics: pd.DataFrame, shape: RunShape) -> Throughput:
    """MindSpeed-RL's e2e_tps / update_tps / vllm_tps:

        tokens per GPU = (mean response length + mean prompt length) * prompts per step
                         * samples per prompt / world size
        e2e_tps = tokens per GPU / step time; update_tps = ... / actor update time;
        rollout (vllm) tps = ... / generation time.

    Without the batch geometry (no verl config found), verl's own `perf/total_num_tokens` (the same
    sum over the trained batch) divided by the GPU count stands in for the first line.
    """
    steps = _training_steps(metrics)
    gpus = shape.gpus or infer_gpus(metrics)
    empty = Throughput(pd.DataFrame(columns=["e2e_tps", "update_tps", "rollout_tps"]), gpus, "unavailable")
    if steps.empty or not gpus:
        return empty
    lengths = {"response_length/mean", "prompt_length/mean"}
    if shape.prompts_per_step and shape.samples_per_prompt and lengths <= set(steps.columns):
        per_gpu = (
            (steps["response_length/mean"] + steps["prompt_length/mean"])
            * shape.prompts_per_step
            * shape.samples_per_prompt
            / gpus
        )
        method = (
            f"(response_length/mean + prompt_length/mean) x {shape.prompts_per_step} prompts x "
            f"{shape.samples_per_prompt} samples / {gpus} GPUs"
        )
    elif "perf/total_num_tokens" in steps.columns:
        per_gpu = steps["perf/total_num_tokens"] / gpus
        method = f"perf/total_num_tokens / {gpus} GPUs"
    else:
        return empty

    def per_second(stage):
        key = f"timing_s/{stage}"
        if key not in steps.columns:
            return pd.Series(float("nan"), index=steps.index)
        t = steps[key]
        return per_gpu / t.where(t > 0)

    table = pd.DataFrame(
        {"e2e_tps": per_second("step"), "update_tps": per_second("update_actor"), "rollout_tps": per_second("gen")}
    )
    return Throughput(table, gpus, method)
