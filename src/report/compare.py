"""The numbers of a comparison across runs (no plotting, no files here).

Runs that differ only in `seed` are one configuration. Per metric and configuration:
- the curve: at each step, the mean over the configuration's runs that logged the step, and the
  min and max of those runs (the band);
- `step`: the step the configuration is compared at, the last one all its runs that logged the
  metric reached (a run that failed or is still training has fewer steps than the others: issue 51
  finding 9, a "final" of seed 1 at step 10 averaged with a failed seed 2 at step 6 is a value no
  plot shows);
- `final`: each run's value at `step` (its last logged at or before it: validation is logged every
  test_freq steps); `best`: each run's best value up to `step` (highest, or lowest for a metric where
  lower is better; none for a metric without a better direction: length, entropy, KL); each as the
  mean over the runs, with min, max and `spread` = max - min; the mean at `step` is the plotted curve's;
- `last_step`: the last step each run logged it, and `last`: each run's own last value whatever its
  step (compare.json only).

The metrics, by verl 0.9.1's names (verl/trainer/ppo/metric_utils.py, core_algos.py, v1/trainer_base.py):
the trained reward `critic/score/mean`; each validation reward `val-core/<data source>/reward/mean@<n>`
and each QE metric logged at validation (`val-aux/<data source>/<metric>/mean@<n>`, marked trained
or held out by the run's training weights, series.held_out_panels's rule); `response_length/mean`;
`actor/entropy`; the KL terms `actor/kl_loss` (KL to the reference in the loss) and
`actor/reward_kl_penalty` (KL in the reward); `timing_s/step`; `perf/throughput` (verl's tokens per
GPU per second). A metric no run logged is left out, and listed as such.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from src.record.run_params import RunEntry
from src.scorer.backends import METRICS as QE_METRICS
from src.scorer.backends import scale_of

from .run_files import RunData
from .series import TRAIN_SCORE

HIGHER, LOWER = "higher", "lower"
# (verl's name, title, table header, which way is better; None: neither)
STEADY_METRICS = [
    (TRAIN_SCORE, "trained reward (training batches)", "reward", HIGHER),
    ("response_length/mean", "response length (tokens)", "length", None),
    ("actor/entropy", "entropy", "entropy", None),
    ("actor/kl_loss", "KL to the reference (in the loss)", "KL loss", None),
    ("actor/reward_kl_penalty", "KL in the reward", "KL reward", None),
    ("timing_s/step", "step time (s)", "step s", LOWER),
    ("perf/throughput", "throughput (tokens/GPU/s)", "tokens/GPU/s", HIGHER),
]
_VAL = re.compile(r"^(?P<kind>val-core|val-aux)/(?P<ds>.+)/(?P<var>[^/]+)/mean@(?P<n>\d+)$")
VAL_REWARD = "reward"


@dataclass
class Metric:
    name: str  # verl's metric name
    title: str
    short: str  # the table's header
    better: str | None  # HIGHER, LOWER or None
    role: str = ""  # validation QE metrics: "trained", "held out", "trained in some runs"


@dataclass
class Spread:
    mean: float
    min: float
    max: float

    @property
    def spread(self) -> float:
        return self.max - self.min

    def to_dict(self) -> dict:
        return {"mean": self.mean, "min": self.min, "max": self.max, "spread": self.spread}


def spread_of(values: list[float]) -> Spread | None:
    return Spread(sum(values) / len(values), min(values), max(values)) if values else None


@dataclass
class MetricResult:
    runs: int  # runs of the configuration compared at `step` (those that logged the metric by then)
    step: int  # the step compared: the last one every run that logged the metric reached
    final: Spread  # each run's value at `step`
    best: Spread | None  # each run's best up to `step`
    last_step: tuple[int, int]  # (min, max) over the runs
    curve: pd.DataFrame  # index step; columns mean, min, max, runs
    last: Spread | None = None  # each run's own last value, whatever its step

    @property
    def steps_differ(self) -> bool:
        return self.last_step[0] != self.last_step[1]

    def to_dict(self) -> dict:
        return {"runs": self.runs, "step": self.step, "final": self.final.to_dict(),
                "best": self.best.to_dict() if self.best else None,
                "last_step": {"min": self.last_step[0], "max": self.last_step[1]},
                "last": self.last.to_dict() if self.last else None}


@dataclass
class Configuration:
    params: dict[str, str]
    runs: list[RunEntry]
    metrics: dict[str, MetricResult] = field(default_factory=dict)
    unrecorded: str = ""  # the dir name of a run that records no configuration (its own configuration)

    @property
    def label(self) -> str:
        return self.runs[0].configuration  # its runs differ in their seed alone: each names it alike

    @property
    def seeds(self) -> list:
        return sorted((r.seed for r in self.runs), key=lambda s: (s is None, s))

    def states(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.runs:
            out[r.state] = out.get(r.state, 0) + 1
        return out


def _val_columns(columns) -> dict[tuple[str, str], str]:
    """{(data source, var): column} of the validation means the comparison shows, the largest n of
    mean@n for each (as series.val_means picks it)."""
    best: dict[tuple[str, str], tuple[int, str]] = {}
    for col in columns:
        m = _VAL.match(col)
        if m and (m["var"] == VAL_REWARD and m["kind"] == "val-core" or m["var"] in QE_METRICS):
            key, n = (m["ds"], m["var"]), int(m["n"])
            if key not in best or n > best[key][0]:
                best[key] = (n, col)
    return {k: col for k, (_, col) in sorted(best.items())}


def _role(var: str, weights: list[dict[str, float] | None]) -> str:
    known = [w for w in weights if w is not None and var in w]
    if not known:
        return ""
    trained = {w[var] != 0.0 for w in known}
    return "trained" if trained == {True} else "held out" if trained == {False} else "trained in some runs"


def metrics_of(runs: list[RunData]) -> tuple[list[Metric], list[str]]:
    """The metrics to compare, in a fixed order, and the names of those no run logged."""
    columns = set().union(*(set(r.metrics.columns) for r in runs)) if runs else set()
    steady = [Metric(*spec) for spec in STEADY_METRICS]
    absent = [m.name for m in steady if m.name not in columns]
    weights = [r.train_weights for r in runs]
    val = []
    vals = _val_columns(columns)
    directions = {ds: ds.rsplit("/", 1)[-1] for ds, _ in vals}  # 'wmt_zh_en/zh-en' -> 'zh-en', unless ambiguous
    if len(set(directions.values())) < len(directions):
        directions = {ds: ds for ds in directions}
    for (ds, var), col in vals.items():
        if var == VAL_REWARD:
            val.append(Metric(col, f"validation reward, {ds}", f"val reward {directions[ds]}", HIGHER))
            continue
        role = _role(var, weights)
        scale = scale_of(var)
        tags = [role] if role else []
        tags += [] if scale.higher_is_better else [scale.describe()]
        tag = f" ({', '.join(tags)})" if tags else ""
        val.append(Metric(col, f"validation {var}, {ds}{tag}", f"val {var} {directions[ds]}{tag}",
                          HIGHER if scale.higher_is_better else LOWER, role))
    # per direction: the validation reward, then the trained metrics, then the held-out ones
    val.sort(key=lambda m: (_VAL.match(m.name)["ds"], not m.name.startswith("val-core"), m.role != "trained", m.name))
    # the trained reward first, the validation next, then the rest
    return [m for m in steady[:1] if m.name in columns] + val + [m for m in steady[1:] if m.name in columns], absent


def _series(run: RunData, name: str) -> pd.Series | None:
    if name not in run.metrics.columns:
        return None
    s = run.metrics[name].dropna()
    return s if not s.empty else None


def result_of(series: list[pd.Series], better: str | None) -> MetricResult | None:
    if not series:
        return None
    last = [int(s.index[-1]) for s in series]
    step = min(last)  # every run reached it (module docstring)
    # a run whose first value comes after `step` (it logged nothing by then) is not compared
    upto = [u for s in series if not (u := s[s.index <= step]).empty]
    finals = [float(u.iloc[-1]) for u in upto]
    bests = [float(u.max() if better == HIGHER else u.min()) for u in upto] if better else []
    frame = pd.concat(series, axis=1)
    curve = pd.DataFrame({"mean": frame.mean(axis=1), "min": frame.min(axis=1), "max": frame.max(axis=1),
                          "runs": frame.notna().sum(axis=1)})
    return MetricResult(len(upto), step, spread_of(finals), spread_of(bests), (min(last), max(last)), curve,
                        last=spread_of([float(s.iloc[-1]) for s in series]))


@dataclass
class Comparison:
    swept: list[str]  # the parameters that differ between configurations (seed aside)
    configurations: list[Configuration]
    metrics: list[Metric]
    absent: list[str]  # metrics no run logged
    unusable: dict[Path, str]  # run dir -> why it has nothing to compare


def compare(entries: list[RunEntry], loaded: dict[Path, RunData], unusable: dict[Path, str]) -> Comparison:
    """`loaded`: run dir -> its data, for the runs that have metrics."""
    swept = sorted({k for e in entries for k in e.params})  # the seed is never one (sweep_dirs)
    groups: dict[tuple, Configuration] = {}
    for e in entries:
        params = {k: e.params.get(k, "-") for k in swept}
        key = tuple(params.values()) if e.recorded else ("unrecorded", str(e.run_dir))
        groups.setdefault(key, Configuration(params, [], unrecorded="" if e.recorded else e.name)).runs.append(e)
    metrics, absent = metrics_of(list(loaded.values()))
    for config in groups.values():
        for m in metrics:
            series = [s for r in config.runs
                      if r.run_dir in loaded and (s := _series(loaded[r.run_dir], m.name)) is not None]
            result = result_of(series, m.better)
            if result is not None:
                config.metrics[m.name] = result
    configurations = sorted(groups.values(), key=lambda c: (bool(c.unrecorded), [c.params[k] for k in swept],
                                                             c.unrecorded))
    return Comparison(swept, configurations, metrics, absent, unusable)
