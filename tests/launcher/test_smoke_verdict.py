"""The smoke verdict's reward and update stages pass only on evidence that the update moved the weights and
that vLLM sampled with them (issue 51, finding 17): the metrics below are what verl's file logger wrote for
experiment=smoke_tiny on the untaught policy (every answer broke the format), where the old verdict said
`update PASS actor/pg_loss step 1 0, step 2 0`."""
from __future__ import annotations

import json
from pathlib import Path

from src.pipeline import smoke
from src.record.verl_metrics import read_metrics

GOOD = {"response_length/mean": 24.5, "critic/score/mean": 0.31, "critic/score/min": -0.2,
        "critic/score/max": 0.74, "actor/pg_loss": -0.013, "actor/grad_norm": 0.41,
        "training/rollout_actor_probs_pearson_corr": 0.99994}
# the untaught policy: the format floor on every answer, so every advantage is 0
UNTAUGHT = {"response_length/mean": 48.0, "critic/score/mean": -3.0, "critic/score/min": -3.0,
            "critic/score/max": -3.0, "actor/pg_loss": 0.0, "actor/grad_norm": 0.0,
            "training/rollout_actor_probs_pearson_corr": 0.99991}


def _verdict(tmp_path: Path, *steps: dict) -> dict[str, smoke.Stage]:
    path = tmp_path / f"metrics-{len(list(tmp_path.glob('metrics-*')))}" / "run.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps({"step": i, "data": d}) + "\n" for i, d in enumerate(steps, 1)))
    return {s.name: s for s in smoke.metric_stages(read_metrics(path), path)}


def test_a_step_whose_answers_differ_and_whose_weights_moved_and_synced_passes_naming_each_metric(tmp_path):
    got = _verdict(tmp_path, GOOD, {**GOOD, "actor/grad_norm": 0.37})
    assert all(s.ok for s in got.values()), got
    assert "critic/score/min..critic/score/max" in got["reward"].evidence
    for metric in ("actor/pg_loss", "actor/grad_norm step 1 0.41, step 2 0.37",
                   "training/rollout_actor_probs_pearson_corr step 1 0.9999"):
        assert metric in got["update"].evidence, got["update"]


def test_the_untaught_policys_run_fails_reward_and_update(tmp_path):
    got = _verdict(tmp_path, UNTAUGHT, UNTAUGHT)
    assert got["rollout"].ok
    assert not got["reward"].ok and "every answer got the same score at step(s) [1, 2]" in got["reward"].evidence
    assert not got["update"].ok and "actor/grad_norm is not a positive number" in got["update"].evidence


def test_answers_that_differ_but_a_zero_gradient_fails_the_update(tmp_path):
    got = _verdict(tmp_path, GOOD, {**GOOD, "actor/grad_norm": 0.0})
    assert got["reward"].ok
    assert not got["update"].ok and "at step(s) [2]" in got["update"].evidence
    assert "a zero gradient moves no weight" in got["update"].evidence


def test_vllm_sampling_with_other_weights_than_the_actors_fails_the_update(tmp_path):
    """A weight sync that did not reach vLLM: its log-probs no longer follow the actor's."""
    got = _verdict(tmp_path, GOOD, {**GOOD, "training/rollout_actor_probs_pearson_corr": 0.42})
    assert not got["update"].ok
    assert "training/rollout_actor_probs_pearson_corr not above 0.99 at step(s) [2]" in got["update"].evidence


def test_a_trainer_that_does_not_report_the_sync_or_the_gradient_fails_the_update(tmp_path):
    without = {k: v for k, v in GOOD.items() if k != "training/rollout_actor_probs_pearson_corr"}
    got = _verdict(tmp_path, without, without)
    assert not got["update"].ok and "rollout.calculate_log_probs is off" in got["update"].evidence
    no_grad = {k: v for k, v in GOOD.items() if k != "actor/grad_norm"}
    got = _verdict(tmp_path, no_grad, no_grad)
    assert not got["update"].ok and "actor/grad_norm" in got["update"].evidence


def test_a_non_finite_loss_fails_the_update_before_anything_else(tmp_path):
    got = _verdict(tmp_path, GOOD, {**GOOD, "actor/pg_loss": float("nan")})
    assert not got["update"].ok and "actor/pg_loss is not a finite number at step(s) [2]" in got["update"].evidence
