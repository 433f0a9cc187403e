"""verl's rollout-side actors on one Ray node whose processes have the environment the runner gives
a node (the raylet and its workers inherit the environment of the process that starts Ray, as
under verl's own `ray.init` in run_ppo, which this module's cluster copies: the plan's 13 logical
CPUs, verl's runtime env), from the full project config (tests/ray_actors/conftest.py), with
TransferQueue started as TaskRunnerV1.run starts it. Changed in the config, for time only: one
reward worker, one agent-loop worker and one storage unit instead of the plan's 8 of each.

- verl's reward-loop worker actor, started by verl's own RewardLoopManager (verl/experimental/
  reward_loop/reward_loop.py, _init_reward_loop_workers). Asserted inside it (through Ray's
  `__ray_call__`, tests/ray_actors/probes.py): verl loaded our reward manager and our reward function
  there, from the code root; the node's scorer variables are in its environment; a fresh interpreter
  with that environment and another working directory imports both (the actor itself also sees Ray's
  copy of the driver's working directory on sys.path, a node does not). Then it computes a real
  reward the way verl's agent loop asks for one (`compute_score.remote`, one trajectory; agent_loop.py
  AgentLoopWorker._compute_score) against the tiny QE service, checked against the service itself.
- verl's agent-loop worker actor, started by our TokenCreditAgentLoopManager through verl's
  AgentLoopManager.create. Asserted inside it: it is our worker class and verl's per-process agent
  loop registry resolves the configured loop to ours there. Then a step's prompts from verl's dataset
  run through it, the reward worker and the real TransferQueue, one session failing, and the guarded
  replay buffer samples the step with verl's ReplayBuffer.sample: the lost group is dropped whole.
One Ray cluster for the module, shut down after.
"""
from __future__ import annotations

import copy
import os
import shutil
import time

import pytest

from tests.helpers.reward_config import extra_info
from tests.helpers.reward_example import RESPONSE, SRC, clip01, xcomet_of
from tests.helpers.verl_reward_harness import sample

START_S = 300  # the actor's start: verl and torch imported on a loaded 2-core machine


@pytest.fixture(scope="module")
def rollout(project, scorer_service):
    """(verl's RewardLoopWorker handle, seconds until it answered, code root, verl config) on this
    module's Ray cluster, with TransferQueue started as TaskRunnerV1.run starts it; all shut down after."""
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf, open_dict
    from verl.experimental.reward_loop.reward_loop import RewardLoopManager
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    from src.config import CODE_ROOT

    config = copy.deepcopy(project.verl_config)
    with open_dict(config):
        # one reward and one agent-loop worker, one storage unit: the plan's 8 of each would each
        # load verl on 2 shared cores
        config.reward.num_workers = 1
        config.actor_rollout_ref.rollout.agent.num_workers = 1
        config.transfer_queue.backend.SimpleStorage.num_data_storage_units = 1
        config.data.cache_dir = str(project.root / "verl-cache")  # verl's default is under ~/.cache
        config.transfer_queue.enable = True  # as TaskRunnerV1.run sets it
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
        tq.init(config.transfer_queue)
        manager = RewardLoopManager(config=config, rm_resource_pool=None)
        (worker,) = manager.reward_loop_workers
        ready = ray.get(worker.__ray_call__.remote(lambda w: w.reward_manager is not None), timeout=START_S)
        assert ready
        yield worker, time.monotonic() - t0, CODE_ROOT, config
    finally:
        try:
            tq.close()
        finally:
            ray.shutdown()
            shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)


def test_the_reward_workers_registrations_resolve_inside_it(rollout, scorer_service):
    import ray

    from tests.ray_actors import probes

    worker, seconds, code_root, _ = rollout
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


def test_the_reward_worker_computes_a_real_reward_against_the_scorer(rollout, scorer_service, project):
    import ray
    from transformers import AutoTokenizer

    from src.rewards.credit.ranges import RESULT_KEY

    worker, _, _, _ = rollout
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


# the scripted policy's answers to each prompt, in turn: two well-formed, two that break the format
# (no scorer call), so each group's rounded scores differ and DAPO's filter keeps it
ANSWERS = ["<think>猫 is cat.</think>\n<translate>The cat sat on the mat.</translate>",
           "no tags at all",
           "<think>垫子 is mat.</think>\n<translate>A cat is sitting on the mat.</translate>",
           "<think>unfinished"]


