"""Find and load what a verl 0.9.1 run leaves in its run directory.

What verl writes, and where (the launcher sets the paths):

- metrics: verl's file logger (`trainer.logger` contains "file") writes one JSON line per
  `Tracking.log` call, `{"step": <global step>, "data": {<metric>: <value>}}`, to
  `$VERL_FILE_LOGGER_PATH`. NaN values arrive as null (orjson). verl opens that file with mode
  "wb", so the launcher gives each launch its own file in the run's checkpoint dir
  (`<checkpoint dir>/metrics/<stamp>-<run dir name>.jsonl`, the dir the run dir's verl config names
  as trainer.default_local_dir); `<run>/metrics/*.jsonl` and `<run>/metrics.jsonl` are read too.
  Everything is merged by step, newer files winning for a step logged twice (a resumed attempt
  re-logs the steps after its last checkpoint).
- validation generations: `trainer.validation_data_dir` gets `<global step>.jsonl`, one line per
  sample: input (decoded prompt), output (decoded response), gts, score, step, reward, and every key
  the reward function returned in its dict (plus uid). Read from `<run>/val_generations/`, else from
  the directory the run's verl config names (the launcher keeps them beside the checkpoints).
- rollout generations (optional): `trainer.rollout_data_dir`, same layout for training samples.
- reward components sidecar (optional): `<run>/reward_components/*.jsonl`, lines
  `{"step": int, "split": "train"|"val", <component>: float, ...}` written by the reward function,
  because verl's V1 trainer logs no per-component training rewards itself.
- the resolved verl config the run used (optional): `<run>/snapshot/verl_config.yaml` as the
  launcher writes it, for the batch geometry of the throughput formula, the dump directories and
  the training reward's weights (which validation metrics were trained on, which are held out).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from src.data.safe_write import writable_dir_problem
from src.record import snapshot, yaml_files
from src.record.reward_weights import train_weights_of

METRICS_FILE = "metrics.jsonl"
TRAIN_LOG = "train.log"  # the launcher's log of the training command (src/pipeline/run.py)
METRICS_DIR = "metrics"
VAL_GENERATIONS_DIR = "val_generations"
ROLLOUT_GENERATIONS_DIR = "rollout_generations"
REWARD_COMPONENTS_DIR = "reward_components"
VERL_CONFIG_CANDIDATES = ("snapshot/verl_config.yaml", "verl_config.yaml")
# what a dry run's dir is, said by a run's report and a sweep's comparison alike
DRY_RUN = "a dry run (dry_run=true): planned and snapshotted, never trained"


class RunDirError(Exception):
    """The run directory lacks what a report needs; the CLI prints it and exits 2."""


def refuse_out_dir(out: Path, foreign: list[str], what: str) -> None:
    """The last two checks of an --out dir, shared by a run's report and a comparison (`what`): files there
    that a `what` did not write, and a dir that cannot be written. RunDirError (one line) for either."""
    if foreign:
        raise RunDirError(f"--out {out} holds files a {what} did not write ({', '.join(foreign[:3])}"
                          f"{', ...' if len(foreign) > 3 else ''}); give a new or empty directory")
    problem = writable_dir_problem(out if out.is_dir() else out.parent)
    if problem:
        raise RunDirError(f"cannot write the {what} to {out}: {problem}")


@dataclass
class RunShape:
    """Batch geometry for the tokens/GPU/s formulas; None where unknown."""

    prompts_per_step: int | None = None  # data.train_batch_size
    samples_per_prompt: int | None = None  # actor_rollout_ref.rollout.n
    gpus: int | None = None  # trainer.n_gpus_per_node * trainer.nnodes


@dataclass
class RunData:
    run_dir: Path
    metrics: pd.DataFrame  # index: step; columns: metric names
    val_samples: dict[int, list[dict]] = field(default_factory=dict)
    rollout_means: pd.DataFrame | None = None  # index: step; mean of each numeric key of the rollout dumps
    reward_components: pd.DataFrame | None = None  # step, split, <component>...
    shape: RunShape = field(default_factory=RunShape)
    metric_files: list[Path] = field(default_factory=list)
    val_dir: Path | None = None  # where validation generations were looked for
    # whether the verl config names trainer.validation_data_dir (else only <run>/val_generations was looked in)
    val_dir_configured: bool = False
    # the training reward's weight per component (reward kwargs `train_weights` in the verl config);
    # None when the run's verl config is not found or names none
    train_weights: dict[str, float] | None = None


def metric_files(run_dir: Path, checkpoint_dir: Path | None = None) -> list[Path]:
    """Every attempt's metrics file: the run dir's own (older launcher layout) and the checkpoint
    dir's `metrics/<stamp>-<run dir>.jsonl`, one per launch of the run (a requeue, a rerun, a
    --from-snapshot --resume), so all attempts read as one series."""
    files = []
    for base in [run_dir] + ([checkpoint_dir] if checkpoint_dir else []):
        if (base / METRICS_DIR).is_dir():
            files += sorted((base / METRICS_DIR).glob("*.jsonl"))
        if (base / METRICS_FILE).is_file():
            files.append(base / METRICS_FILE)
    unique = list({p.resolve(): p for p in files}.values())
    # Oldest first, so a later launch's lines override an earlier one's for the same step.
    return sorted(unique, key=lambda p: (p.stat().st_mtime, p.name))


def _read_jsonl(path: Path) -> list[dict]:
    records = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                # A run killed mid-write leaves a torn last line; everything before it is good.
                continue
    return records


def load_metrics(files: list[Path]) -> pd.DataFrame:
    """One row per step. Several log calls for one step (verl logs the initial validation at step 0,
    then one line per training step) are merged key by key, the last value winning."""
    by_step: dict[int, dict] = {}
    for path in files:
        for rec in _read_jsonl(path):
            if not isinstance(rec, dict) or "step" not in rec or not isinstance(rec.get("data"), dict):
                continue
            values = {k: v for k, v in rec["data"].items() if isinstance(v, (int, float)) or v is None}
            by_step.setdefault(int(rec["step"]), {}).update(values)
    if not by_step:
        return pd.DataFrame()
    df = pd.DataFrame.from_dict(by_step, orient="index").sort_index()
    df.index.name = "step"
    return df.astype(float)


def load_step_dumps(directory: Path) -> dict[int, list[dict]]:
    """`<step>.jsonl` files as written by verl's `_write_generations`."""
    if not directory.is_dir():
        return {}
    out = {}
    for path in directory.glob("*.jsonl"):
        if path.stem.isdigit():
            out[int(path.stem)] = _read_jsonl(path)
    return dict(sorted(out.items()))


