"""Entry point: compose -> plan -> verl config (validated by verl) -> snapshot -> run.

    python -m src.launch reward=xcomet_xl gpus=4 dry_run=true
    python -m src.launch --multirun hydra/launcher=slurm reward=comet,xcomet_xl gpus=8
    python -m src.launch --from-snapshot outputs/runs/<run>/snapshot [dry_run=true]

Bad input (unknown option, gpus=0, a batch pin that breaks a verl rule, ...) is refused with
one line and exit code 2 before anything is written or submitted: every combination of a
sweep is composed and planned here first, before Hydra makes a run dir or a launcher submits.
"""
from __future__ import annotations

import datetime as dt
import os
import re
import sys
from pathlib import Path

from omegaconf import OmegaConf

from src import preflight, runner, snapshot
from src.plan import PlanError, RunPlan, build_plan
from src.resolvers import PROJECT_ROOT, register_resolvers

CONF_DIR = PROJECT_ROOT / "conf"
USAGE_EXIT = 2


class UsageError(Exception):
    """One-line refusal; the launcher prints it and exits 2."""


def _one_line(exc: BaseException) -> str:
    """Hydra's multi-line errors (e.g. the list of available options) folded onto one line."""
    lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
    if not lines:
        return type(exc).__name__
    head = lines[0]
    if any(l.startswith("Available options") for l in lines):
        idx = next(i for i, l in enumerate(lines) if l.startswith("Available options"))
        head += f" ({lines[idx].rstrip(':').lower()}: {', '.join(lines[idx + 1:])})"
    return head


# ---------------------------------------------------------------------------------------
# pre-launch check: compose and plan every combination before Hydra acts
# ---------------------------------------------------------------------------------------
def _combinations(overrides: list[str], multirun: bool) -> list[list[str]]:
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    if not multirun:
        sweeps = [o.input_line for o in parsed if o.is_sweep_override()]
        if sweeps:
            raise UsageError(f"{sweeps[0]} is a sweep: add --multirun to run every value")
        return [overrides]
    batches = BasicSweeper.split_arguments(parsed, None)
    return [combo for batch in batches for combo in batch]


def compose_config(overrides: list[str]) -> dict:
    """Our config composed with overrides, resolved to a plain dict (Hydra's compose API)."""
    from hydra import compose, initialize_config_dir

    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="launch"):
        cfg = compose(config_name="config", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)


def precheck(overrides: list[str], multirun: bool) -> int:
    """Compose and plan every combination; raise UsageError on the first bad one."""
    try:
        combos = _combinations(overrides, multirun)
        for combo in combos:
            build_plan(compose_config(combo), run_dir="<run dir>")
    except PlanError as exc:
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


def execute(composed: dict, overrides: list[str], run_dir: Path, environ: dict | None = None) -> int:
    """Plan, build and validate the verl config, preflight, snapshot, run. Returns an exit code."""
    from src import plan_table, verl_config

    environ = dict(os.environ if environ is None else environ)
    try:
        plan = build_plan(composed, run_dir=str(run_dir))
        try:
            verl_cfg = verl_config.build(plan, composed)
        except Exception as exc:  # verl's own validation said no
            raise UsageError(f"verl rejected the config: {_one_line(exc)}") from None
        command = runner.verl_command(sys.executable, run_dir / snapshot.SNAPSHOT, run_dir)
        if not composed["dry_run"]:
            preflight.run(plan, environ)
        snap = snapshot.write(
            run_dir, composed=composed, overrides=overrides, plan=plan.to_dict(),
            verl_yaml=verl_config.to_yaml(verl_cfg), command=command,
            scorer_python=composed["scorer"]["python"], environ=environ)
    except (PlanError, preflight.PreflightError, UsageError) as exc:
        _remove_if_empty(run_dir)
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_EXIT
    plan_table.render(plan, command, str(snap / "verl_config.yaml"))
    if composed["dry_run"]:
        print(f"dry run: nothing started; snapshot in {snap}")
        return 0
    return runner.run(command, env=_run_env(plan, environ), log_path=run_dir / "train.log")


def _run_env(plan: RunPlan, environ: dict) -> dict:
    env = runner.run_environment(environ, plan.accelerator_env)
    # verl's file logger truncates its file on open: one file per launch, so a requeued job
    # in the same run dir keeps the earlier steps (src/report merges metrics/*.jsonl by step)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    env["VERL_FILE_LOGGER_PATH"] = f"{plan.run_dir}/metrics/{stamp}.jsonl"
    env.setdefault("HF_HUB_OFFLINE", "1")
    if plan.wandb_offline:
        env["WANDB_MODE"] = "offline"
    return env


# ---------------------------------------------------------------------------------------
# --from-snapshot
# ---------------------------------------------------------------------------------------
def from_snapshot(snapshot_dir: Path, extra: list[str]) -> int:
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
    if extra:
        composed["dry_run"] = extra[-1] == "dry_run=true"
    stamp = dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    run_dir = Path(composed["paths"]["output_dir"]) / "runs" / f"{stamp}_from_{snapshot_dir.parent.name}"
    code = execute(composed, overrides, run_dir)
    if code == 0 or (run_dir / snapshot.SNAPSHOT).exists():
        old = (snapshot_dir / "verl_config.yaml").read_bytes()
        new = (run_dir / snapshot.SNAPSHOT / "verl_config.yaml").read_bytes()
        if old != new:
            print(f"warning: the verl config differs from {snapshot_dir} (verl or code changed); "
                  f"diff the two verl_config.yaml files", file=sys.stderr)
    return code


# ---------------------------------------------------------------------------------------
# Hydra entry
# ---------------------------------------------------------------------------------------
def _hydra_task(cfg) -> None:
    from hydra.core.hydra_config import HydraConfig

    register_resolvers()
    hc = HydraConfig.get()
    composed = OmegaConf.to_container(cfg, resolve=True)
    code = execute(composed, list(hc.overrides.task), Path(hc.runtime.output_dir))
    if code != 0:
        sys.exit(code)


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

    register_resolvers()
    entry = hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(_hydra_task)
    sys.argv = [sys.argv[0], *argv]
    entry()
    return 0


if __name__ == "__main__":
    sys.exit(main())
