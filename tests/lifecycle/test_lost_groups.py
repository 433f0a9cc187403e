"""A lost group is dropped whole before training, counted, and the step trains on what is left
(src/trainer/guard.py, point 2), through verl 0.9.1's own `ReplayBuffer.sample`.

The buffer is the class the launcher's verl config names, built with the arguments verl's
trainer gives a custom sampler (verl/trainer/ppo/v1/trainer_base.py, _build_replay_buffer), and
sampled with verl's `sample` loop. What is not verl's: `Store`, which stands in for TransferQueue
(the three calls the sync buffer makes: kv_list, kv_clear, kv_batch_get), filled the way verl's V1
agent loop fills it (verl/trainer/ppo/v1/agent_loop_tq.py: a prompt key tagged pending -> running ->
finished | failure, one `{uid}_{session}_0` trajectory per session that finished; a session that
raised writes none and tags its group `failure`).
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from src.trainer.guard import TrainingGuardStop
from tests.helpers.verl_reward_harness import verl_config_for


class Store:
    """TransferQueue's key-value interface as the sync replay buffer uses it, in memory."""

    def __init__(self):
        self.tags: dict[str, dict[str, dict]] = {}      # partition -> key -> tag
        self.fields: dict[str, dict[str, dict]] = {}    # partition -> key -> fields
        self.cleared: Counter = Counter()               # (partition, key) -> times cleared

    def put_group(self, uid: str, step: int, scores: list[float | None], partition: str = "train") -> None:
        """One prompt's group after its sessions settled: None is a session that raised."""
        tags, fields = self.tags.setdefault(partition, {}), self.fields.setdefault(partition, {})
        status = "failure" if any(s is None for s in scores) else "finished"
        tags[uid] = {"is_prompt": True, "status": status, "global_steps": step}
        for session, score in enumerate(scores):
            if score is None:
                continue
            key = f"{uid}_{session}_0"
            tags[key] = {"status": "success", "seq_len": 12, "global_steps": step}
            fields[key] = {"extra_fields": {"reward_extra_info": {"score_rounded": score}}, "score": score}

    def kv_list(self, partition_id=None):
        return {p: dict(items) for p, items in self.tags.items() if partition_id in (None, p)}

    def kv_clear(self, keys, partition_id):
        for key in [keys] if isinstance(keys, str) else keys:
            self.cleared[(partition_id, key)] += 1
            self.tags.get(partition_id, {}).pop(key, None)
            self.fields.get(partition_id, {}).pop(key, None)

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        rows = [self.fields[partition_id][k] for k in keys]
        return {f: [row[f] for row in rows] for f in select_fields}

    def keys_of(self, uid: str, partition: str = "train") -> list[str]:
        return [k for k in self.tags.get(partition, {}) if k.split("_")[0] == uid]


def buffer(monkeypatch, *overrides: str, refill=None):
    """(verl config, the configured sampler on a fresh Store, the store, the prompt counts verl asked
    to refill); `refill(store, k)` plays the k prompts verl dispatches."""
    from verl.trainer.ppo.v1 import replay_buffer
    from verl.utils.import_utils import load_extern_type

    store = Store()
    monkeypatch.setattr(replay_buffer, "tq", store)
    cfg = verl_config_for("reward=comet", *overrides)
    sampler = cfg.trainer.v1.sampler
    cls = load_extern_type(sampler.custom_sampler.path, sampler.custom_sampler.name)
    refills: list[int] = []

    def refill_fn(k: int) -> int:  # verl's trainer: _add_prompts_to_generate
        refills.append(k)
        if refill is not None:
            refill(store, k)
        return k
    buf = cls(trainer_mode=cfg.trainer.v1.trainer_mode, trainer_config=cfg.trainer.v1.get("sync", {}),
              max_off_policy_threshold=sampler.max_off_policy_threshold,
              max_off_policy_strategy=sampler.max_off_policy_strategy, sampler_kwargs=sampler.sampler_kwargs,
              refill_fn=refill_fn)
    assert isinstance(buf, replay_buffer.ReplayBuffer)
    return cfg, buf, store, refills


def distinct(n: int, base: float) -> list[float]:
    return [round(base + 0.01 * i, 2) for i in range(n)]


def group_sizes(keys: list[str]) -> Counter:
    return Counter(k.split("_")[0] for k in keys)


