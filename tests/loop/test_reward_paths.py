"""Every reward path inside real training steps on the CPU loop (issue 34, part 4), each checked on verl's metrics
file and the checkpoint dir.

All runs train the policy taught the synthetic task (experiment=learn_tiny, its verdict off): its samples differ
in reward, so GRPO's advantages, DAPO's filter and the guards have something to act on (the untaught policy of
experiment=smoke_tiny breaks the format in every answer: one constant reward). Paths that do not interfere share
a launch; four launches in all. Runs 1 and 2 train at world size 2 (gpus=2: two FSDP ranks over gloo, two vLLM
replicas, the batch sizes the plan derives for two GPUs), so the project's code inside the step (the guarded
replay buffer, the token-credit agent loop, the per-component normaliser, the train-aux metrics, the time-limit
save and its resume) runs where verl chunks the batch across ranks (issue 50); run 3 at world size 3, a count
learn_tiny's own batch does not divide:

1. token credit + DAPO + a guard + the scorer killed once + a preemption, launched from outside the code (its
   TaskRunner resolves each of our names verl looks up: src/trainer/entry.py): reward=xcomet_xl (the tiny
   XCOMET's error spans) with reward.credit=token (verl's grpo plus the token term, src/rewards/credit/),
   algo=dapo with its group filter on two samples a prompt and a reward rounded to a whole number so that whole
   groups tie, the length-coverage
   guard on with bounds the taught policy crosses, the scorer SIGKILLed after step 1 (restarted, nothing lost)
   and, once the restarted service is up, SIGTERM to the launcher, as a preempting scheduler sends it
   (src/node/training.py PreemptionWatch):
   it asks the trainer for the time limit's save (src/trainer/time_limit.py; Slurm's signal -> flag half runs
   under the real Slurm cluster in tests/slurm), the trainer saves the step in progress and ends, and the run
   ends with one line.
2. the same command again: it resumes from that checkpoint and trains the steps left; with one checkpoint kept
   (max_actor_ckpt_to_keep=1), the preempted step's goes once the tracker names the last.
3. per-component normalisation + sequence credit + a lost group + the scorer killed for good: reward=comet
   (BLEU + the tiny CometKiwi) with reward.normalise=per_component; a test-only reward component fails the
   first answer it sees (lose_one_group.py), so verl tags that group failure and the guard drops it whole;
   after step 1 the scorer is killed twice: the run stops with the launcher's one line.
4. DAPO's bound: the untaught policy (every group ties at the format floor) with
   algo.filter_groups.max_num_gen_batches=2: the run stops at step 1 with the guard's one line.
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import time
from pathlib import Path

import pytest
import yaml

from src.record.verl_metrics import read_metrics
from src.trainer import time_limit
from tests.helpers.launches import checkpoint_dir, latest_run_dir, metrics_files
from tests.helpers.loop_processes import launcher_pid

from .lose_one_group import MARKER_ENV, MESSAGE as LOST_MESSAGE

# an outer limit against a hang (docs/cpu-loop.md "Hazards"), not a time budget
TIMEOUT_S = 1200
# how long an action waits for the run to reach the point it acts at
WAIT_S = 900
# the launcher's health check of a restarted scorer takes milliseconds; this is the margin on a loaded machine
RESTART_CHECK_S = 10
N = 8  # conf/experiment/learn_tiny.yaml batch.samples_per_prompt
SCORER_RESTARTED = "QE scorer (node-0) restarted on"
SCORER_DIED = "error: QE scorer (node-0) died during training (exit code -9) after 1 restart(s); training stopped;"

COMMON = ["experiment=learn_tiny", "learn.enable=false", "trainer.val_before_train=false",
          # no validation (verl: test_freq <= 0), no periodic save: what is saved below is the time-limit save
          # and the last step's
          "trainer.test_freq=-1", "trainer.save_freq=100"]
# run 1 and 2
# world size 2 (see the docstring): verl's checkpoint then holds one shard per rank
GPUS = 2
# four steps: the preemption lands in step 2 or 3 (after the restarted scorer is up, see run 1), never in the last
STEPS = 4
SHARDS = [f"{kind}_world_size_{GPUS}_rank_{rank}.pt" for kind in ("extra_state", "model", "optim") for rank in range(GPUS)]
TOKEN_DAPO_GUARD = [f"gpus={GPUS}", "scorer=tiny", "reward=xcomet_xl", "reward.credit=token", "reward.weights.bleu=1.0",
                    # two samples a prompt and the score rounded to a whole number: whole groups tie often
                    # enough (both answers broken, or both flagged by the guard) for DAPO's filter to act
                    "algo=dapo", "algo.overlong_buffer.enable=false", "batch.samples_per_prompt=2",
                    "reward.round_decimals=0",
                    "reward.guards.length_coverage.enable=true", "reward.guards.length_coverage.min_ratio=0.9",
                    "reward.guards.length_coverage.max_ratio=1.1", f"trainer.total_training_steps={STEPS}"]
# run 3
# run 3 at world size 3: batch sizes the plan derives for a GPU count that divides none of learn_tiny's
GPUS_3 = 3
PER_COMPONENT_LOST = [f"gpus={GPUS_3}", "scorer=tiny", "reward=comet", "reward.sentence_models=[cometkiwi_da]",
                      "reward.weights.kiwi=1.0", "reward.normalise=per_component",
                      "reward.plugins=[tests/loop/lose_one_group.py]", "+reward.weights.lose_one_group=0.01",
                      "scorer.lost_groups_allowed=1",
                      # the run ends at the scorer's second death; steps enough that it cannot end before it (the
                      # restart and the test's wait for it take longer than a few steps on a fast machine)
                      "trainer.total_training_steps=20"]
# run 4: the untaught policy tiny_build makes beside the taught one
DAPO_BOUND = ["model.path=${model.build_dir}/policy", "algo=dapo", "algo.overlong_buffer.enable=false",
              "algo.filter_groups.max_num_gen_batches=2", "trainer.total_training_steps=3"]


class Launch:
    """What a launch left under its output dir: the run dir, the checkpoint dir (from the plan), verl's metrics."""

    def __init__(self, out: Path):
        self.out = out

    def run_dir(self) -> Path | None:
        return latest_run_dir(self.out)

    def checkpoint_dir(self) -> Path | None:
        run_dir = self.run_dir()
        return checkpoint_dir(run_dir) if run_dir else None

    def metrics(self) -> dict[int, dict]:
        run_dir = self.run_dir()
        rows: dict[int, dict] = {}
        for path in metrics_files(run_dir) if run_dir else []:
            for step, row in read_metrics(path).items():
                rows.setdefault(step, {}).update(row)
        return rows

    def scorer_pid(self) -> int | None:
        run_dir = self.run_dir()
        try:
            return json.loads((run_dir / "scorer" / "node-0.ready.json").read_text())["pid"] if run_dir else None
        except (OSError, ValueError, KeyError):
            return None


