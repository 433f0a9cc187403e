"""verl's training entry with one addition: the step in progress is saved when Slurm's time limit nears.

Used instead of `python -m verl.trainer.main_ppo` (src/node/training.py VERL_ENTRY), with the same
arguments (--config-path/--config-name of the snapshot's verl config). What verl's `main` does is
done here with verl's own functions (verl/trainer/main_ppo.py, main: auto_set_device,
validate_config, run_ppo); only the TaskRunner class differs.

The seams, all in verl 0.9.1:
- `run_ppo(config, task_runner_class)` takes the TaskRunner class as an argument ("For recipe to
  change TaskRunner", verl/trainer/main_ppo.py, run_ppo). Ours subclasses verl's TaskRunnerV1 and
  keeps its `run` (TransferQueue setup, trainer init, fit, wandb finish) untouched.
- `TaskRunnerV1.run` picks the trainer class with `get_trainer_cls(trainer.v1.trainer_mode)`
  (verl/trainer/ppo/v1/trainer_base.py, get_trainer_cls reads TRAINER_REGISTRY). In the TaskRunner
  actor's own process, that registry entry is pointed at a subclass of verl's registered class
  for the duration of `run`; `register_trainer` refuses re-registration, so the entry is set directly.
- The subclass also holds, with reward.normalise=per_component, the batch's reward parts around
  verl's `_compute_advantage` (src/trainer/parts.py; inactive with any other estimator).
- verl's validation metrics resample best@n/worst@n in one numpy call instead of a Python loop, with the same
  numbers (src/trainer/val_bootstrap.py; verl/trainer/ppo/metric_utils.py looks `bootstrap_metric` up at each call).
- The subclass hooks `on_step_end`, which `PPOTrainer.fit` calls once per step after the step's
  update and after verl's periodic `_save_checkpoint` (trainer_base.py, PPOTrainer.fit). There,
  on a time-limit request (src/trainer/time_limit.py), it calls verl's own `_save_checkpoint()` (actor and
  critic shards through the worker groups, dataloader state, latest_checkpointed_iteration.txt)
  unless that step was just saved, and lowers `total_training_steps` to the current step: fit then
  still validates (if due), logs the step's metrics, and leaves its loop at the loop's own bound
  (`global_steps <= total_training_steps`), so verl shuts down as after a normal last step.

Before verl's `run`, `resolve_registrations` looks up, in the TaskRunner actor's process and with
verl's own lookup functions, every name of ours that verl resolves later (the advantage estimator,
the trainer class, the replay buffer, the agent loop manager and its agent loop, the reward
function and manager): verl finds them only minutes in (after the models load), and only in the
process that registered them, so a name that does not resolve there (the code root missing from a
node's PYTHONPATH, a registration that did not run in this process) stops the run first, in one
line. It prints what each name resolved to: tests/loop/test_reward_paths.py reads that line from the actor.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time

from . import run_vars, time_limit
from .checkpoints import KeptWhole
from .progress import step_end_line
from .parts import RewardPartsAdvantage
from .val_bootstrap import resampled_at_once

logger = logging.getLogger(__name__)


class TimeLimitSave:
    """Mixed in before verl's trainer class (see `time_limited`)."""

    def on_step_end(self):
        super().on_step_end()
        # the launcher reads start-up's end (src/node/startup.py) and the terminal's progress line
        # (src/node/console.py) from it, whatever loggers the run has; total_training_steps is verl's own
        # bound of fit's loop (trainer_base.py, PPOTrainer.fit), derived from the data when not set
        print(step_end_line(self.global_steps, total=self.total_training_steps), flush=True)
        ckpt = self.config.trainer.default_local_dir
        step = self.global_steps
        finished = step >= self.total_training_steps
        if finished:
            # a signal after this check (verl's shutdown) must not requeue a finished run (time_limit.py, 5)
            time_limit.record_finished(ckpt, step)
        if not time_limit.requested(ckpt):
            return
        save_freq = self.config.trainer.save_freq
        # the condition under which PPOTrainer.fit has just saved this step (trainer_base.py, fit)
        saved_by_verl = save_freq > 0 and (finished or step % save_freq == 0)
        if not saved_by_verl:
            t0 = time.monotonic()
            self._save_checkpoint()
            print(f"time limit: saved step {step} to {ckpt} in {time.monotonic() - t0:.1f}s", flush=True)
        else:
            print(f"time limit: step {step} was just saved by the periodic save", flush=True)
        # fit's loop ends after this step: `global_steps <= total_training_steps` fails once it
        # increments global_steps (trainer_base.py, PPOTrainer.fit)
        self.total_training_steps = step
        time_limit.record_saved(ckpt, step, saved_now=not saved_by_verl, finished=finished)


