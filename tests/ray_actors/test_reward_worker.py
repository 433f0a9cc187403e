"""verl's real reward-loop worker actor, started by verl's own RewardLoopManager (verl/experimental/
reward_loop/reward_loop.py, _init_reward_loop_workers: `ray.remote(RewardLoopWorker)` with a
soft node affinity) from the full project config (tests/ray_actors/conftest.py), on a Ray node
whose processes have the environment the runner gives a node (the raylet and its workers inherit
the environment of the process that starts Ray, as under verl's own `ray.init` in run_ppo, which
this module's cluster copies: the plan's 13 logical CPUs, verl's runtime env). The one change to
the config: reward.num_workers=1 (the plan's 8 workers would each load verl on 2 shared cores).

Asserted inside that actor's process (through Ray's `__ray_call__`, tests/ray_actors/probes.py):
verl loaded our reward manager and our reward function there, from the code root; the node's
scorer variables are in its environment; and a fresh interpreter with that environment and
another working directory imports both (the worker itself also sees Ray's copy of the driver's
working directory on sys.path, a node does not). Then the actor computes a real reward the way
verl's agent loop asks for one (`compute_score.remote` with one trajectory, agent_loop.py
AgentLoopWorker._compute_score) against the tiny QE service, checked against the service asked
directly. One Ray cluster for the module, shut down after.
"""
from __future__ import annotations

import copy
import os
import shutil
import time

import pytest

from tests.rewards.test_verl_managers import RESPONSE, SRC, clip01, sample, xcomet_of
from tests.rewards.conftest import extra_info

START_S = 300  # the actor's start: verl and torch imported on a loaded 2-core machine


@pytest.fixture(scope="module")
def reward_worker(project, scorer_service):
    """(verl's RewardLoopWorker handle, seconds until it answered its first call); Ray shut down after."""
    import ray
    from omegaconf import OmegaConf, open_dict
    from verl.experimental.reward_loop.reward_loop import RewardLoopManager
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    from src.config import CODE_ROOT

    config = copy.deepcopy(project.verl_config)
    with open_dict(config):
        config.reward.num_workers = 1
    OmegaConf.resolve(config)  # as TaskRunnerV1.run does before building anything
    env = project.node_env(scorer_service.url, str(scorer_service.log))
    ray_init = OmegaConf.to_container(config.ray_kwargs.ray_init)
    saved = dict(os.environ)
    t0 = time.monotonic()
    os.environ.clear()
    os.environ.update(env)
    try:
        # what verl/trainer/main_ppo.py run_ppo passes to ray.init; the node address on loopback
        # (this test process may reach nothing else)
        runtime_env = OmegaConf.to_container(OmegaConf.merge(get_ppo_ray_runtime_env(config),
                                                             ray_init.pop("runtime_env", None) or {}))
        runtime_env.setdefault("env_vars", {})["TRANSFER_QUEUE_ENABLE"] = "1"
        assert ray_init["num_cpus"] == project.plan.ray_num_cpus == 13
        ray.init(**ray_init, runtime_env=runtime_env, _node_ip_address="127.0.0.1", include_dashboard=False,
                 _temp_dir=env["RAY_TMPDIR"], log_to_driver=False)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        manager = RewardLoopManager(config=config, rm_resource_pool=None)
        (worker,) = manager.reward_loop_workers
        ready = ray.get(worker.__ray_call__.remote(lambda w: w.reward_manager is not None), timeout=START_S)
        assert ready
        yield worker, time.monotonic() - t0, CODE_ROOT
    finally:
        ray.shutdown()
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)


def test_the_reward_workers_registrations_resolve_inside_it(reward_worker, scorer_service):
    import ray

    from tests.ray_actors import probes

    worker, seconds, code_root = reward_worker
    print(f"verl's reward-loop worker actor ready in {seconds:.1f}s")
    seen = ray.get(worker.__ray_call__.remote(probes.reward_worker), timeout=START_S)
    assert seen["pid"] != os.getpid()
    assert seen["manager"] == "src.rewards.managers.PureValidationDAPORewardManager"
    assert seen["compute_score"] == "src.rewards.compute.compute_score"
    assert seen["compute_score_file"] == str(code_root / "src" / "rewards" / "compute.py")
    assert seen["env"] == {"QE_SCORER_URL": scorer_service.url, "QE_SCORER_LOG": str(scorer_service.log),
                           "PYTHONPATH": str(code_root), "HF_HUB_OFFLINE": "1"}
    code, out, err = seen["clean_import"]
    assert code == 0, err
    assert out == [str(code_root / "src" / "rewards" / "compute.py"), str(code_root / "src" / "rewards" / "managers.py"),
                   "compute_score"]


def test_the_reward_worker_computes_a_real_reward_against_the_scorer(reward_worker, scorer_service, project):
    import ray
    from transformers import AutoTokenizer

    from src.rewards.credit.ranges import RESULT_KEY

    worker, _, _ = reward_worker
    tokenizer = AutoTokenizer.from_pretrained(project.verl_config.actor_rollout_ref.model.path, local_files_only=True)
    info = extra_info(SRC)
    before = scorer_service.items_by_model().get("xcomet_xl", 0)
    out = ray.get(worker.compute_score.remote(sample(tokenizer, RESPONSE, info)), timeout=START_S)
    extra = out["reward_extra_info"]
    expected = xcomet_of(scorer_service)  # the service asked directly, QE mode (no reference)
    assert scorer_service.items_by_model().get("xcomet_xl", 0) > before   # the actor's call reached it
    assert extra["xcomet"] == pytest.approx(expected["score"], abs=1e-4)
    assert extra["mqm"] == pytest.approx(expected["mqm"], abs=1e-4)
    # xcomet_xl's training answer: format 1 + XCOMET clipped to [0, 1]; DAPO adds no overlong penalty here
    assert extra["score"] == pytest.approx(1.0 + clip01(expected["score"]), abs=1e-4)
    assert float(out["reward_score"]) == pytest.approx(extra["score"]) and float(extra["overlong_reward"]) == 0
    assert extra["score_rounded"] == round(extra["score"], 2)   # DAPO's filter key
    assert isinstance(extra[RESULT_KEY], str)                   # token credit: the ranges for the agent loop