def wait_for(what: str, predicate, running) -> object:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        if not running():
            raise AssertionError(f"the launch ended before {what}")
        time.sleep(1)
    raise AssertionError(f"{what}: not within {WAIT_S} s")


def kill_scorer(launch: Launch, running, after: int | None = None) -> int:
    """SIGKILL the node's scorer (with `after`: the one restarted after that pid); its pid."""
    pid = wait_for("the scorer's ready file", lambda: (p := launch.scorer_pid()) and p != after and p, running)
    if after is not None:
        # the launcher checks /health of a restarted service right after its ready file: a kill inside that
        # check is a failed restart, another message (tests/lifecycle/test_scorer_lifecycle.py waits for it too)
        time.sleep(RESTART_CHECK_S)
    os.kill(pid, signal.SIGKILL)
    return pid


def steps_with(metrics: dict[int, dict], key: str) -> list[int]:
    return sorted(s for s, row in metrics.items() if key in row)


def checkpoints(checkpoint_dir: Path) -> list[int]:
    return sorted(int(p.name.rsplit("_", 1)[1]) for p in checkpoint_dir.glob("global_step_*") if (p / "actor").is_dir())


# each name verl looks up in run 1, and the object of ours it must find (src/trainer/entry.py resolve_registrations)
REGISTRATIONS = {
    "adv_estimator grpo_token": "src.rewards.credit.estimator.compute_grpo_token_advantage",
    "trainer sync": "src.trainer.entry.TimeLimitedPPOTrainerSync",
    "replay buffer pkg://src.trainer.guard:GuardedReplayBuffer": "src.trainer.guard.GuardedReplayBuffer",
    "agent loop manager": "src.rewards.credit.agent_loop.TokenCreditAgentLoopManager",
    "agent loop token_credit_agent": "src.rewards.credit.agent_loop.TokenCreditAgentLoop",
    "reward function pkg://src.rewards.compute:compute_score": "src.rewards.compute.compute_score",
    "reward manager PureValidationDAPORewardManager (importlib)": "src.rewards.managers.PureValidationDAPORewardManager",
}


