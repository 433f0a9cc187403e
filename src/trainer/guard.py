"""Stops training instead of letting it degrade silently, and drops lost groups whole.

Where and why (checked in verl 0.9.1's source):
- A reward call that raises (the QE scorer is down for good) fails its trajectory; the agent loop
  then tags the whole prompt group `failure` (verl/trainer/ppo/v1/agent_loop_tq.py,
  AgentLoopWorkerTQ._run_prompt, gather with return_exceptions=True), but the trajectories of the
  group that did finish stay in TransferQueue. verl's sync replay buffer keeps such a group
  sampleable (verl/trainer/ppo/v1/replay_buffer.py, ReplayBuffer._sampleable_terminal_keys: terminal
  = finished | failure) and trains on its survivors as a smaller group: with one survivor GRPO's
  group mean is its own score and its std is replaced by 1 (verl/trainer/ppo/core_algos.py,
  compute_grpo_outcome_advantage), so its advantage is the raw score, not a group-normalised one.
  verl raises only when no trajectory at all survived (ReplayBuffer.sample).
- With DAPO's group filter the same buffer keeps dispatching new prompts (`refill_fn`) until enough
  groups pass; `algorithm.filter_groups.max_num_gen_batches` is ignored there (a warning in
  trainer_base.py, _resolve_filter_groups_metric), so a reward that gives whole groups the same
  value makes it draw batches forever while the step counter stands still.

Mechanism: verl's own extension point for the buffer, `trainer.v1.sampler.custom_sampler.{path,name}`
(trainer_base.py, _build_replay_buffer: loaded with load_extern_type and given `sampler_kwargs`).
`GuardedReplayBuffer` is verl's sync ReplayBuffer with the constructor arguments verl would give
its built-in one (taken from sampler_kwargs, which src/verl_config/ppo_trainer.py fills from the plan) plus,
in the trainer process, at the one place every group passes before training:
  1. after each metadata sync, groups tagged `failure` are counted (per step and per run); more
     than scorer.lost_groups_allowed stops the run before it trains on anything of that step;
  2. a lost training group within that allowance is dropped whole before the batch is selected:
     all its trajectories are cleared from TransferQueue and it is never sampleable
     (`_select_prompt_uids`, the hook verl's `sample` calls once enough groups are terminal), so
     the step trains on the complete groups that are left, a smaller batch (verl pads it to its
     batch multiple, trainer_base.py _balance_batch, as it pads any short batch). If no group of
     the step is left, the run stops: verl would fail there with a message about refilling;
  3. each refill is counted in generation batches; drawing more than max_gen_batches for one step
     stops the run;
  4. the counts are returned with the sampler's metrics, so verl logs them every step
     (training_guard/lost_groups, training_guard/lost_groups_total, training_guard/dropped_trajectories,
     training_guard/gen_batches, training_guard/filtered_group_share);
  5. the reward's extra info of the trajectories the step trains on is averaged into the same metrics
     (train-aux/<key>/mean: the guards' flag rates, the components, src/trainer/reward_metrics.py).
Validation groups are counted (a lost one stops the run like a training one beyond the allowance)
but not dropped: verl's validation metrics take the sessions that finished against the number
expected per prompt (trainer_base.py, _validate, expected_acc_counts), and validation trains nothing.
Why not verl's own `trainer.v1.sampler.sync_refill_failed_groups`: it evicts a failed group only when
none of its trajectories survived (replay_buffer.py, _terminal_eviction_reasons), replaces it with
a new prompt (one more generation for the step) and forces single-prompt dataloader fetches.
Alternatives rejected: the runner watching a file the reward function writes sees a failure only
after verl has already trained on the rest of the batch, and a custom agent loop manager would
replace far more of verl than this one class.

A stop raises TrainingGuardStop in the trainer (verl exits non-zero) after writing its one-line
reason to $QE_TRAINING_STOP_FILE (src/trainer/stop_reason.py), which src/node/training.py sets and turns into the
launcher's error line.
"""
from __future__ import annotations

import os
from typing import Callable, Optional

from src.trainer import reward_metrics, stop_reason
from src.trainer.poll import PollBackoff

METRIC_PREFIX = "training_guard"


class TrainingGuardStop(RuntimeError):
    """The run must stop; the message is one line for the user."""


def _service_hint() -> str:
    url = os.environ.get("QE_SCORER_URL") or "not started"
    log = os.environ.get("QE_SCORER_LOG") or "unknown"
    return f"QE scorer {url}, its log: {log}"


def stop(reason: str, *, rules_out_a_death: bool = False) -> None:
    """Leave the reason where the runner reads it, then stop the trainer. `rules_out_a_death` for DAPO's bound only:
    lost groups may follow a dead vLLM engine, so their stop leaves the death watch to judge (stop_reason.py)."""
    stop_reason.leave(reason, rules_out_a_death=rules_out_a_death)
    raise TrainingGuardStop(reason)


