"""A sweep dir as a real local `--multirun` leaves it, with metrics as verl writes them.

The sweep itself is real: `python -m src.launch --multirun algo=grpo,dapo seed=1,2 dry_run=true`
plans, validates and snapshots every job and writes `summary.json` (src/pipeline/local_sweep.py).
What a dry run does not do, train, is stood in for by verl's own `FileLogger` writing each run's
metrics file where the launcher points verl's file logger (`<checkpoint dir>/metrics/<stamp>-<run
dir name>.jsonl`, the checkpoint dir being the run's `trainer.default_local_dir`), the metric dicts
made by verl's `compute_data_metrics` / `compute_timing_metrics` / `compute_throughout_metrics` on
a batch and by the V1 trainer's `_val_metrics_update`, so names and layout are what a run logs.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import yaml

from src.record import identity as run_identity
from src.record import sweep_summary
from tests.helpers.launches import launch

SWEEP = ["algo=grpo,dapo", "seed=1,2"]
PROMPTS, SAMPLES, RESPONSE_WIDTH, PROMPT_WIDTH, GPUS = 4, 2, 16, 12, 4
TEST_FREQ = 2
DATA_SOURCES = ["wmt_zh_en/zh-en", "wmt_zh_en/en-zh"]


def dry_sweep(tmp: Path) -> Path:
    """The sweep dir of a real local dry-run sweep under tmp."""
    out = tmp / "out"
    paths = [f"paths.output_dir={out}/outputs", f"paths.results_root={out}/results",
             f"paths.data_root={tmp}/data", f"paths.model_root={tmp}/models"]
    result = launch(["--multirun", *SWEEP, "dry_run=true", *paths], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep,) = (out / "outputs" / "multirun").iterdir()
    return sweep


def train_score(algo: str, seed: int, step: int) -> float:
    """The trained reward of a run: dapo climbs faster than grpo; the seed shifts it."""
    return round((0.05 if algo == "grpo" else 0.08) * step + 0.01 * seed, 6)


def val_reward(algo: str, seed: int, step: int, ds: int) -> float:
    return round(0.3 + (0.02 if algo == "grpo" else 0.03) * step + 0.005 * seed + 0.01 * ds, 6)


def held_out_comet(algo: str, seed: int, step: int, ds: int) -> float:
    """Held out (weight 0): falls for dapo, rises for grpo."""
    return round(0.6 + (0.01 if algo == "grpo" else -0.01) * step + 0.002 * seed + 0.01 * ds, 6)


def entropy(algo: str, seed: int, step: int) -> float:
    return round(1.2 - 0.05 * step - 0.01 * seed - (0.1 if algo == "dapo" else 0.0), 6)


def _batch(score: float, step: int, seed: int):
    from verl.protocol import DataProto

    b = PROMPTS * SAMPLES
    g = torch.Generator().manual_seed(1000 * seed + step)
    resp_len = torch.randint(4, RESPONSE_WIDTH + 1, (b,), generator=g)
    prompt_len = torch.randint(6, PROMPT_WIDTH + 1, (b,), generator=g)
    mask = (torch.arange(RESPONSE_WIDTH)[None, :] < resp_len[:, None]).float()
    scores = torch.zeros(b, RESPONSE_WIDTH)
    scores[torch.arange(b), resp_len - 1] = score  # verl puts the sequence score on the last response token
    adv = torch.randn(b, RESPONSE_WIDTH, generator=g) * mask
    return DataProto.from_dict(
        tensors={"prompts": torch.zeros(b, PROMPT_WIDTH, dtype=torch.long),
                 "responses": torch.zeros(b, RESPONSE_WIDTH, dtype=torch.long), "response_mask": mask.long(),
                 "token_level_scores": scores, "token_level_rewards": scores, "advantages": adv, "returns": adv,
                 "prompt_length": prompt_len.float(), "response_length": resp_len.float()},
        meta_info={"global_token_num": (prompt_len + resp_len).tolist()})


def _validate(algo: str, seed: int, step: int) -> dict:
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    data_sources, extras = [], {"reward": [], "comet": [], "xcomet": []}
    for i, ds in enumerate(DATA_SOURCES):
        data_sources.append(ds)
        extras["reward"].append(val_reward(algo, seed, step, i))
        extras["xcomet"].append(val_reward(algo, seed, step, i))
        extras["comet"].append(held_out_comet(algo, seed, step, i))
    uids = [f"uid{i}" for i in range(len(data_sources))]
    return PPOTrainer._val_metrics_update(None, data_sources, uids, extras, [1] * len(uids), expected_acc_counts={})


def write_metrics(run_dir: Path, algo: str, seed: int, steps: int) -> Path:
    """verl's file logger's lines for `steps` training steps of this run (validation at step 0 and
    every TEST_FREQ steps), in the file the launcher names for this launch."""
    from verl.trainer.ppo.metric_utils import compute_data_metrics, compute_throughout_metrics, compute_timing_metrics
    from verl.utils.tracking import FileLogger

    verl_cfg = yaml.safe_load((run_dir / "snapshot" / "verl_config.yaml").read_text())
    plan = json.loads((run_dir / "snapshot" / "plan.json").read_text())
    ckpt = Path(verl_cfg["trainer"]["default_local_dir"])
    # what the first real launch writes into its checkpoint dir (src/pipeline/run.py)
    models = {m["name"]: {"path": m["path"], "kind": m["kind"]} for m in plan["scorer"]["models"]}
    run_identity.record(ckpt, run_identity.identity(verl_cfg, models), plan["run_id"], None)
    path = ckpt / "metrics" / f"20261126-000000-{run_dir.name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("VERL_FILE_LOGGER_PATH")
    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    try:
        logger = FileLogger(project_name="qe-rl", experiment_name=run_dir.name)
    finally:
        if old is None:
            os.environ.pop("VERL_FILE_LOGGER_PATH")
        else:
            os.environ["VERL_FILE_LOGGER_PATH"] = old
    logger.log(data=_validate(algo, seed, 0), step=0)
    for step in range(1, steps + 1):
        timing = {"gen": 10.0 + step + seed, "old_log_prob": 2.0, "ref": 1.5, "adv": 0.5,
                  "update_actor": 6.0 if algo == "grpo" else 7.0}
        timing["step"] = sum(timing.values()) + 1.0
        metrics = {"training/global_step": step, "training/epoch": 0}
        if step % TEST_FREQ == 0:
            timing["testing"] = 4.0
            metrics.update(_validate(algo, seed, step))
        batch = _batch(train_score(algo, seed, step), step, seed)
        metrics.update(compute_data_metrics(batch=batch, use_critic=False))
        metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing))
        metrics.update(compute_throughout_metrics(batch=batch, timing_raw=timing, n_gpus=GPUS))
        # what the actor's update returns (verl renames its keys with "actor/")
        metrics.update({"actor/entropy": entropy(algo, seed, step), "actor/kl_loss": 0.001 * step * seed,
                        "actor/pg_loss": 0.01 * step})
        logger.log(data=metrics, step=step)
    logger.finish()
    return path


def set_train_weights(run_dir: Path) -> None:
    """The snapshot's verl config names XCOMET trained on and COMET-DA held out, as a run with
    reward.validation_models=[comet_da] records them (the dry run's reward weighs other components)."""
    path = run_dir / "snapshot" / "verl_config.yaml"
    cfg = yaml.safe_load(path.read_text())
    kwargs = cfg["reward"]["custom_reward_function"].setdefault("reward_kwargs", {})
    kwargs["train_weights"] = {**(kwargs.get("train_weights") or {}), "xcomet": 1.0, "comet": 0.0}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def runs_by_params(sweep: Path) -> dict[tuple[str, int], Path]:
    """{(algo, seed): run dir} from each run's own recorded overrides."""
    out = {}
    for run in sorted(p for p in sweep.iterdir() if (p / "snapshot").is_dir()):
        overrides = dict(o.split("=", 1) for o in yaml.safe_load((run / "snapshot" / "overrides.yaml").read_text()))
        out[(overrides["algo"], int(overrides["seed"]))] = run
    return out


def mark(sweep: Path, run_dir: Path, state: str, error: str | None = None) -> None:
    """Record a job's outcome in summary.json with the launchers' own writer (what a job that fails
    or is still running leaves there)."""
    rows = sweep_summary.read(sweep)
    (row,) = [r for r in rows if Path(r["run_dir"]).name == run_dir.name]
    sweep_summary.write(sweep / sweep_summary.SUMMARY_FILE, [sweep_summary.SweepJob(
        idx=row["idx"], overrides=row["overrides"], run_dir=row["run_dir"], state=state, error=error)])


def trained_sweep(tmp: Path, steps: dict[tuple[str, int], int], failed: tuple[str, int], error: str) -> Path:
    """A dry sweep whose runs logged `steps[(algo, seed)]` steps each, the `failed` run marked failed with `error`."""
    sweep = dry_sweep(tmp)
    for (algo, seed), run in runs_by_params(sweep).items():
        set_train_weights(run)
        write_metrics(run, algo, seed, steps[(algo, seed)])
    mark(sweep, runs_by_params(sweep)[failed], sweep_summary.FAILED, error)
    return sweep