def _registrations_resolved_in_the_task_runner(log: Path) -> None:
    """In verl's TaskRunner actor (Ray prefixes what an actor prints with `(ActorClass pid=N)`: the lines can only
    come from that process), of a launch started outside the code (`src` importable through the environment
    alone): each name verl looks up later resolved, with verl's own lookup, to our object, before verl's `run`;
    and verl itself built the guarded replay buffer there (trainer_base.py _build_replay_buffer) with the plan's
    rules."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))  # Ray colours the actor prefix
    actor = r"^\(TimeLimitTaskRunner pid=(\d+)\) "
    resolved = re.findall(actor + r"src\.trainer: resolved in the TaskRunner \(pid (\d+)\): (.*)$", text, re.M)
    assert len(resolved) == 1, text[-5000:]
    actor_pid, own_pid, names = resolved[0]
    assert actor_pid == own_pid
    assert dict(item.split(" -> ") for item in names.split("; ")) == REGISTRATIONS
    built = re.findall(actor + r"src\.trainer\.guard: GuardedReplayBuffer \(pid (\d+)\): (.*)$", text, re.M)
    assert [(a, p) for a, p, _ in built] == [(actor_pid, actor_pid)], built
    assert "at most 10 generation batches per step" in built[0][2] and "DAPO on " in built[0][2], built


def test_token_credit_dapo_a_guard_a_scorer_restart_a_preemption_and_its_resume(cpu_loop, taught_build, tmp_path):
    """Runs 1 and 2, one results root: the second resumes the first."""
    # one checkpoint kept: the resumed run's last save removes the time-limit save's step, after the tracker
    # names the new one (src/trainer/checkpoints.py; disk housekeeping, so both launches are one run)
    args = COMMON + TOKEN_DAPO_GUARD + [f"model.build_dir={taught_build}", f"paths.results_root={tmp_path / 'results'}",
                                        "+verl.trainer.max_actor_ckpt_to_keep=1"]
    first = Launch(tmp_path / "paths-1")

    def act(out: Path, running) -> None:
        wait_for("step 1 in verl's metrics", lambda: 1 in first.metrics(), running)
        killed = kill_scorer(first, running)
        # the preemption after the restarted service is up: sent at once, it ended the run while the restart was
        # still loading the model (CI of 2026-12-05: the rewards of step 2 were in before the kill), and the
        # restart went untested; the step that waits on the restart ends after it
        wait_for("the restarted scorer's ready file", lambda: (p := first.scorer_pid()) and p != killed, running)
        # a preemption: SIGTERM to the launcher alone (src/node/training.py PreemptionWatch), which asks the
        # trainer for the time limit's save through the checkpoint dir
        os.kill(launcher_pid(out), signal.SIGTERM)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = cpu_loop(args + ["trainer.preempt_grace_s=600"], timeout_s=TIMEOUT_S, out_name="paths-1", during=act,
                   cwd=elsewhere)
    print(f"reward paths, run 1 (token credit, DAPO, guard, scorer killed once, preempted): {run.seconds:.0f} s")
    out = run.output
    assert "learn_tiny: taught policy" in out and "restarting it (1 of 1)" in out and SCORER_RESTARTED in out, out[-3000:]
    _registrations_resolved_in_the_task_runner(first.run_dir() / "train.log")
    checkpoint = first.checkpoint_dir()
    metrics = first.metrics()
    trained = steps_with(metrics, "critic/score/mean")
    # the SIGTERM came after the restart: the trainer saved the step it was in (2, or 3 when step 2's rewards were
    # in before the kill) and ended; the run ends in one line
    saved = time_limit.saved(checkpoint)
    assert saved == {"step": trained[-1], "saved_now": True, "finished": False} and trained in ([1, 2], [1, 2, 3]), \
        (saved, trained)
    assert run.returncode == 1, out[-6000:]
    assert (f"error: preempted: step {saved['step']} saved now in {checkpoint}; run the same command again to "
            f"continue from it") in out, out[-4000:]
    assert checkpoints(checkpoint) == [saved["step"]]
    # the time-limit save at world size 2: a shard per rank
    assert sorted(p.name for p in (checkpoint / f"global_step_{saved['step']}" / "actor").glob("*.pt")) == SHARDS
    for step in trained:
        row = metrics[step]
        # the scorer's death lost nothing: the reward client retried until the restarted service answered
        assert row["training_guard/lost_groups"] == 0, row
        assert row["training/rollout_actor_probs_pearson_corr"] > 0.99, row
        # the guard's flag rate, logged by the guarded replay buffer from the reward's extra info
        assert 0.0 <= row["train-aux/guard_length_coverage/mean"] <= 1.0, row
        assert "train-aux/guard_wrong_language/mean" not in row  # off in learn_tiny: None, no metric
        # DAPO: never more generation batches than its bound
        assert 1.0 <= row["training_guard/gen_batches"] <= 10.0, row

    run2 = cpu_loop(args, timeout_s=TIMEOUT_S, out_name="paths-2")
    print(f"reward paths, run 2 (resume): {run2.seconds:.0f} s")
    assert run2.returncode == 0, run2.output[-6000:]
    # launch 2 cleared the request before it trained (src/node/training.py clear_time_limit_flags)
    assert not time_limit.requested(checkpoint)
    metrics = first.metrics()
    trained = steps_with(metrics, "critic/score/mean")
    assert trained == list(range(1, STEPS + 1)), trained
    assert checkpoints(checkpoint) == [STEPS]
    if saved["step"] != STEPS:
        removed = f"checkpoint: removed {checkpoint / ('global_step_%d' % saved['step'])} (keeping the newest 1 actor)"
        assert removed in run2.output, run2.output[-4000:]
    assert (checkpoint / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    assert sorted(p.name for p in (checkpoint / f"global_step_{STEPS}" / "actor").glob("*.pt")) == SHARDS
    # the resumed steps, at the same world size: vLLM ran the weights the two ranks reloaded and trained
    for step in range(saved["step"] + 1, STEPS + 1):
        assert metrics[step]["training/rollout_actor_probs_pearson_corr"] > 0.99, metrics[step]
    # launch 2 trained only what was left: its metrics file starts after the saved step
    files = metrics_files(first.run_dir())
    assert len(files) == 2 and sorted(read_metrics(files[1])) == list(range(saved["step"] + 1, STEPS + 1)), files

    rows = [metrics[s] for s in trained]
    assert any(r["train-aux/guard_length_coverage/mean"] > 0 for r in rows), rows
    # DAPO's filter dropped tied groups and drew more prompts in their place
    assert any(r["training_guard/filtered_group_share"] > 0 and r["training_guard/gen_batches"] > 1 for r in rows), rows
    # token credit: the penalties on the tokens inside error spans are in verl's token rewards (critic/score sums
    # them over each answer) but not in the reward's sequence score (train-aux/score): the sum is lower by them
    spans = [r for r in rows if r["train-aux/credit_token_penalty/mean"] < 0]
    assert spans, rows
    for r in spans:
        assert r["critic/score/mean"] < r["train-aux/score/mean"] - 1e-4, r


def test_per_component_normalisation_a_lost_group_and_a_scorer_killed_for_good(cpu_loop, taught_build, tmp_path):
    """Run 3."""
    marker = tmp_path / "lost-one-group"
    launch = Launch(tmp_path / "paths-3")

    def act(out: Path, running) -> None:
        wait_for("step 1 in verl's metrics", lambda: 1 in launch.metrics(), running)
        first = kill_scorer(launch, running)
        kill_scorer(launch, running, after=first)

    args = COMMON + PER_COMPONENT_LOST + [f"model.build_dir={taught_build}", f"+accelerator.env.{MARKER_ENV}={marker}"]
    run = cpu_loop(args, timeout_s=TIMEOUT_S, env={MARKER_ENV: str(marker)}, out_name="paths-3", during=act)
    print(f"reward paths, run 3 (per-component, lost group, scorer killed for good): {run.seconds:.0f} s")
    out = run.output
    assert run.returncode == 1, out[-6000:]
    errors = [l for l in out.splitlines() if l.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(SCORER_DIED), errors
    train_log = (launch.run_dir() / "train.log").read_text(errors="replace")
    assert "training stopped: QE scorer (node-0) died" in train_log

    assert marker.exists() and LOST_MESSAGE in train_log  # the test-only component failed its one answer
    metrics = launch.metrics()
    row = metrics[1]
    # the group of the failed answer was dropped whole (its n - 1 finished answers with it), the rest trained
    assert row["training_guard/lost_groups"] == 1 and row["training_guard/dropped_trajectories"] == N - 1, row
    # per-component: each part (BLEU, CometKiwi, the rest: format and penalties) normalised within its group, then
    # summed: the one or two well-formed answers of a group get an advantage above (n-1)/sqrt(n), the highest
    # one group-normalised score can have (verl's grpo; the token-credit run's maximum is exactly that)
    bound = (N - 1) / math.sqrt(N)
    trained = steps_with(metrics, "critic/advantages/max")
    assert max(metrics[s]["critic/advantages/max"] for s in trained) > bound + 0.1, [metrics[s] for s in trained]
    # sequence credit: verl's token rewards sum to the reward's own score (compare the token-credit run)
    for s in trained:
        assert metrics[s]["critic/score/mean"] == pytest.approx(metrics[s]["train-aux/score/mean"], abs=1e-4)
        assert metrics[s]["training/rollout_actor_probs_pearson_corr"] > 0.99, metrics[s]
    # trained at world size 3, with the batch the plan derived for it: every split verl makes divides evenly
    verl = yaml.safe_load((launch.run_dir() / "snapshot" / "verl_config.yaml").read_text())
    assert verl["trainer"]["n_gpus_per_node"] == GPUS_3 and verl["trainer"]["nnodes"] == 1
    prompts, n = verl["data"]["train_batch_size"], verl["actor_rollout_ref"]["rollout"]["n"]
    mini = verl["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"]
    assert prompts * n % GPUS_3 == 0 and mini * n % GPUS_3 == 0 and prompts % mini == 0, (prompts, n, mini)


def test_dapo_stops_at_its_bound_with_one_line(cpu_loop, taught_build):
    run = cpu_loop(COMMON + DAPO_BOUND + [f"model.build_dir={taught_build}"], timeout_s=TIMEOUT_S, out_name="paths-4")
    print(f"reward paths, run 4 (DAPO's bound): {run.seconds:.0f} s")
    out = run.output
    assert run.returncode == 1, out[-6000:]
    errors = [l for l in out.splitlines() if l.startswith("error:")]
    assert len(errors) == 1 and "DAPO stopped at step 1: 2 generation batches drawn" in errors[0], errors
    assert "algo.filter_groups.max_num_gen_batches=2" in errors[0], errors
    launch = Launch(run.run_dirs[-1].parents[1])  # <out>/runs/<run>
    assert not steps_with(launch.metrics(), "critic/score/mean")  # nothing trained
    assert checkpoints(launch.checkpoint_dir()) == []