def test_a_lost_group_is_dropped_whole_and_the_step_trains_on_the_rest(monkeypatch):
    cfg, buf, store, refills = buffer(monkeypatch, "algo=grpo", "scorer.lost_groups_allowed=2")
    P, n = cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n
    for i in range(P):
        scores = distinct(n, 0.1)
        if i == 5:  # three of its sessions' reward calls raised; five trajectories finished
            scores[1] = scores[4] = scores[6] = None
        store.put_group(f"u{i:03d}", 3, scores)
    assert len(store.keys_of("u005")) == 1 + n - 3

    batch, metrics = buf.sample(global_steps=3, partition_id="train", batch_size=P)

    sizes = group_sizes(batch.keys)
    assert "u005" not in sizes                                  # none of its trajectories trains
    assert len(sizes) == P - 1 and set(sizes.values()) == {n}   # the rest: complete groups only
    assert store.keys_of("u005") == []                          # prompt and trajectories out of the store
    assert store.cleared[("train", "u005_0_0")] == 1
    assert metrics["training_guard/lost_groups"] == 1 and metrics["training_guard/lost_groups_total"] == 1
    assert metrics["training_guard/dropped_trajectories"] == n - 3
    assert refills == []                                        # dropped, not replaced

    # what verl's GRPO makes of the batch: every group normalised over its own n answers
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    scores = torch.tensor([[0.0, 0.1 + 0.01 * int(k.split("_")[1])] for k in batch.keys])
    adv, _ = compute_grpo_outcome_advantage(scores, torch.ones_like(scores),
                                            np.array([k.split("_")[0] for k in batch.keys], dtype=object))
    per_group = {uid: adv[[k.startswith(uid + "_") for k in batch.keys], 1] for uid in sizes}
    assert all(abs(float(a.mean())) < 1e-5 and float(a.std()) == pytest.approx(1.0, abs=1e-3)
               for a in per_group.values())

    # the next step loses two more: 3 in the run > 2 allowed, the run stops before selecting anything
    for i in range(P):
        store.put_group(f"v{i:03d}", 4, [None] + distinct(n - 1, 0.2) if i in (7, 9) else distinct(n, 0.2))
    with pytest.raises(TrainingGuardStop, match=r"^training stopped at step 4: 2 training group\(s\) lost .*"
                                                r"\(3 in this run, scorer.lost_groups_allowed=2\)"):
        buf.sample(global_steps=4, partition_id="train", batch_size=P)
    assert len(store.keys_of("v007")) == n and len(store.keys_of("v001")) == 1 + n


def test_dapo_drops_lost_groups_once_and_never_counts_them_as_surplus(monkeypatch):
    def refill(store: Store, k: int) -> None:  # the prompts come back finished before the next poll
        for j in range(k):
            store.put_group(f"r{j:03d}", 7, distinct(n, 0.6))

    cfg, buf, store, refills = buffer(monkeypatch, "algo=dapo", "scorer.lost_groups_allowed=5", refill=refill)
    P, n = cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n
    assert buf.filter_groups_metric == "score_rounded"
    for i in range(P):
        if i < 4:    # all answers equally good: DAPO's filter evicts the group, verl refills 2 per group
            scores = [0.5] * n
        elif i < 6:  # lost: one session's reward call raised
            scores = [None] + distinct(n - 1, 0.3)
        else:
            scores = distinct(n, 0.3)
        store.put_group(f"u{i:03d}", 7, scores)

    batch, metrics = buf.sample(global_steps=7, partition_id="train", batch_size=P)

    sizes = group_sizes(batch.keys)
    assert refills == [8]                                           # 2 x the 4 filtered groups
    assert not {"u004", "u005"} & set(sizes) and set(sizes.values()) == {n}
    # 48 - 4 filtered - 2 lost + 8 refilled = 50 complete groups for 48 places: a full batch
    assert len(sizes) == P
    assert store.cleared[("train", "u004")] == store.cleared[("train", "u005_1_0")] == 1
    assert metrics["training/filter_groups/discarded_surplus_samples"] == 2     # complete groups only
    assert metrics["training_guard/lost_groups"] == 2
    assert metrics["training_guard/dropped_trajectories"] == 2 * (n - 1)


def test_a_step_whose_groups_were_all_lost_stops_in_one_line(monkeypatch):
    cfg, buf, store, _ = buffer(monkeypatch, "algo=grpo", "scorer.lost_groups_allowed=1000")
    P, n = cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n
    for i in range(P):
        store.put_group(f"u{i:03d}", 2, [None] + distinct(n - 1, 0.1))
    with pytest.raises(TrainingGuardStop) as err:
        buf.sample(global_steps=2, partition_id="train", batch_size=P)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"training stopped at step 2: all {P} training group(s) of the step lost to failed "
                          f"rollout or reward calls ({P} in this run, within scorer.lost_groups_allowed=1000), "
                          f"nothing left to train on")


def test_the_reward_extra_info_of_the_trained_answers_reaches_the_step_metrics(monkeypatch):
    """train-aux/<key>/mean (src/trainer/reward_metrics.py): a guard's flag rate and a component's mean over
    the trajectories the step trains on; a lost group's survivors and strings do not count."""
    cfg, buf, store, _ = buffer(monkeypatch, "algo=grpo", "scorer.lost_groups_allowed=1")
    P, n = cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n
    for i in range(P):
        store.put_group(f"u{i:03d}", 2, [None] + distinct(n - 1, 0.1) if i == 3 else distinct(n, 0.1))
    flagged = 0
    for key, fields in store.fields["train"].items():
        info = fields["extra_fields"]["reward_extra_info"]
        uid, session = key.split("_")[0], int(key.split("_")[1])
        info.update(guard_repetition=1.0 if session == 0 else 0.0, guard_code_mix=None, translation="a b",
                    bleu=0.25 if uid == "u003" else 0.5)   # u003 is lost: its 0.25 never trains
        flagged += session == 0 and uid != "u003"

    batch, metrics = buf.sample(global_steps=2, partition_id="train", batch_size=P)

    assert len(batch.keys) == (P - 1) * n
    assert metrics["train-aux/guard_repetition/mean"] == pytest.approx(flagged / len(batch.keys)) == 1 / n
    assert metrics["train-aux/bleu/mean"] == 0.5
    assert metrics["train-aux/score_rounded/mean"] == pytest.approx(0.1 + 0.01 * (n - 1) / 2)
    # a guard that is off logs None, a string is no number: neither becomes a metric
    assert not {"train-aux/guard_code_mix/mean", "train-aux/translation/mean"} & set(metrics)