def load_rollout_means(directory: Path) -> pd.DataFrame | None:
    """Per-step means of the numeric fields of training rollout dumps. Streams the files: a step
    holds prompts x samples records with full texts, and only the means are needed."""
    if not directory.is_dir():
        return None
    rows = {}
    for path in directory.glob("*.jsonl"):
        if not path.stem.isdigit():
            continue
        sums, counts = {}, {}
        for rec in _read_jsonl(path):
            for k, v in rec.items():
                if k not in ("step", "uid") and isinstance(v, (int, float)) and not isinstance(v, bool):
                    sums[k] = sums.get(k, 0.0) + v
                    counts[k] = counts.get(k, 0) + 1
        rows[int(path.stem)] = {k: sums[k] / counts[k] for k in sums}
    if not rows:
        return None
    df = pd.DataFrame.from_dict(rows, orient="index").sort_index()
    df.index.name = "step"
    return df


def load_reward_components(directory: Path) -> pd.DataFrame | None:
    if not directory.is_dir():
        return None
    rows = [r for p in sorted(directory.glob("*.jsonl")) for r in _read_jsonl(p) if "step" in r]
    return pd.DataFrame(rows) if rows else None


def _nested(cfg: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(cfg, dict) or part not in cfg:
            return None
        cfg = cfg[part]
    return cfg


def load_verl_config(run_dir: Path, verl_config: Path | None) -> dict:
    """The resolved verl config the run used ({} when none is found); RunDirError (one line) when the
    file is not a YAML mapping: a report computed without it would silently use other numbers."""
    candidates = [verl_config] if verl_config else [run_dir / c for c in VERL_CONFIG_CANDIDATES]
    for path in candidates:
        if path is not None and path.is_file():
            import yaml

            try:
                cfg = yaml_files.load(path.read_text(encoding="utf-8"))
            except UnicodeDecodeError:
                raise RunDirError(f"verl config {path} is not UTF-8 text (give the run's resolved verl config, "
                                  f"snapshot/verl_config.yaml)") from None
            except yaml.YAMLError as e:
                mark = getattr(e, "problem_mark", None)
                where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
                problem = getattr(e, "problem", None) or str(e).splitlines()[0]
                raise RunDirError(f"verl config {path} is not valid YAML{where}: {problem}") from None
            if not isinstance(cfg, dict):
                raise RunDirError(f"verl config {path} is not a YAML mapping of verl's keys (it holds a "
                                  f"{type(cfg).__name__}); give the run's snapshot/verl_config.yaml")
            return cfg
    return {}


def shape_of(cfg: dict) -> RunShape:
    per_node, nnodes = _nested(cfg, "trainer.n_gpus_per_node"), _nested(cfg, "trainer.nnodes")
    ints = lambda v: v if isinstance(v, int) and not isinstance(v, bool) else None  # noqa: E731
    return RunShape(
        prompts_per_step=ints(_nested(cfg, "data.train_batch_size")),
        samples_per_prompt=ints(_nested(cfg, "actor_rollout_ref.rollout.n")),
        gpus=per_node * nnodes if ints(per_node) and ints(nnodes) else None,
    )


def dump_dir(run_dir: Path, default_name: str, configured) -> Path:
    """`<run>/<default_name>` when present, else the directory the verl config names (the launcher
    may keep dumps beside the checkpoints); a relative one is tried against the run directory."""
    here = run_dir / default_name
    if here.is_dir() or not configured:
        return here
    path = Path(str(configured))
    return path if path.is_absolute() else run_dir / path


def no_val_samples_reason(run: RunData) -> str:
    """Why a run has no validation samples to show: the dir was not configured, is missing, or is empty."""
    if not run.val_dir_configured and (run.val_dir is None or not run.val_dir.is_dir()):
        return "trainer.validation_data_dir was not set"
    if run.val_dir is None or not run.val_dir.is_dir():
        return (f"trainer.validation_data_dir is {run.val_dir}, which does not exist: no validation has run yet "
                f"(trainer.test_freq, trainer.val_before_train), or the dir was moved or deleted")
    return f"{run.val_dir} holds no <step>.jsonl: no validation has finished yet"


def _last_line(log: Path, limit: int = 160) -> str:
    try:
        lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return (lines[-1][:limit] + ("..." if len(lines[-1]) > limit else "")) if lines else ""


def dry_run(run_dir: Path) -> bool:
    """The run was a dry run: the composed config of its snapshot says so."""
    path = run_dir / snapshot.SNAPSHOT / snapshot.COMPOSED
    import yaml

    try:
        composed = yaml_files.load(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False  # a damaged record is a missing one
    return isinstance(composed, dict) and composed.get("dry_run") is True


def _no_metrics_message(run_dir: Path, ckpt_dir: Path | None, files: list[Path]) -> str:
    """Why there is nothing to plot. A run the launcher started (it has a train.log) that logged no
    step stopped before its first step: the answer is in train.log, not in the logger's settings."""
    log = run_dir / TRAIN_LOG
    where = ckpt_dir / METRICS_DIR if ckpt_dir is not None else run_dir / METRICS_DIR
    if log.is_file():
        state = (f"its metrics files hold no step ({', '.join(str(f) for f in files)})" if files else
                 f"{where} is {'empty' if where.is_dir() else 'missing'}")
        last = _last_line(log)
        return (f"no training step was logged in {run_dir}: {state}; training stopped before its first step, "
                f"see {log}" + (f" (last line: {last})" if last else ""))
    if not files and dry_run(run_dir):
        return (f"{run_dir} is {DRY_RUN}: nothing to report; to train it: python -m src.launch --from-snapshot "
                f"{run_dir / snapshot.SNAPSHOT} dry_run=false")
    if files:
        return f"metrics files in {run_dir} hold no metric lines: {', '.join(map(str, files))}"
    return (f"no metrics in {run_dir} (and no {TRAIN_LOG}: not a run directory the launcher wrote?): expected "
            f"{METRICS_DIR}/*.jsonl or {METRICS_FILE} from verl's file logger (trainer.logger must include 'file' "
            "and VERL_FILE_LOGGER_PATH point into the run directory)")


def load_run(run_dir: Path, verl_config: Path | None = None) -> RunData:
    if not run_dir.is_dir():
        raise RunDirError(f"run directory not found: {run_dir}")
    if verl_config is not None and not verl_config.is_file():
        raise RunDirError(f"verl config not found: {verl_config}")
    cfg = load_verl_config(run_dir, verl_config)
    ckpt = _nested(cfg, "trainer.default_local_dir")
    ckpt_dir = Path(str(ckpt)) if ckpt else None
    files = metric_files(run_dir, ckpt_dir)
    metrics = load_metrics(files) if files else pd.DataFrame()
    if metrics.empty:
        raise RunDirError(_no_metrics_message(run_dir, ckpt_dir, files))
    val_dir = dump_dir(run_dir, VAL_GENERATIONS_DIR, _nested(cfg, "trainer.validation_data_dir"))
    rollout_dir = dump_dir(run_dir, ROLLOUT_GENERATIONS_DIR, _nested(cfg, "trainer.rollout_data_dir"))
    return RunData(
        run_dir=run_dir,
        metrics=metrics,
        val_samples=load_step_dumps(val_dir),
        rollout_means=load_rollout_means(rollout_dir),
        reward_components=load_reward_components(run_dir / REWARD_COMPONENTS_DIR),
        shape=shape_of(cfg),
        metric_files=files,
        val_dir=val_dir,
        val_dir_configured=bool(_nested(cfg, "trainer.validation_data_dir")),
        train_weights=train_weights_of(cfg),
    )
