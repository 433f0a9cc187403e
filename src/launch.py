"""Entry point: compose -> plan -> verl config (validated by verl) -> snapshot -> run.

    python -m src.launch reward=xcomet_xl gpus=4 dry_run=true
    python -m src.launch --multirun hydra/launcher=slurm reward=comet,xcomet_xl gpus=8
    python -m src.launch --from-snapshot outputs/runs/<run>/snapshot [--resume] [dry_run=true]

Bad input (unknown option, gpus=0, a batch pin that breaks a verl rule, ...) is refused with
one line and exit code 2 before anything is written or submitted: every combination of a
sweep (command-line sweeps and a +sweep=<name> config's hydra.sweeper.params) is composed and
planned here first, with its Slurm request when hydra/launcher=slurm, before Hydra makes a run
dir or a launcher submits.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import shlex
import shutil
import socket
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from hydra.errors import CompactHydraException
from omegaconf import OmegaConf

from src import (node_services, preflight, ray_cluster, run_identity, runner, scorer_process, smoke, snapshot,
                 slurm_request)
from src.plan import PlanError, RunPlan, build_plan, with_identity
from src.resolvers import CODE_ROOT, register_resolvers

# conf/ of the code this process runs: a Slurm job composes from its code snapshot's conf/
CONF_DIR = CODE_ROOT / "conf"
USAGE_EXIT = 2
SLURM_LAUNCHER = "hydra_plugins.qe_rl.slurm_launcher.QeRlSlurmLauncher"


class UsageError(Exception):
    """One-line refusal; the launcher prints it and exits 2."""


class RunError(CompactHydraException):
    """A run that could not start or whose training failed: one line and an exit code. In a sweep
    the launcher reports it with the job's overrides and log (Hydra prints it compactly)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def _one_line(exc: BaseException) -> str:
    """Hydra's multi-line errors (e.g. the list of available options) folded onto one line."""
    lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
    if not lines:
        return type(exc).__name__
    head = lines[0]
    if head.startswith("Config group override must be a string"):
        head += " (quote group values: gpus='4' on the command line, gpus: \"'2','4'\" in a sweep file)"
    if any(l.startswith("Available options") for l in lines):
        idx = next(i for i, l in enumerate(lines) if l.startswith("Available options"))
        head += f" ({lines[idx].rstrip(':').lower()}: {', '.join(lines[idx + 1:])})"
    return head


REASON_CHARS = 400  # verl's longest assertion texts fit; a whole traceback does not


def _verl_reason(exc: BaseException, overrides: list[str]) -> str:
    """verl's own reason on one line, and the override(s) that led to it. Hydra wraps the error of
    a config dataclass's __post_init__ ("Error in call to target ...:" then the cause on later
    lines), so the innermost exception of the chain holds the text the user needs."""
    chain, seen = [exc], {id(exc)}
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and id(nxt) not in seen:
        chain.append(nxt)
        seen.add(id(nxt))
    texts = [" ".join(l.strip() for l in str(e).splitlines() if l.strip()) for e in chain]
    inner = next(((e, t) for e, t in zip(reversed(chain), reversed(texts)) if t), (chain[-1], ""))
    reason = f"{type(inner[0]).__name__}: {inner[1]}" if inner[1] else type(chain[-1]).__name__
    if len(reason) > REASON_CHARS:
        reason = reason[:REASON_CHARS - 3] + "..."
    return f"{reason} ({_culprits(' '.join(texts), overrides)})"


def _culprits(text: str, overrides: list[str]) -> str:
    """The user's overrides verl's message names (by key or its last parts), else those that could
    have led to it: the verl.* ones first, else all."""
    named = []
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        parts = key[len("verl."):].split(".") if key.startswith("verl.") else key.split(".")
        # a group choice (reward=comet) is never "named": its word is in too many messages
        if "=" in o and len(parts) > 1 and any(re.search(rf"(?<![\w]){re.escape('.'.join(parts[i:]))}(?![\w])", text)
                            for i in range(len(parts))):
            named.append(o)
    if named:
        return "override: " + " ".join(named)
    mine = [o for o in overrides if o.lstrip("+~").startswith("verl.")]
    if mine:
        return "verl overrides given: " + " ".join(mine)
    return ("overrides given: " + " ".join(overrides)) if overrides else "no override given: the config files' values"


