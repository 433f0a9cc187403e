"""verl's real TaskRunner actor, started by `python -m src.trainer` exactly as the runner starts it
(src/node/training.py verl_command, on the snapshot's verl_config.yaml, with the node's environment
and from a working directory outside the code, so `src` is importable only through that
environment), with the full project config (tests/ray_actors/conftest.py: token credit, DAPO, the
guard). verl's main starts a local Ray with the plan's 13 logical CPUs and the TaskRunner actor;
the run ends where verl asks Ray for a GPU (verl/single_controller/ray/base.py,
ResourcePoolManager._check_resource_available), after verl built the trainer and its replay buffer.

Asserted from inside the TaskRunner actor's process (Ray prefixes what an actor prints with
`(ActorClass pid=N)`, so the lines below can only come from that process, not from the driver):
- src/trainer/entry.py resolve_registrations, run there before verl's `run`: each name verl looks
  up later resolves, with verl's own lookup, to our object: the `grpo_token` estimator in
  core_algos' registry, the time-limited trainer, the guarded replay buffer, the token-credit agent
  loop manager and agent loop, the reward function and the reward manager;
- verl itself loaded and built the guarded replay buffer there (trainer_base.py
  _build_replay_buffer), with the plan's allowance and DAPO bound;
- verl then went on to the GPU boundary in that actor: nothing of ours stopped it (no stop file).
One Ray cluster for the module: the one verl's main starts (a single-node run's own).
"""
from __future__ import annotations

import copy
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.ray_actors.conftest import WAIT_S

EXPECTED = {
    "adv_estimator grpo_token": "src.rewards.credit.estimator.compute_grpo_token_advantage",
    "trainer sync": "src.trainer.entry.TimeLimitedPPOTrainerSync",
    "replay buffer pkg://src.trainer.guard:GuardedReplayBuffer": "src.trainer.guard.GuardedReplayBuffer",
    "agent loop manager": "src.rewards.credit.agent_loop.TokenCreditAgentLoopManager",
    "agent loop token_credit_agent": "src.rewards.credit.agent_loop.TokenCreditAgentLoop",
    "reward function pkg://src.rewards.compute:compute_score": "src.rewards.compute.compute_score",
    "reward manager PureValidationDAPORewardManager (importlib)": "src.rewards.managers.PureValidationDAPORewardManager",
}


@pytest.fixture(scope="module")
def task_runner_run(project, scorer_service, tmp_path_factory):
    """(output, exit code, driver pid, seconds, stop file) of one `python -m src.trainer` run."""
    from src.node.training import STOP_FILE_ENV, verl_command

    env = project.node_env(scorer_service.url, str(scorer_service.log))
    cwd = tmp_path_factory.mktemp("elsewhere")  # not the code root: imports come from the env only
    run_dir = project.root / "run"
    t0 = time.monotonic()
    proc = subprocess.Popen(verl_command(sys.executable, project.snapshot, run_dir), cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        out = ""
    finally:
        try:  # verl's driver, its local Ray and the actors: one process group
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    seconds = time.monotonic() - t0
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)  # Ray colours the actor prefix
    (project.root / "task_runner.out").write_text(out, encoding="utf-8")
    print(f"python -m src.trainer to the GPU boundary: {seconds:.1f}s (output: {project.root / 'task_runner.out'})")
    return out, proc.returncode, proc.pid, seconds, env[STOP_FILE_ENV]


def _actor_lines(out: str, text: str) -> list[tuple[int, str]]:
    """(pid of the actor that printed it, the rest) for each line `text` starts in a TaskRunner actor."""
    return [(int(m.group(1)), m.group(2)) for m in
            re.finditer(r"^\(TimeLimitTaskRunner pid=(\d+)\) " + re.escape(text) + r"(.*)$", out, re.M)]


def test_every_registration_resolves_inside_the_task_runner_actor(task_runner_run):
    out, code, driver_pid, seconds, stop_file = task_runner_run
    assert seconds < WAIT_S, f"no result within {WAIT_S}s: {out[-5000:]}"
    lines = _actor_lines(out, "src.trainer: resolved in the TaskRunner (pid ")
    assert len(lines) == 1, out[-5000:]
    actor_pid, rest = lines[0]
    own_pid, resolved = re.fullmatch(r"(\d+)\): (.*)", rest).groups()
    assert int(own_pid) == actor_pid != driver_pid
    assert dict(item.split(" -> ") for item in resolved.split("; ")) == EXPECTED

    # verl built our buffer itself, in the same actor, with the plan's rules
    built = _actor_lines(out, "src.trainer.guard: GuardedReplayBuffer (pid ")
    assert [pid for pid, _ in built] == [actor_pid], out[-5000:]
    assert built[0][1].startswith(f"{actor_pid}): lost groups allowed 1 in the run (each dropped whole before "
                                  f"training, the step trains on the groups left; one beyond that stops the run)")
    assert "DAPO on 'score_rounded', at most 10 generation batches per step" in built[0][1]

    # and verl went on to the GPU boundary: nothing of ours stopped it
    assert [pid for pid, _ in _actor_lines(out, "src.trainer: trainer TimeLimitedPPOTrainerSync;")] == [actor_pid]
    assert code != 0 and "Total available GPUs 0 is less than total desired GPUs 1" in out, out[-5000:]
    assert not os.path.exists(stop_file)


def test_a_name_that_does_not_resolve_stops_in_one_line(project, tmp_path, monkeypatch):
    """The same check in this process, on the project config with the reward function misnamed."""
    from omegaconf import open_dict
    from verl.trainer.ppo import core_algos

    from src.rewards.credit.estimator import register_for
    from src.trainer.entry import resolve_registrations
    from src.trainer.guard import TrainingGuardStop

    # what TimeLimitTaskRunner.run does first; the registry as it was after the test
    monkeypatch.delitem(core_algos.ADV_ESTIMATOR_REGISTRY, "grpo_token", raising=False)
    register_for(project.verl_config)
    stop_file = tmp_path / "training_stop.txt"
    monkeypatch.setenv("QE_TRAINING_STOP_FILE", str(stop_file))
    config = copy.deepcopy(project.verl_config)
    with open_dict(config):
        config.reward.custom_reward_function.name = "compute_scores"
    with pytest.raises(TrainingGuardStop) as err:
        resolve_registrations(config)
    msg = str(err.value)
    assert "\n" not in msg and stop_file.read_text().strip() == msg
    assert msg.startswith("reward function pkg://src.rewards.compute:compute_scores does not resolve in verl's "
                          f"TaskRunner (pid {os.getpid()}): AttributeError: Object not found in module")
    assert "(the code root must be on it on every node)" in msg
