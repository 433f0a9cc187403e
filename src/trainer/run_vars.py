"""The run's own environment variables, which every process of a run reads whichever node it runs on.

src/node/environment.py run_env sets them for the training command from node 0's plan (the run's id, checkpoint
dir and metrics file). A Ray actor runs with the environment of the raylet that started it, not its caller's,
and in a multi-node run the raylets of nodes 1..K-1 were started from their own node's environment, which
knows none of these: verl's TaskRunner placed on another node logged its metrics to another file and would
have started another wandb run, and the time-limit flag would have been looked for in another dir. So the
trainer's entry hands them to every actor of the run through the job's runtime_env (`into_runtime_env`,
called by src/trainer/entry.py train).
None of them is a secret: verl prints the runtime_env it passes to ray.init (verl/trainer/main_ppo.py run_ppo).
"""
from __future__ import annotations

import os

from src.verl_fixes.weight_sync_socket import TAG_ENV

RUN_VARS = ("VERL_FILE_LOGGER_PATH", "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_DIR", "WANDB_MODE", "WANDB_RUN_GROUP",
            "QE_RL_RUN_DIR", "QE_RL_CHECKPOINT_DIR", "QE_RL_VERL_CONFIG", TAG_ENV)


def of(environ: dict | None = None) -> dict[str, str]:
    """The run's variables present in `environ` (default: this process's)."""
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in RUN_VARS if k in environ}


def into_runtime_env(config, environ: dict | None = None) -> None:
    """A multi-node run (RAY_ADDRESS: the cluster the launcher started on its nodes): the run's own variables go
    to every actor through the job's runtime_env, which verl merges into the one it passes to ray.init
    (verl/trainer/main_ppo.py run_ppo: ray_kwargs.ray_init.runtime_env). Changed in memory only: the snapshot's
    verl config stays as it was. A single-node run starts Ray from this process, whose environment every actor
    inherits."""
    from omegaconf import open_dict

    environ = os.environ if environ is None else environ
    if not environ.get("RAY_ADDRESS"):
        return
    with open_dict(config):
        runtime_env = config.ray_kwargs.ray_init.get("runtime_env") or {}
        config.ray_kwargs.ray_init.runtime_env = runtime_env
        config.ray_kwargs.ray_init.runtime_env.env_vars = {**(runtime_env.get("env_vars") or {}),
                                                           **of(environ)}