def test_the_agent_loop_worker_runs_our_loop_and_a_lost_group_is_dropped_whole(rollout, project):
    """verl's agent-loop worker actor (started by our TokenCreditAgentLoopManager through verl's
    AgentLoopManager.create) runs the registered token-credit loop on prompts from verl's own
    dataset and collate, asks the reward-loop worker actor for each reward, and writes the
    trajectories into the real TransferQueue; one session fails (ScriptedPolicy), so verl tags its
    group `failure`. Then the guarded replay buffer, built as verl's trainer builds it, samples the
    step through verl's ReplayBuffer.sample on that TransferQueue: the lost group is dropped whole."""
    import itertools
    import uuid

    import numpy as np
    import ray
    import transfer_queue as tq
    from torchdata.stateful_dataloader import StatefulDataLoader
    from transformers import AutoTokenizer
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.rl_dataset import collate_fn
    from verl.utils.import_utils import load_extern_object

    from src.rewards.credit.agent_loop import TokenCreditAgentLoopManager
    from src.rewards.credit.ranges import RESULT_KEY
    from tests.ray_actors import probes

    reward_worker, _, _, config = rollout
    P, n, step = config.data.train_batch_size, config.actor_rollout_ref.rollout.n, 1
    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path, local_files_only=True)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    answers = [tokenizer(a, add_special_tokens=False)["input_ids"] + [end] for a in ANSWERS]
    manager = TokenCreditAgentLoopManager.create(config=config, llm_client=probes.ScriptedPolicy(answers),
                                                 teacher_client=None, reward_loop_worker_handles=[reward_worker])
    (agent_worker,) = manager.agent_loop_workers
    seen = ray.get(agent_worker.__ray_call__.remote(probes.agent_loop_worker), timeout=START_S)
    assert seen.pop("pid") != os.getpid()
    assert seen == {"worker": "src.rewards.credit.agent_loop.TokenCreditAgentLoopWorker",
                    "agent_loop": "token_credit_agent",
                    "resolves_to": "src.rewards.credit.agent_loop.TokenCreditAgentLoop"}

    # verl's dataset and collate on the prepared parquet, one prompt per fetch (gen_batch_size=1 under DAPO)
    dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None, is_train=True)
    rows = itertools.chain.from_iterable(itertools.repeat(
        StatefulDataLoader(dataset, batch_size=1, collate_fn=collate_fn, shuffle=False)))
    submitted: list[str] = []

    def submit(k: int) -> int:
        """verl's trainer: _fetch_one_gen_batch, _next_train_batch, _submit_batch_to_rollout (sync)."""
        chunks = []
        for _ in range(k):
            row = next(rows)
            row["uid"] = np.array([str(uuid.uuid4())], dtype=object)
            chunks.append(tu.get_tensordict(row))
        batch = chunks[0] if k == 1 else tu.concat_tensordict(chunks)
        tu.assign_non_tensor_data(batch, "global_steps", step)
        tq.kv_batch_put(keys=list(batch["uid"]), partition_id="train",
                        tags=[{"is_prompt": True, "status": "pending", "global_steps": step} for _ in range(k)])
        manager.generate_sequences(batch)
        submitted.extend(batch["uid"])
        return k

    submit(P)
    deadline = time.monotonic() + START_S
    while True:
        tags = tq.kv_list(partition_id="train").get("train", {})
        if all(tags.get(u, {}).get("status") in ("finished", "failure") for u in submitted):
            break
        assert time.monotonic() < deadline, f"groups not terminal after {START_S}s: {tags}"
        time.sleep(1)
    lost = [u for u in submitted if tags[u]["status"] == "failure"]
    assert len(lost) == 1
    (lost_uid,) = lost
    assert len([k for k in tags if k.startswith(lost_uid + "_")]) == n - 1   # its survivors are in the store

    sampler = config.trainer.v1.sampler
    buf = load_extern_object(sampler.custom_sampler.path, sampler.custom_sampler.name)(
        trainer_mode=config.trainer.v1.trainer_mode, trainer_config=config.trainer.v1.get("sync", {}),
        max_off_policy_threshold=sampler.max_off_policy_threshold,
        max_off_policy_strategy=sampler.max_off_policy_strategy, sampler_kwargs=sampler.sampler_kwargs,
        refill_fn=submit)
    batch, metrics = buf.sample(global_steps=step, partition_id="train", batch_size=P)

    groups = {}
    for key in batch.keys:
        groups.setdefault(key.split("_")[0], []).append(key)
    assert lost_uid not in groups and {len(keys) for keys in groups.values()} == {n}
    assert len(groups) == P - 1 + (len(submitted) - P)   # refills (if DAPO filtered a group) included
    assert not [k for k in tq.kv_list(partition_id="train").get("train", {}) if k.startswith(lost_uid)]
    assert metrics["training_guard/lost_groups"] == 1 and metrics["training_guard/dropped_trajectories"] == n - 1

    # each trajectory as the trainer reads it: rm_scores built by our agent loop's output from the
    # reward the reward-loop worker actor computed (reward on the last token, token penalties <= 0)
    data = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["rm_scores", "extra_fields"])
    for rm, fields in zip(list(data["rm_scores"]), list(data["extra_fields"]), strict=True):
        info = getattr(fields, "data", fields)["reward_extra_info"]
        assert RESULT_KEY in info and "score_rounded" in info
        rm = [float(x) for x in rm]
        assert rm[-1] == pytest.approx(float(info["score"]) + float(info["overlong_reward"]), abs=1e-5)
        assert all(x <= 0 for x in rm[:-1])