# ---------------------------------------------------------------------------------------
# pre-launch check: compose and plan every combination before Hydra acts
# ---------------------------------------------------------------------------------------
def _combinations(overrides: list[str], multirun: bool, sweeper_params: dict) -> list[list[str]]:
    """Every job's overrides, as Hydra's BasicSweeper makes them: a sweep config's
    hydra.sweeper.params first, command-line overrides after (the command line wins per key)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    parsed = parser.parse_overrides(overrides)
    if not multirun:
        sweeps = [o.input_line for o in parsed if o.is_sweep_override()]
        if sweeps:
            raise UsageError(f"{sweeps[0]} is a sweep: add --multirun to run every value")
        if sweeper_params:
            raise UsageError("the config defines a sweep (hydra.sweeper.params, e.g. from +sweep=...): "
                             "add --multirun to run it")
        return [overrides]
    params = parser.parse_overrides([f"{k}={v}" for k, v in sweeper_params.items()])
    batches = BasicSweeper.split_arguments(params + parsed, None)
    return [combo for batch in batches for combo in batch]


def _compose(overrides: list[str], with_hydra: bool = False):
    from hydra import compose, initialize_config_dir

    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="launch"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=with_hydra)


def compose_config(overrides: list[str]) -> dict:
    """Our config composed with overrides, resolved to a plain dict (Hydra's compose API)."""
    return OmegaConf.to_container(_compose(overrides), resolve=True)


def _without_hydra(cfg) -> dict:
    """compose_config's result from a config composed with return_hydra_config=True."""
    job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    return OmegaConf.to_container(job, resolve=True)


def _is_hydra_override(line: str) -> bool:
    return line.startswith(("hydra.", "hydra/", "+hydra", "~hydra", "++hydra"))


def precheck(overrides: list[str], multirun: bool, environ: dict | None = None) -> int:
    """Compose and plan every combination (and its Slurm request when hydra/launcher=slurm);
    raise UsageError on the first bad one. Returns the number of jobs."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    environ = dict(os.environ if environ is None else environ)
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
        base = _compose(fixed, with_hydra=True)
        params = base.hydra.sweeper.get("params")
        sweeper_params = OmegaConf.to_container(params, resolve=True) if params is not None else {}
        launcher = OmegaConf.to_container(base.hydra.launcher, resolve=True)
        on_slurm = launcher.get("_target_") == SLURM_LAUNCHER
        if on_slurm and not multirun:
            raise UsageError("hydra/launcher=slurm submits only with --multirun (a single run is a sweep of one: "
                             "add --multirun)")
        combos = _combinations(overrides, multirun, sweeper_params)
        # `base` already holds the job config of a combination made of the fixed overrides alone
        # (a single run): not composing it again saves a third of a cached dry run
        fixed_job = [o for o in fixed if not _is_hydra_override(o)]
        for combo in combos:
            job = [o for o in combo if not _is_hydra_override(o)]
            composed = _without_hydra(base) if job == fixed_job else compose_config(job)
            plan = build_plan(composed, run_dir="<run dir>", gpu_memory_gb=_detected_gpu_memory(composed, environ))
            refusal = None if on_slurm else _outside_multi_node_job(plan, composed["dry_run"],
                                                                     ray_cluster.slurm_task(environ))
            if refusal:
                raise UsageError(refusal)
            if on_slurm:
                slurm_request.check(launcher, composed, environ)
                slurm_request.resources(plan, bool(_debug(composed).get("nodes_as_tasks")))
        if on_slurm and shutil.which("sbatch") is None:
            raise UsageError("hydra/launcher=slurm needs Slurm (no sbatch on PATH); on a workstation, start the "
                             "dev cluster first: see slurm/README.md")
    except (PlanError, slurm_request.RequestError) as exc:
        raise UsageError(str(exc)) from None
    except UsageError:
        raise
    except Exception as exc:  # Hydra's composition and override-grammar errors
        raise UsageError(_one_line(exc)) from None
    return len(combos)


# ---------------------------------------------------------------------------------------
# one run
# ---------------------------------------------------------------------------------------
def _remove_if_empty(run_dir: Path) -> None:
    if run_dir.is_dir() and not any(run_dir.iterdir()):
        run_dir.rmdir()


def execute(composed: dict, overrides: list[str], run_dir: Path, environ: dict | None = None,
            lineage: "Lineage | None" = None) -> int:
    """Plan, build and validate the verl config, preflight, snapshot, run. Returns an exit code."""
    try:
        run(composed, overrides, run_dir, environ, lineage)
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    return 0


def run(composed: dict, overrides: list[str], run_dir: Path, environ: dict | None = None,
        lineage: "Lineage | None" = None) -> None:
    """One run (or, in a multi-node Slurm job, this node's part of it). Raises RunError.
    `lineage`: how a --from-snapshot run relates to the run it came from (None: a new run)."""
    environ = dict(os.environ if environ is None else environ)
    dry = bool(composed["dry_run"])
    try:
        plan = build_plan(composed, run_dir=str(run_dir), gpu_memory_gb=_detected_gpu_memory(composed, environ))
        task = ray_cluster.slurm_task(environ)
        refusal = _outside_multi_node_job(plan, dry, task)
        if refusal:
            raise UsageError(refusal)
    except (PlanError, UsageError) as exc:
        _remove_if_empty(run_dir)
        raise RunError(str(exc), USAGE_EXIT) from None
    if task is None or plan.nodes == 1:
        _run_node0(composed, overrides, run_dir, environ, plan, task, lineage)
    elif task.rank > 0:
        # nodes 1..K-1 of a multi-node job: no snapshot, no verl; a Ray worker (and scorer) only
        if not dry:
            _worker_node(composed, plan, task, run_dir, environ)
    elif dry:
        _run_node0(composed, overrides, run_dir, environ, plan, task, lineage)
    else:
        try:
            _run_node0(composed, overrides, run_dir, environ, plan, task, lineage)
        finally:
            # the other nodes wait for node 0's Ray head: however this ends, let them go
            ray_cluster.release_workers(run_dir, task)


def _run_node0(composed: dict, overrides: list[str], run_dir: Path, environ: dict, plan: RunPlan, task,
               lineage: "Lineage | None" = None) -> None:
    """The run itself (node 0 of a multi-node job): verl config, identity, preflight, snapshot, training."""
    from src import plan_table, verl_config

    dry = bool(composed["dry_run"])
    try:
        try:
            verl_cfg = verl_config.build(plan, composed)
        except Exception as exc:  # verl's own validation said no
            raise UsageError(f"verl rejected the config: {_verl_reason(exc, overrides)}") from None
        plan, verl_cfg, ident = identify(plan, composed, overrides, verl_cfg, lineage)
        # a dir holds one run: refused before anything is written (dry runs too; they write nothing)
        refusal = run_identity.check_dir(Path(verl_cfg.trainer.default_local_dir), ident, plan.run_id)
        if refusal:
            raise UsageError(refusal)
        # dry runs too: the val/train rows' split tags decide which reward they get (the splits
        # as the reward function receives them; absent only in snapshots older than the key)
        splits = OmegaConf.select(verl_cfg, "reward.custom_reward_function.reward_kwargs.validation_splits")
        if splits is not None:
            preflight.check_data_splits(plan, splits)
        command = train_command(composed, run_dir)
        if not dry:
            preflight.run(plan, environ, scorer=_scorer_enabled(composed))
        verl_yaml = verl_config.to_yaml(verl_cfg)
        snap = snapshot.reuse(run_dir, verl_yaml)
        if snap is not None:
            print(f"run dir {run_dir} already holds this run's snapshot (a requeued or resumed job): reusing it")
        else:
            snap = snapshot.write(
                run_dir, composed=composed, overrides=overrides, plan=plan.to_dict(), verl_yaml=verl_yaml,
                command=command, scorer_python=composed["scorer"]["python"], environ=environ)
    except (PlanError, preflight.PreflightError, UsageError, snapshot.SnapshotMismatch) as exc:
        _remove_if_empty(run_dir)
        raise RunError(str(exc), USAGE_EXIT) from None
    plan_table.render(plan, command, str(snap / "verl_config.yaml"), lineage=_lineage_line(plan, lineage))
    if dry:
        print(f"dry run: nothing started; snapshot in {snap}; nothing written to {plan.checkpoint_dir}")
        return
    run_identity.record(Path(verl_cfg.trainer.default_local_dir), ident, plan.run_id, plan.reproduces)
    if _debug(composed).get("train_command_override"):
        print(f"WARNING: debug.train_command_override is set: running {shlex.join(command)} instead of verl",
              file=sys.stderr)
    _record_attempt(run_dir, task, command)
    env, scorer_devices = _run_env(plan, environ)
    rank = task.rank if task is not None else 0
    # the scorer first: its URL and token are in the env of everything started after it (this
    # node's Ray head, verl and its reward workers)
    stop = runner.TrainingStop()
    services = [lambda e: node_services.scorer(plan, rank, run_dir, e, scorer_devices, on_fatal=stop,
                                               enabled=_scorer_enabled(composed))]
    if plan.nodes > 1:
        # Ray gets the CPUs Slurm granted this task and the training GPUs (not the scorer's)
        services.append(lambda e: ray_cluster.head(task, plan.nodes, task.cpus or plan.node_cpus, plan.gpus_per_node,
                                                   run_dir, e))
    log = run_dir / "train.log"
    # in a Slurm job: the time-limit signal has the step in progress saved, then the job requeued
    watch = (runner.TimeLimitWatch(plan.checkpoint_dir, plan.time_limit.stop_by_s)
             if task is not None and plan.time_limit is not None else None)
    try:
        code = runner.run(command, env=env, log_path=log, services=services, stop=stop, watch=watch)
    except (ray_cluster.RayBootstrapError, scorer_process.ScorerError, runner.ServiceFailure) as exc:
        raise RunError(str(exc)) from None
    if smoke.requested(composed):  # experiment=smoke: check each stage, prove resume, print the verdict
        smoke.check(plan, run_dir, code, env, lambda e, l: runner.run(command, env=e, log_path=l, services=services,
                                                                      stop=stop))
    if code != 0:
        raise RunError(f"training command exited with code {code}; log: {log}{_last_line(log)}", code)


@dataclass(frozen=True)
class Lineage:
    """A --from-snapshot run: the original's plan.json (its checkpoint dir, id, reproduction) and
    whether this run continues it (--resume) or reproduces it from step 0 in a new dir."""
    original: dict
    resume: bool


def identify(plan: RunPlan, composed: dict, overrides: list[str], verl_cfg, lineage: "Lineage | None"):
    """(plan with its run's names, verl config with those names filled in, identity dict). The id
    is computed from the verl config with the name/dir keys excluded, so filling them in after
    does not change it (src/run_identity.py)."""
    from src import verl_config

    models = {m.name: {"path": m.path, "kind": m.kind, "dtype": plan.scorer.dtype}
              for m in (plan.scorer.models if plan.scorer else ())}
    ident = run_identity.identity(OmegaConf.to_container(verl_cfg, resolve=True), models)
    rid = run_identity.run_id(ident)
    name = run_identity.readable_name(overrides, plan.seed)
    if lineage is None:
        plan = with_identity(plan, rid, name)
    elif lineage.resume:
        # continue the original in its own dir, whatever the id of today's config: the dir's
        # identity file then says whether it still is the same training config
        original = lineage.original
        plan = with_identity(plan, original.get("run_id") or rid, name)
        plan = replace(plan, checkpoint_dir=original["checkpoint_dir"], reproduces=original.get("reproduces"),
                       wandb_run_id=original.get("wandb_run_id") or plan.wandb_run_id,
                       wandb_run_name=original.get("wandb_run_name") or plan.wandb_run_name)
    else:
        source = lineage.original.get("run_id") or rid
        base = with_identity(plan, rid, name).checkpoint_dir
        # the N-th reproduction gets the first free dir: a reproduction never resumes another's checkpoints
        n = next(i for i in range(1, 10_000) if not Path(f"{base}-repro{i}").exists())
        plan = with_identity(plan, rid, name, reproduces=source, reproduction=n)
    user_set = set(plan.verl_passthrough)
    for key, source_fn in verl_config.VERL_KEYS:
        bare = key.lstrip("+")
        # a hand-set path (+verl.trainer.default_local_dir=...) stays the user's
        if run_identity.is_excluded(bare) and bare not in user_set:
            OmegaConf.update(verl_cfg, bare, source_fn(plan, composed), force_add=True)
    if "trainer.default_local_dir" in user_set:
        # the metrics, identity file and preflight follow the dir verl will really use
        plan = replace(plan, checkpoint_dir=str(verl_cfg.trainer.default_local_dir))
    # verl's rollout.yaml sets these to ${oc.select:trainer.project_name/experiment_name}; the config
    # was resolved before the names existed
    trace = verl_cfg.actor_rollout_ref.rollout.trace
    trace.project_name, trace.experiment_name = verl_cfg.trainer.project_name, verl_cfg.trainer.experiment_name
    return plan, verl_cfg, ident


def _lineage_line(plan: RunPlan, lineage: "Lineage | None") -> str | None:
    if lineage is None:
        return None
    original = lineage.original.get("run_id") or "?"
    if lineage.resume:
        return f"resuming run {original} in its own dir {plan.checkpoint_dir} (--from-snapshot --resume)"
    return (f"reproducing run {original} from step 0 into a new dir {plan.checkpoint_dir} "
            f"(--from-snapshot; add --resume to continue the original instead)")


def _detected_gpu_memory(composed: dict, environ: dict) -> float | None:
    """GiB per GPU read from the visible GPUs, only when memory.gpu_gb is null (the plan stays pure)."""
    if (composed.get("memory") or {}).get("gpu_gb") is not None:
        return None
    return preflight.gpu_memory_gb(environ)


def _outside_multi_node_job(plan: RunPlan, dry: bool, task) -> str | None:
    """Why this process cannot run (its part of) a multi-node run, or None."""
    if plan.nodes > 1 and not dry and (task is None or task.ntasks != plan.nodes):
        return (f"nodes={plan.nodes} needs a Slurm job with one task on each of {plan.nodes} nodes, this process "
                f"has {'no Slurm job' if task is None else f'{task.ntasks} task(s)'}; submit it with "
                f"--multirun hydra/launcher=slurm")
    return None


def train_command(composed: dict, run_dir: Path) -> list[str]:
    """verl's command, or the debug stand-in that replaces it (tests)."""
    override = _debug(composed).get("train_command_override")
    if override:
        return shlex.split(override)
    return runner.verl_command(sys.executable, run_dir / snapshot.SNAPSHOT, run_dir)


def _scorer_enabled(composed: dict) -> bool:
    return not _debug(composed).get("skip_scorer")


def _debug(composed: dict) -> dict:
    return composed.get("debug") or {}  # absent in snapshots written before the knob existed


def _last_line(log: Path) -> str:
    try:
        lines = [l.strip() for l in log.read_text(encoding="utf-8", errors="replace").splitlines() if l.strip()]
    except OSError:
        return ""
    return f" (last line: {lines[-1][:300]})" if lines else ""


def _record_attempt(run_dir: Path, task, command: list[str]) -> None:
    """One line per start in <run dir>/attempts.jsonl: a requeued job shows as a second line."""
    entry = {"started": dt.datetime.now().isoformat(timespec="seconds"), "host": socket.gethostname(),
             "slurm_job_id": task.job_id if task else None, "slurm_restart": task.restart if task else None,
             "command": command}
    with open(run_dir / "attempts.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def _worker_node(composed: dict, plan: RunPlan, task, run_dir: Path, environ: dict) -> None:
    """Nodes 1..K-1: this node's scorer and Ray worker, for as long as node 0 runs."""
    try:
        try:
            preflight.run(plan, environ, scorer=_scorer_enabled(composed))
        except preflight.PreflightError as exc:
            raise RunError(f"node {task.rank}: {exc}", USAGE_EXIT) from None
        env, scorer_devices = _run_env(plan, environ)
        # a scorer that dies for good ends this node's Ray worker; verl on node 0 then fails
        failures: list[str] = []
        try:
            # the time-limit signal reaches this node's processes too: they must not die of it
            with runner.SigtermAsInterrupt(), runner.TimeLimitSignalBlocked(), \
                    node_services.scorer(plan, task.rank, run_dir, env, scorer_devices, on_fatal=failures.append,
                                         enabled=_scorer_enabled(composed)) as extra:
                env.update(extra)
                ray_cluster.run_worker(task, task.cpus or plan.node_cpus, plan.gpus_per_node, run_dir, env,
                                       abort=lambda: failures[0] if failures else None)
        except (ray_cluster.RayBootstrapError, scorer_process.ScorerError) as exc:
            raise RunError(str(exc)) from None
    except RunError as exc:
        # node 0 waits for this node to join its Ray cluster: tell it not to
        ray_cluster.worker_failed(run_dir, task, str(exc))
        raise


def _run_env(plan: RunPlan, environ: dict) -> tuple[dict, str | None]:
    """The environment of the training processes on this node, and the scorer's GPUs."""
    env = runner.run_environment(environ, plan.accelerator_env)
    training_devices, scorer_devices = node_services.split_devices(plan, environ)
    env.update(training_devices)
    # verl's file logger truncates its file on open ("wb", verl/utils/tracking.py FileLogger): one
    # file per launch, in the checkpoint dir that every attempt of this run shares (a requeue, the
    # same command again, --from-snapshot --resume), so src/report reads all attempts as one series
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    metrics = Path(plan.checkpoint_dir) / "metrics"
    env["VERL_FILE_LOGGER_PATH"] = f"{metrics}/{stamp}-{Path(plan.run_dir).name}.jsonl"
    # verl's FileLogger opens that path without creating its dir
    metrics.mkdir(parents=True, exist_ok=True)
    env.setdefault("HF_HUB_OFFLINE", "1")
    if plan.wandb_offline:
        env["WANDB_MODE"] = "offline"
    # every attempt on this checkpoint dir continues one wandb run (env, not the verl config,
    # which must stay byte-identical across re-runs)
    env["WANDB_RUN_ID"] = plan.wandb_run_id
    env["WANDB_RESUME"] = "allow"
    # verl's wandb.init passes project/name only (verl/utils/tracking.py Tracking.__init__); wandb
    # reads the group from WANDB_RUN_GROUP: a sweep's jobs are grouped by their sweep dir
    if environ.get("QE_RL_SWEEP"):
        env.setdefault("WANDB_RUN_GROUP", environ["QE_RL_SWEEP"])
    # verl, its Ray workers (on every node) and the reward function import `src` from the code
    # this run runs: the checkout, or a Slurm job's code snapshot
    env["PYTHONPATH"] = os.pathsep.join([str(CODE_ROOT)] + [p for p in [environ.get("PYTHONPATH")] if p])
    env["QE_RL_RUN_DIR"] = plan.run_dir
    env["QE_RL_CHECKPOINT_DIR"] = plan.checkpoint_dir
    env["QE_RL_VERL_CONFIG"] = str(Path(plan.run_dir) / snapshot.SNAPSHOT / "verl_config.yaml")
    if plan.nodes == 1:
        env.update(ray_cluster.single_node_env(environ))
    return env, scorer_devices


# ---------------------------------------------------------------------------------------
# --from-snapshot
# ---------------------------------------------------------------------------------------
def from_snapshot(snapshot_dir: Path, extra: list[str]) -> int:
    """Reproduce a run from step 0 into a new checkpoint dir, or with `--resume` continue it in
    its own dir. Either way a new run dir (snapshot, log) records this launch."""
    resume = "--resume" in extra
    extra = [a for a in extra if a != "--resume"]
    if not (snapshot_dir / "composed.yaml").is_file():
        print(f"error: {snapshot_dir} is not a snapshot dir (no composed.yaml); pass "
              f"outputs/runs/<run>/snapshot", file=sys.stderr)
        return USAGE_EXIT
    bad = [a for a in extra if a not in ("dry_run=true", "dry_run=false")]
    if bad:
        print(f"error: --from-snapshot reproduces a run exactly and takes no overrides but dry_run=, got "
              f"{bad[0]}; compose a new run instead", file=sys.stderr)
        return USAGE_EXIT
    composed, overrides = snapshot.load(snapshot_dir)
    try:
        original = json.loads((snapshot_dir / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        print(f"error: {snapshot_dir}/plan.json is missing or unreadable: it names the run's checkpoint dir; "
              f"pass a whole snapshot dir", file=sys.stderr)
        return USAGE_EXIT
    lineage = Lineage(original=original, resume=resume)
    if extra:
        composed["dry_run"] = extra[-1] == "dry_run=true"
    stamp = dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    run_dir = Path(composed["paths"]["output_dir"]) / "runs" / f"{stamp}_from_{snapshot_dir.parent.name}"
    code = execute(composed, overrides, run_dir, lineage=lineage)
    new_plan = run_dir / snapshot.SNAPSHOT / "plan.json"
    if new_plan.is_file() and original.get("run_id"):
        now = json.loads(new_plan.read_text(encoding="utf-8")).get("run_id")
        if now != original["run_id"]:
            print(f"warning: the training config's id is {now}, the snapshot's run was {original['run_id']} "
                  f"(verl or code changed); diff the two verl_config.yaml files", file=sys.stderr)
    return code


# ---------------------------------------------------------------------------------------
# Hydra entry
# ---------------------------------------------------------------------------------------
def _hydra_task(cfg) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    register_resolvers()
    hc = HydraConfig.get()
    composed = OmegaConf.to_container(cfg, resolve=True)
    environ = dict(os.environ)
    if hc.mode == RunMode.MULTIRUN:
        # the sweep's dir names it (timestamped once per sweep; a requeued job keeps it)
        environ.setdefault("QE_RL_SWEEP", "sweep-" + Path(hc.sweep.dir).name)
    try:
        run(composed, list(hc.overrides.task), Path(hc.runtime.output_dir), environ)
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if hc.mode == RunMode.MULTIRUN:
            raise  # the sweep goes on; the launcher reports this job with its overrides and log
        sys.exit(exc.code)
    except KeyboardInterrupt as exc:
        # Ctrl-C, or Slurm's SIGTERM (preemption, requeue, scancel; src/runner.py): training and
        # services are stopped. No result is written, so a requeued job simply runs again.
        print(f"stopped ({exc or 'interrupt'}): a requeued or resumed run continues from the last checkpoint "
              f"in the checkpoint dir", file=sys.stderr)
        sys.exit(130)


_GPUS = re.compile(r"^(gpus|~gpus)=(-?\d+(?:,-?\d+)*)$")


def quote_gpu_counts(arg: str) -> str:
    """gpus=4 -> gpus='4'. Hydra 1.3 rejects int values for a config group ("Config group
    override must be a string"), and quoted values survive sweep expansion as strings."""
    match = _GPUS.match(arg)
    if match is None:
        return arg
    return f"{match.group(1)}=" + ",".join(f"'{v}'" for v in match.group(2).split(","))


def main(argv: list[str] | None = None) -> int:
    argv = [quote_gpu_counts(a) for a in (sys.argv[1:] if argv is None else argv)]
    if "--from-snapshot" in argv:
        i = argv.index("--from-snapshot")
        if i + 1 >= len(argv):
            print("error: --from-snapshot needs a dir, e.g. --from-snapshot outputs/runs/<run>/snapshot",
                  file=sys.stderr)
            return USAGE_EXIT
        return from_snapshot(Path(argv[i + 1]), argv[:i] + argv[i + 2:])
    flags = [a for a in argv if a.startswith("-")]
    overrides = [a for a in argv if not a.startswith("-")]
    if not any(f in ("--help", "-h", "--hydra-help", "--info", "--cfg", "-c") or f.startswith("--info")
               for f in flags):
        try:
            precheck(overrides, multirun=any(f in ("--multirun", "-m") for f in flags))
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return USAGE_EXIT

    import hydra

    # The task from the importable module, not from __main__ (python -m src.launch): submitit
    # pickles it by reference, so a Slurm job imports it from its code snapshot.
    from src import launch as importable

    register_resolvers()
    entry = hydra.main(config_path=str(CONF_DIR), config_name="config",
                       version_base="1.3")(importable._hydra_task)
    sys.argv = [sys.argv[0], *argv]
    entry()
    return 0


if __name__ == "__main__":
    sys.exit(main())