class StepGuard:
    """The counting and the decisions, apart from verl's buffer so they read (and test) plainly."""

    def __init__(self, lost_groups_allowed: int, max_gen_batches: int, filter_metric: Optional[str],
                 train_batch_size: int, on_stop: Callable[..., None] = stop):
        self.lost_groups_allowed = lost_groups_allowed
        self.max_gen_batches = max_gen_batches
        self.filter_metric = filter_metric
        self.train_batch_size = train_batch_size
        self.on_stop = on_stop
        self.lost_total = 0
        self._at: tuple[str, int] | None = None
        self._failed: set[str] = set()
        self._filtered: set[str] = set()
        self._classified: set[str] = set()
        self._refilled_prompts = 0
        self._dropped_trajectories = 0

    def begin(self, partition: str, step: int) -> None:
        """A sample() call: counters are per (partition, step)."""
        if self._at != (partition, step):
            self._at = (partition, step)
            self._failed, self._filtered, self._classified = set(), set(), set()
            self._refilled_prompts = 0
            self._dropped_trajectories = 0

    @property
    def gen_batches(self) -> float:
        # the step's first batch comes from the trainer's prepare_step (_add_batch_to_generate);
        # every refill adds prompts one by one (gen_batch_size=1 under DAPO)
        return 1 + self._refilled_prompts / self.train_batch_size

    def failed(self, uids: set[str]) -> None:
        new = uids - self._failed
        if not new:
            return
        self._failed |= new
        self.lost_total += len(new)
        if self.lost_total > self.lost_groups_allowed:
            partition, step = self._at or ("train", 0)
            kind = "validation" if partition == "val" else "training"
            self.on_stop(
                f"training stopped at step {step}: {len(self._failed)} {kind} group(s) lost to failed rollout or "
                f"reward calls ({self.lost_total} in this run, scorer.lost_groups_allowed={self.lost_groups_allowed}); "
                f"{_service_hint()}; the first error is in the training log ('Error in _run_prompt')")

    def dropped(self, uids: set[str], trajectories: int, groups_left: int) -> None:
        """Lost groups (within the allowance) taken out of the step whole, with the `trajectories` of
        theirs that had finished; `groups_left` complete groups remain for the batch."""
        self._dropped_trajectories += trajectories
        if uids and groups_left == 0:
            step = self._at[1] if self._at else 0
            self.on_stop(
                f"training stopped at step {step}: all {len(uids)} training group(s) of the step lost to failed "
                f"rollout or reward calls ({self.lost_total} in this run, within "
                f"scorer.lost_groups_allowed={self.lost_groups_allowed}), nothing left to train on; "
                f"{_service_hint()}; the first error is in the training log ('Error in _run_prompt')")

    def classified(self, filtered: set[str], finished: set[str]) -> None:
        self._filtered |= filtered
        self._classified |= finished

    def before_refill(self, prompts: int) -> None:
        drawn = 1 + (self._refilled_prompts + prompts) / self.train_batch_size
        if self.max_gen_batches and drawn > self.max_gen_batches:
            step = self._at[1] if self._at else 0
            self.on_stop(
                f"DAPO stopped at step {step}: {self.gen_batches:g} generation batches drawn "
                f"({self.train_batch_size + self._refilled_prompts} prompts) without {self.train_batch_size} groups "
                f"that pass the filter; {self.filtered_share:.0%} of {len(self._classified)} finished groups were "
                f"filtered because all their rollouts had the same {self.filter_metric!r} "
                f"(algo.filter_groups.metric); bound: algo.filter_groups.max_num_gen_batches={self.max_gen_batches}. "
                f"Raise the bound, or make rewards differ within a group (reward.round_decimals)",
                rules_out_a_death=True)   # too few groups pass the filter: counted here, no process died
        self._refilled_prompts += prompts

    @property
    def filtered_share(self) -> float:
        return len(self._filtered) / len(self._classified) if self._classified else 0.0

    def metrics(self) -> dict:
        return {f"{METRIC_PREFIX}/lost_groups": len(self._failed),
                f"{METRIC_PREFIX}/lost_groups_total": self.lost_total,
                f"{METRIC_PREFIX}/dropped_trajectories": self._dropped_trajectories,
                f"{METRIC_PREFIX}/gen_batches": self.gen_batches,
                f"{METRIC_PREFIX}/filtered_group_share": self.filtered_share}


def _buffer_base():
    # verl imports torch and TransferQueue: only in the trainer process (and tests), not the launcher
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    return ReplayBuffer


