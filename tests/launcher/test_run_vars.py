"""The run's own variables reach every Ray actor of a multi-node run (src/trainer/run_vars.py): found by the
two-node test in real steps, where verl's TaskRunner ran on node 1 with that node's environment and logged its
metrics outside the run's checkpoint dir."""
from __future__ import annotations

from omegaconf import OmegaConf

from src.config import compose_config
from src.node import environment
from src.plan import build_plan
from src.record import redact
from src.trainer import run_vars


def _verl_like() -> OmegaConf:
    cfg = OmegaConf.create({"ray_kwargs": {"ray_init": {"num_cpus": None, "runtime_env": {"py_executable": None}}}})
    OmegaConf.set_struct(cfg, True)  # as verl's config is: a new key needs open_dict
    return cfg


def test_every_variable_run_env_derives_from_the_runs_names_is_a_run_variable(tmp_path):
    composed = compose_config(["experiment=learn_tiny", "accelerator=cpu", "nodes=2", "gpus=1",
                               f"paths.output_dir={tmp_path}"])
    plan = build_plan(composed, run_dir=str(tmp_path / "run"), flash_attn=None)
    env, _ = environment.run_env(plan, {"QE_RL_SWEEP": "sweep-x"})
    named = {k for k, v in env.items() if isinstance(v, str) and v and
             (plan.checkpoint_dir in v or plan.run_dir in v or v == plan.wandb_run_id)}
    named |= {k for k in env if k.startswith("WANDB_")}
    assert named and named <= set(run_vars.RUN_VARS), named - set(run_vars.RUN_VARS)
    # verl prints the runtime_env it passes to ray.init: none of them may be a secret
    assert not [k for k in run_vars.RUN_VARS if redact.is_secret(k)]


def test_a_multi_node_trainer_hands_the_run_variables_to_every_actor_and_nothing_else():
    environ = {"RAY_ADDRESS": "10.0.0.1:6379", "WANDB_RUN_ID": "qerl-1234abcd", "VERL_FILE_LOGGER_PATH": "/r/m.jsonl",
               "QE_RL_CHECKPOINT_DIR": "/r", "WANDB_API_KEY": "secret", "QE_SCORER_TOKEN": "secret"}
    cfg = _verl_like()
    run_vars.into_runtime_env(cfg, environ)
    passed = OmegaConf.to_container(cfg.ray_kwargs.ray_init.runtime_env)
    assert passed == {"py_executable": None, "env_vars": {"WANDB_RUN_ID": "qerl-1234abcd",
                                                          "VERL_FILE_LOGGER_PATH": "/r/m.jsonl",
                                                          "QE_RL_CHECKPOINT_DIR": "/r"}}


def test_a_single_node_trainer_changes_nothing():
    cfg = _verl_like()
    run_vars.into_runtime_env(cfg, {"WANDB_RUN_ID": "qerl-1234abcd"})  # verl starts Ray here: actors inherit the env
    assert OmegaConf.to_container(cfg.ray_kwargs.ray_init.runtime_env) == {"py_executable": None}