_CLASSES: dict[type, type] = {}


def time_limited(base: type) -> type:
    """verl's trainer class `base` with TimeLimitSave, RewardPartsAdvantage and KeptWhole (every save, the
    periodic and the time limit's, keeps a checkpoint whole or not at all: src/trainer/checkpoints.py); one
    class per base (kept, for isinstance)."""
    if base not in _CLASSES:
        # __module__ given: verl's trainers are ABCs, and type() would otherwise name abc as the module
        _CLASSES[base] = type(f"TimeLimited{base.__name__}", (TimeLimitSave, RewardPartsAdvantage, KeptWhole, base),
                              {"__module__": __name__})
    return _CLASSES[base]


def _task_runner_base() -> type:
    from verl.trainer.main_ppo import TaskRunnerV1

    # the plain class under verl's @ray.remote (Ray keeps it as __ray_actor_class__)
    return TaskRunnerV1.__ray_actor_class__


@contextlib.contextmanager
def time_limited_trainer(mode: str):
    """verl's registry entry for `mode` points at the time-limited subclass while inside (the
    TaskRunner actor's own process; trainer_base.py, get_trainer_cls reads TRAINER_REGISTRY)."""
    from verl.trainer.ppo.v1 import trainer_base

    original = trainer_base.get_trainer_cls(mode)
    trainer_base.TRAINER_REGISTRY[mode] = time_limited(original)
    try:
        yield trainer_base.TRAINER_REGISTRY[mode]
    finally:
        trainer_base.TRAINER_REGISTRY[mode] = original


class TimeLimitTaskRunner(_task_runner_base()):
    """verl's TaskRunnerV1 whose trainer saves on a time-limit request (module docstring)."""

    def run(self, config):
        from src.rewards import normalise
        from src.rewards.credit.estimator import register_for  # grpo_token (reward.credit=token) in this process
        register_for(config)
        normalise.register_for(config)  # grpo_per_component (reward.normalise=per_component)

        # validation's best@n/worst@n resampled in one numpy call, the same numbers (src/trainer/val_bootstrap.py)
        with time_limited_trainer(config.trainer.v1.trainer_mode) as cls, resampled_at_once():
            resolved = "; ".join(f"{what} -> {name}" for what, name in resolve_registrations(config))
            print(f"src.trainer: resolved in the TaskRunner (pid {os.getpid()}): {resolved}", flush=True)
            print(f"src.trainer: trainer {cls.__name__}; on a Slurm time limit it saves the step in progress "
                  f"(asked through {time_limit.flag_dir(config.trainer.default_local_dir)})", flush=True)
            return super().run(config)