class GuardedReplayBuffer(_buffer_base()):
    """verl's sync ReplayBuffer plus StepGuard (see the module docstring)."""

    def __init__(self, trainer_mode, trainer_config, max_off_policy_threshold, max_off_policy_strategy,
                 sampler_kwargs, refill_fn=None, **_ignored):
        kw = dict(sampler_kwargs or {})
        if trainer_mode != "sync":
            raise ValueError(f"src.trainer.guard.GuardedReplayBuffer supports trainer.v1.trainer_mode=sync only, "
                             f"got {trainer_mode!r}")
        metric = kw.get("filter_metric")
        train_batch_size = int(kw["train_batch_size"])
        # the arguments trainer_base.py _build_replay_buffer gives the built-in sync buffer
        super().__init__(
            trainer_mode=trainer_mode, trainer_config=trainer_config,
            max_off_policy_threshold=max_off_policy_threshold, max_off_policy_strategy=max_off_policy_strategy,
            sampler_kwargs=sampler_kwargs, refill_fn=refill_fn, filter_groups_metric=metric,
            train_batch_size=train_batch_size, gen_batch_size=1 if metric is not None else train_batch_size,
            max_inflight_gen_batches=int(kw.get("max_inflight_gen_batches", 1)) if metric is not None else 1,
            sync_refill_failed_groups=False)
        self.guard = StepGuard(int(kw["lost_groups_allowed"]), int(kw.get("max_gen_batches", 0)), metric,
                               train_batch_size)
        self._partition = "train"
        # verl's interval (2 s) as the longest wait; each sample() starts short (src/trainer/poll.py)
        self._polls = PollBackoff(cap_s=float(self.poll_interval))
        # the training log says which rules hold (and tests/loop/test_reward_paths.py that verl built this class in
        # the TaskRunner actor)
        dapo = (f"DAPO on {metric!r}, at most {self.guard.max_gen_batches} generation batches per step"
                if metric is not None else "no DAPO filter")
        print(f"src.trainer.guard: {type(self).__name__} (pid {os.getpid()}): lost groups allowed "
              f"{self.guard.lost_groups_allowed} in the run (each dropped whole before training, the step trains "
              f"on the groups left; one beyond that stops the run); {dapo}", flush=True)
        if refill_fn is not None:
            def guarded_refill(prompts: int, _refill=refill_fn):
                self.guard.before_refill(prompts)
                return _refill(prompts)
            self.refill_fn = guarded_refill

    def _sync_metadata_from_transfer_queue(self):
        super()._sync_metadata_from_transfer_queue()
        self.guard.failed(set(self.failure_keys[self._partition]))

    def _select_prompt_uids(self, partition_id, sampleable_keys, batch_size):
        # verl's sample calls this once enough groups are terminal (for DAPO: and none is in flight),
        # so every lost group of the step is known here; see the module docstring, point 2
        if partition_id != "val":
            lost = sampleable_keys & self.failure_keys[partition_id]
            if lost:
                trajectories = sum(1 for key in self.partitions[partition_id] if key.split("_")[0] in lost)
                # out of TransferQueue and of this poll's metadata, prompt and trajectories alike
                # (replay_buffer.py, _clear_groups, as verl evicts stale and filtered groups)
                self._clear_groups(partition_id, lost)
                # in place: verl's sample reads this same set afterwards for DAPO's surplus, which
                # must not clear (or count) the dropped groups a second time
                sampleable_keys.difference_update(lost)
                self.guard.dropped(lost, trajectories, len(sampleable_keys))
        return super()._select_prompt_uids(partition_id, sampleable_keys, batch_size)

    def _dapo_filtered_keys(self, partition_id):
        filtered, counts = super()._dapo_filtered_keys(partition_id)
        self.guard.classified(filtered, set(self._dapo_classification_cache[partition_id]))
        return filtered, counts

    def _wait_for_next_poll(self, partition_id, last_debug_time):
        # verl's method sleeps self.poll_interval (replay_buffer.py, ReplayBuffer._wait_for_next_poll) and logs what
        # is pending now and then: the interval is set for each wait, the rest is verl's
        self.poll_interval = self._polls.next()
        return super()._wait_for_next_poll(partition_id, last_debug_time)

    def sample(self, global_steps, partition_id, batch_size):
        self._partition = partition_id
        self._polls.reset()
        self.guard.begin(partition_id, global_steps)
        batch, metrics = super().sample(global_steps=global_steps, partition_id=partition_id, batch_size=batch_size)
        if partition_id != "val":
            metrics = {**metrics, **self.guard.metrics(), **self._reward_means(batch)}
        return batch, metrics

    @staticmethod
    def _reward_means(batch) -> dict:
        """train-aux/<key>/mean of the selected trajectories (point 5), read from TransferQueue through the
        client verl's buffer module uses."""
        from verl.trainer.ppo.v1 import replay_buffer

        if not batch.keys:
            return {}
        data = replay_buffer.tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                             select_fields=["extra_fields"])
        return reward_metrics.means(reward_metrics.reward_extra_infos(data["extra_fields"]))