def _qualified(obj) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _agent_loop_class(name: str) -> type:
    """The class verl's agent loop worker instantiates for `name` (verl/experimental/agent_loop/
    agent_loop.py: `_agent_loop_registry[name]`, a hydra `_target_`). The registry is per process and
    our loop is registered by each worker itself (TokenCreditAgentLoopWorker.__init__): the same call
    runs here first, so what resolves is what the worker will find."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    from src.rewards.credit import agent_loop as credit_agent_loop

    if name == credit_agent_loop.AGENT_NAME:
        credit_agent_loop.register_agent_loop()
    if name not in _agent_loop_registry:
        raise KeyError(f"no agent loop registered under {name!r} (known: {sorted(_agent_loop_registry)})")
    return hydra.utils.get_class(_agent_loop_registry[name]["_target_"])


def resolve_registrations(config) -> list[tuple[str, str]]:
    """(what, the qualified name it resolves to) for each name verl looks up later in this run, each
    looked up as verl does it; a name that does not resolve stops the run in one line (module
    docstring). Runs in the TaskRunner's process, after `register_for`."""
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls
    from verl.trainer.ppo.v1 import trainer_base
    from verl.utils.import_utils import load_class_from_fqn, load_extern_object

    from .guard import stop

    rollout_agent = config.actor_rollout_ref.rollout.get("agent") or {}
    sampler = config.trainer.v1.sampler.get("custom_sampler") or {}
    reward_fn = config.reward.get("custom_reward_function") or {}
    manager = config.reward.reward_manager
    lookups = [
        # verl/trainer/ppo/ray_trainer.py compute_advantage -> core_algos.get_adv_estimator_fn
        (f"adv_estimator {config.algorithm.adv_estimator}",
         lambda: core_algos.get_adv_estimator_fn(config.algorithm.adv_estimator)),
        # verl/trainer/main_ppo.py TaskRunnerV1.run -> trainer_base.get_trainer_cls
        (f"trainer {config.trainer.v1.trainer_mode}", lambda: trainer_base.get_trainer_cls(config.trainer.v1.trainer_mode)),
    ]
    if sampler.get("path") and sampler.get("name"):
        # trainer_base.py PPOTrainer._build_replay_buffer (load_extern_type = load_extern_object)
        lookups.append((f"replay buffer {sampler.path}:{sampler.name}",
                        lambda: load_extern_object(sampler.path, sampler.name)))
    if rollout_agent.get("agent_loop_manager_class"):
        # main_ppo.py TaskRunnerV1.init_agent_loop_manager
        lookups.append(("agent loop manager",
                        lambda: load_class_from_fqn(rollout_agent.agent_loop_manager_class, "AgentLoopManager")))
    if rollout_agent.get("default_agent_loop"):
        lookups.append((f"agent loop {rollout_agent.default_agent_loop}",
                        lambda: _agent_loop_class(rollout_agent.default_agent_loop)))
    if reward_fn.get("path"):
        # verl/trainer/ppo/reward.py get_custom_reward_fn (what every reward loop worker runs)
        lookups.append((f"reward function {reward_fn.path}:{reward_fn.name}",
                        lambda: get_custom_reward_fn(config) and load_extern_object(reward_fn.path, reward_fn.name)))
    # reward.py resolve_reward_manager_cls (the RewardLoopManager here, each reward loop worker)
    lookups.append((f"reward manager {manager.name} ({manager.source})", lambda: resolve_reward_manager_cls(config)))
    resolved = []
    for what, lookup in lookups:
        try:
            resolved.append((what, _qualified(lookup())))
        except Exception as exc:  # noqa: BLE001  (any failure to resolve is reported the same way)
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())
            stop(f"{what} does not resolve in verl's TaskRunner (pid {os.getpid()}): {detail}; PYTHONPATH="
                 f"{os.environ.get('PYTHONPATH', '')!r} (the code root must be on it on every node)")
    return resolved


def task_runner_class(config):
    """The Ray actor class run_ppo starts: ours for the V1 trainer; verl's legacy TaskRunner, as is,
    for use_v1=false (its expiration save, should_save_ckpt_esi in verl/utils/checkpoint/
    checkpoint_manager.py, reads cloud capacity-block expiry variables, not Slurm's time limit)."""
    import ray

    if config.trainer.use_v1:
        return ray.remote(TimeLimitTaskRunner)
    from verl.trainer.main_ppo_v0 import TaskRunner

    logger.warning("trainer.use_v1=false: the legacy trainer does not read the time-limit flag "
                   "(src/trainer/entry.py); a time limit loses the steps since its last save")
    return TaskRunner


def train(config) -> None:
    """What verl's main does (verl/trainer/main_ppo.py, main), with our TaskRunner."""
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config),
                    use_critic=need_critic(config))
    run_vars.into_runtime_env(config)
    run_ppo(config, task_runner_class=task_runner_class(config))


def main() -> None:
    import hydra

    # config path and name come from the command line, as for verl's entry (src/node/training.py)
    hydra.main(config_path=None, config_name=None, version_base=None)(train)()
