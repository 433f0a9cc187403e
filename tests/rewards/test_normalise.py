"""reward.normalise=per_component (src/rewards/normalise.py): each part of the score normalised within
its GRPO group, then weighted and summed; reward.normalise=sum is verl's grpo, as before.

Through verl 0.9.1's own code wherever it runs on CPU: the verl config the launcher builds (validated
by verl), the reward function run by verl's reward manager (`run_single`), the trajectory written as
verl's agent loop writes it (AgentLoopOutput.as_dict, list_of_dict_to_tensordict), and the advantage
computed by verl's own `_compute_advantage` of its sync trainer (the class the TaskRunner runs:
src.trainer.entry.time_limited(PPOTrainerSync)) -> compute_advantage -> the registered estimator ->
verl's compute_grpo_outcome_advantage. What is not verl's: `Store`, an in-memory stand-in for
TransferQueue's kv_batch_get / kv_batch_put (tests/lifecycle/test_lost_groups.py does the same for
the replay buffer). The expected values are computed here from sacrebleu, the plugin's formula and
the reward's rules, not by the code under test. No QE model is weighted in training: no scorer call.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import sacrebleu

from tests.helpers.reward_config import extra_info
from tests.helpers.reward_example import REF, SRC
from tests.helpers.verl_reward_harness import manager, run, sample, verl_config_for

__all__ = ["tokenizer"]  # the module-scoped fixture, shared

LENGTH = "tests/fixtures/reward_plugins/length_match.py"
# training answer = bleu (weight set per test) + 0.5 * length_match; kiwi weight 0: no scorer call
BASE = ("reward=comet", "algo=grpo", "reward.weights.kiwi=0", f"reward.plugins=[{LENGTH}]",
        "+reward.weights.length_match=0.5")
PER_COMPONENT = BASE + ("reward.normalise=per_component",)
EPS = 1e-6  # verl's compute_grpo_outcome_advantage default epsilon

TRANSLATIONS = ["The cat sat on the mat.", "The cat is sitting on the mat.", "A cat sat on a mat there.",
                "The cat sat.", "On the mat sat the cat, quietly.", "The cat was sitting on the mat today."]
GROUPS = {
    # uid -> responses: three well-formed answers and one with a broken format
    "p0": [f"<think>x</think>\n<translate>{t}</translate>" for t in TRANSLATIONS[:3]] + [f"{TRANSLATIONS[0]}"],
    # three well-formed answers and an empty one (degenerate: format bonus + empty penalty)
    "p1": [f"<think>x</think>\n<translate>{t}</translate>" for t in TRANSLATIONS[3:]]
          + ["<think>x</think>\n<translate></translate>"],
}


def expected_parts(response: str) -> dict[str, float]:
    """The reward's parts by its documented rules (conf/reward_base/default.yaml)."""
    if not response.startswith("<think>"):
        return {"bleu": 0.0, "length_match": 0.0, "rest": -1.0 + -2.0}  # format floor + answer floor
    mt = response.split("<translate>")[1].split("</translate>")[0]
    if not mt:
        return {"bleu": 0.0, "length_match": 0.0, "rest": 1.0 + -2.0}  # format bonus + empty penalty
    bleu = sacrebleu.sentence_bleu(mt, [REF], tokenize="13a", use_effective_order=True).score / 100
    return {"bleu": min(max(bleu, 0.0), 1.0), "length_match": 1.0 - min(1.0, abs(len(mt) / len(REF) - 1.0)),
            "rest": 1.0}


def z(values: list[float]) -> np.ndarray:
    """A group's values normalised as verl's GRPO does (torch.std: unbiased)."""
    v = np.asarray(values, dtype=np.float64)
    return (v - v.mean()) / (v.std(ddof=1) + EPS)


class Store:
    """TransferQueue's kv_batch_get / kv_batch_put as verl's _compute_advantage uses them, in memory:
    a get returns the selected fields of the keys as verl's own list_of_dict_to_tensordict builds
    them (nested where lengths differ, non-tensor stacks for the rest)."""

    def __init__(self):
        self.rows: dict[str, dict] = {}

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        rows = [self.rows[k] for k in keys]
        present = [f for f in (select_fields or rows[0]) if f in rows[0]]
        return list_of_dict_to_tensordict([{f: row[f] for f in present} for row in rows])

    def kv_batch_put(self, keys, partition_id, fields, tags=None):
        import torch
        from transfer_queue import KVBatchMeta

        for name in fields.keys():
            column = fields[name]
            values = column.unbind(0) if isinstance(column, torch.Tensor) else [fields[i][name] for i in range(len(keys))]
            for key, value in zip(keys, values, strict=True):
                self.rows.setdefault(key, {})[name] = value
        return KVBatchMeta(keys=list(keys), tags=list(tags or [{} for _ in keys]), partition_id=partition_id)


def trajectories(tokenizer, overrides: tuple[str, ...]) -> tuple[Store, list[str], dict[str, dict]]:
    """Every response scored by verl's reward manager for the config of `overrides`, written to the
    store as verl's V1 agent loop writes it (agent_loop_tq.py, _agent_loop_postprocess)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    mgr = manager(tokenizer, *overrides)
    store, keys, extras = Store(), [], {}
    for uid, responses in GROUPS.items():
        for session, response in enumerate(responses):
            data = sample(tokenizer, response, extra_info(SRC))
            out = run(mgr, data)
            prompt = data.batch["prompts"][0].tolist()
            ids = tokenizer(response, add_special_tokens=False)["input_ids"]
            loop_out = AgentLoopOutput(prompt_ids=prompt, response_ids=ids, response_mask=[1] * len(ids),
                                       reward_score=out["reward_score"], metrics=AgentLoopMetrics(),
                                       extra_fields={"reward_extra_info": out["reward_extra_info"]})
            field = loop_out.as_dict()
            field.update({"uid": uid, "session_id": session})
            key = f"{uid}_{session}_0"
            store.rows[key], extras[key] = field, out["reward_extra_info"]
            keys.append(key)
    return store, keys, extras


def advantages(monkeypatch, tokenizer, overrides: tuple[str, ...]) -> tuple[dict[str, float], dict[str, dict]]:
    """Per trajectory key: the advantage verl's sync trainer writes back (one value on every response
    token, checked), and the reward_extra_info. The batch is padded first as verl pads a batch that
    is not a multiple of what its workers split it into (trainer_base.py _balance_batch ->
    padding_utils.upsample_batch_to_divisible_size): padding rows copy a real row's extra_fields."""
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo import padding_utils
    from verl.trainer.ppo.v1 import PPOTrainerSync, trainer_base

    from src.rewards import normalise
    from src.trainer import entry

    store, keys, extras = trajectories(tokenizer, overrides)
    monkeypatch.setattr(trainer_base, "tq", store)
    monkeypatch.setattr(padding_utils, "tq", store)
    config = verl_config_for(*overrides)
    normalise.register_for(config)  # the TaskRunner's call (entry.py TimeLimitTaskRunner.run)
    trainer = object.__new__(entry.time_limited(PPOTrainerSync))  # only what _compute_advantage reads
    trainer.config = config
    batch = padding_utils.upsample_batch_to_divisible_size(
        KVBatchMeta(keys=keys, tags=[{"seq_len": 1} for _ in keys], partition_id="train"), 5, tokenizer.eos_token_id)
    padded = batch.keys[len(keys):]
    assert len(padded) == 2 and all(tag["is_padding"] for tag in batch.tags[len(keys):])
    metrics: dict = {}
    trainer._compute_advantage(batch, metrics)
    for key in padded:  # no response token: nothing to train on
        assert float(store.rows[key]["response_mask"].sum()) == 0.0
        assert store.rows[key]["advantages"].abs().sum() == 0.0
    out = {}
    for key in keys:
        adv = store.rows[key]["advantages"]
        assert adv.shape == store.rows[key]["response_mask"].shape
        assert np.allclose(adv.numpy(), float(adv[0]), atol=1e-6), "an outcome advantage: one value per response"
        out[key] = float(adv[0])
    return out, extras


def test_sum_is_verls_grpo_and_adds_nothing_to_the_config(monkeypatch, tokenizer, no_scorer_env):
    from omegaconf import OmegaConf

    explicit = verl_config_for(*BASE, "reward.normalise=sum")
    assert OmegaConf.to_container(explicit) == OmegaConf.to_container(verl_config_for(*BASE))
    assert explicit.algorithm.adv_estimator == "grpo"
    assert "normalise" not in explicit.reward.custom_reward_function.reward_kwargs
    adv, extras = advantages(monkeypatch, tokenizer, BASE + ("reward.normalise=sum",))
    assert not any("reward_parts" in e for e in extras.values())
    for uid, responses in GROUPS.items():
        keys = [f"{uid}_{i}_0" for i in range(len(responses))]
        scores = [extras[k]["score"] for k in keys]
        assert [adv[k] for k in keys] == pytest.approx(list(z(scores)), abs=1e-5)


def test_per_component_normalises_each_part_in_its_group_before_the_weights(monkeypatch, tokenizer, no_scorer_env):
    config = verl_config_for(*PER_COMPONENT)
    assert config.algorithm.adv_estimator == "grpo_per_component"
    assert config.reward.custom_reward_function.reward_kwargs.normalise == "per_component"
    adv, extras = advantages(monkeypatch, tokenizer, PER_COMPONENT)
    differs = False
    for uid, responses in GROUPS.items():
        keys = [f"{uid}_{i}_0" for i in range(len(responses))]
        parts = [expected_parts(r) for r in responses]
        for key, p in zip(keys, parts):
            assert json.loads(extras[key]["reward_parts"]) == pytest.approx(p, abs=1e-9)
        expected = (1.0 * z([p["bleu"] for p in parts]) + 0.5 * z([p["length_match"] for p in parts])
                    + z([p["rest"] for p in parts]))
        got = [adv[k] for k in keys]
        assert got == pytest.approx(list(expected), abs=1e-4)
        # the logged score stays the sum, and its grpo advantage is another one
        summed = z([extras[k]["score"] for k in keys])
        differs |= not np.allclose(got, summed, atol=1e-3)
    assert differs


def test_dapos_overlong_penalty_is_part_of_the_rest(monkeypatch, tokenizer, no_scorer_env):
    """algo=dapo: verl's dapo manager adds its overlong penalty to the score verl trains on; the rest
    carries it (a short max_response_length puts most answers into the buffer)."""
    overrides = tuple(o for o in PER_COMPONENT if o != "algo=grpo") + (
        "algo=dapo", "data.max_response_length=24", "algo.overlong_buffer.len=16")
    assert verl_config_for(*overrides).reward.reward_manager.name == "PureValidationDAPORewardManager"
    adv, extras = advantages(monkeypatch, tokenizer, overrides)
    assert sum(e["overlong_reward"] < 0 for e in extras.values()) >= 4
    for uid, responses in GROUPS.items():
        keys = [f"{uid}_{i}_0" for i in range(len(responses))]
        parts = [expected_parts(r) for r in responses]
        rest = [p["rest"] + extras[k]["overlong_reward"] for p, k in zip(parts, keys)]
        expected = 1.0 * z([p["bleu"] for p in parts]) + 0.5 * z([p["length_match"] for p in parts]) + z(rest)
        assert [adv[k] for k in keys] == pytest.approx(list(expected), abs=1e-4)


def test_weights_apply_after_normalisation(monkeypatch, tokenizer, no_scorer_env):
    """Doubling BLEU's weight adds BLEU normalised in its group once more: per group mean 0, std 1
    (weighting before the normalisation would leave the advantage unchanged)."""
    one, _ = advantages(monkeypatch, tokenizer, PER_COMPONENT)
    two, _ = advantages(monkeypatch, tokenizer, PER_COMPONENT + ("reward.weights.bleu=2.0",))
    for uid, responses in GROUPS.items():
        keys = [f"{uid}_{i}_0" for i in range(len(responses))]
        added = np.array([two[k] - one[k] for k in keys])
        assert abs(added.mean()) < 1e-4 and added.std(ddof=1) == pytest.approx(1.0, abs=1e-3)


def test_the_estimator_refuses_rows_that_are_not_the_held_ones():
    import torch

    from src.rewards import normalise

    normalise.register()
    mask = torch.ones(2, 3)
    with normalise.batch_parts(["a", "a"], [[0.1, 1.0], [0.2, 1.0]], {"bleu": 1.0, "rest": 1.0}):
        with pytest.raises(RuntimeError, match="is not the one whose parts were read"):
            normalise.compute_per_component_advantage(torch.zeros(2, 3), mask, np.array(["a", "b"], dtype=object))
    with pytest.raises(RuntimeError, match="without the batch's reward parts"):
        normalise.compute_per_component_advantage(torch.zeros(2, 3), mask, np.array(["a", "a"], dtype=object))


def test_parts_that_do_not_add_up_to_the_trained_score_are_refused():
    from src.rewards import normalise

    weights = {"bleu": 1.0, "rest": 1.0}
    info = {"reward_parts": '{"bleu": 0.25, "rest": 1.0}'}
    assert normalise.parts_matrix([info], weights, [1.25]) == [[0.25, 1.0]]
    # verl's dapo manager's overlong penalty is part of the rest
    assert normalise.parts_matrix([{**info, "overlong_reward": -0.5}], weights, [0.75]) == [[0.25, 0.5]]
    with pytest.raises(RuntimeError, match="add up to 1.25, its score is 0.75"):
        normalise.parts_matrix([info], weights, [0.75])
    with pytest.raises(RuntimeError, match="has no 'reward_parts'"):
        normalise.parts_matrix([{}], weights, [0.0])


@pytest.mark.parametrize("overrides, says", [
    (("reward.normalise=groupwise",), "reward.normalise must be sum or per_component, got 'groupwise'"),
    (("reward=xcomet_xl", "reward.normalise=per_component", "reward.credit=token"),
     "reward.normalise=per_component cannot be combined with reward.credit=token"),
    (("reward.normalise=per_component", "algo.norm_adv_by_std_in_grpo=false"),
     "without algo.norm_adv_by_std_in_grpo is the summed reward's advantage exactly"),
    (("reward.normalise=per_component", "+verl.trainer.use_v1=false"), "needs verl's V1 trainer"),
    (("reward.normalise=per_component", "+verl.algorithm.use_kl_in_reward=true"), "use_kl_in_reward=true"),
])
def test_combinations_that_cannot_work_are_refused_in_the_plan(overrides, says):
    from src.config import compose_config
    from src.plan import PlanError, build_plan

    with pytest.raises(PlanError) as err:
        build_plan(compose_config(["reward=comet", *overrides]), run_dir="/tmp/normalise-tests-run", flash_attn=None)
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("algo,gpus", [("grpo", "2"), ("dapo", "3")])
def test_per_component_dry_run_is_accepted_by_verl(algo, gpus, tmp_path):
    """verl's own checks beyond validate_config (worker config classes, batch splitting:
    tests/launcher/test_verl_oracle.py) pass, and verl's registry resolves the estimator."""
    from verl.trainer.ppo import core_algos

    from src import verl_config
    from src.config import compose_config
    from src.plan import build_plan
    from src.rewards import normalise
    from tests.helpers.verl_oracle import verl_accepts

    cfg = compose_config(["reward=comet", f"algo={algo}", f"gpus={gpus}", "reward.normalise=per_component",
                          f"paths.results_root={tmp_path}/results"])
    v = verl_config.build(build_plan(cfg, run_dir=str(tmp_path / "run")), cfg)
    assert verl_accepts(v)["padding"] == 0
    assert core_algos.get_adv_estimator_fn(v.algorithm.adv_estimator) is normalise.compute_per_component_advantage


@pytest.mark.parametrize("mode", ["sum", "per_component"])
def test_the_plan_table_shows_the_mode_and_its_parts(mode, tmp_path):
    from rich.console import Console

    from src.config import compose_config
    from src.plan import build_plan
    from src.plan.table import render

    cfg = compose_config(["reward=comet", f"reward.normalise={mode}", f"paths.results_root={tmp_path}/results"])
    console = Console(record=True, width=400)
    render(build_plan(cfg, run_dir=str(tmp_path / "run")), ["verl"], "v.yaml", console=console)
    (row,) = [line for line in console.export_text().splitlines() if "reward normalisation" in line]
    assert mode in row
    if mode == "per_component":
        assert "grpo_per_component" in row and "rest x1" in row
    else:
        assert "grpo_per_component" not in row


def test_a_verl_override_that_undoes_it_is_refused(tmp_path):
    from src import verl_config
    from src.config import compose_config
    from src.plan import build_plan
    from src.rewards.normalise import NormaliseConfigError

    cfg = compose_config(["reward=comet", "reward.normalise=per_component", "+verl.algorithm.adv_estimator=grpo",
                          f"paths.results_root={tmp_path}/results"])
    with pytest.raises(NormaliseConfigError, match="needs algorithm.adv_estimator=grpo_per_component, got 'grpo'"):
        verl_config.build(build_plan(cfg, run_dir=str(tmp_path / "run")), cfg)


def test_cli_refuses_in_one_line_exit_2_before_anything_is_written(tmp_path):
    from tests.helpers.launches import launch

    root = tmp_path / "refused"
    paths = [f"paths.output_dir={root}/outputs", f"paths.results_root={root}/results",
             f"paths.data_root={root}/data", f"paths.model_root={root}/models"]
    bad = launch(["reward=xcomet_xl", "reward.credit=token", "reward.normalise=per_component", "dry_run=true", *paths])
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: ") and "cannot be combined with reward.credit=token" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    assert not any(p.is_file() for p in root.rglob("*"))


def test_verls_own_gdpo_finds_no_reward_keys_in_the_v1_trainer(monkeypatch, tokenizer, no_scorer_env):
    """Why grpo_per_component exists (src/rewards/normalise.py): verl 0.9.1's gdpo estimator, run by
    its V1 trainer's _compute_advantage on the same trajectories, gets only what that step fetched
    from TransferQueue (uid, response_mask, rm_scores...), not the reward keys nor the prompts it
    reads. Should a verl upgrade make this pass, verl's gdpo can replace ours."""
    import copy

    from omegaconf import open_dict
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1 import PPOTrainerSync, trainer_base

    from src.trainer import entry

    store, keys, _ = trajectories(tokenizer, BASE)
    monkeypatch.setattr(trainer_base, "tq", store)
    config = copy.deepcopy(verl_config_for(*BASE))
    with open_dict(config):
        config.algorithm.adv_estimator = "gdpo"
        config.algorithm.gdpo_reward_keys = ["bleu", "length_match"]
    trainer = object.__new__(entry.time_limited(PPOTrainerSync))
    trainer.config = config
    with pytest.raises((KeyError, AssertionError)) as err:
        trainer._compute_advantage(KVBatchMeta(keys=keys, tags=[{} for _ in keys], partition_id="train"), {})
    assert "prompts" in str(err.value), err.value  # batch["prompts"]: read before any reward key


def test_the_training_entry_registers_it_where_verl_looks_it_up(monkeypatch, tmp_path):
    """What src/trainer/entry.py TimeLimitTaskRunner.run does in verl's TaskRunner process, here:
    before the registration verl's lookup stops the run in one line, after it resolves to ours."""
    from verl.trainer.ppo import core_algos

    from src.rewards import normalise
    from src.trainer.entry import resolve_registrations
    from src.trainer.guard import TrainingGuardStop

    monkeypatch.setenv("QE_TRAINING_STOP_FILE", str(tmp_path / "stop.txt"))
    config = verl_config_for(*PER_COMPONENT)  # the launcher's check registered it in this process: undone
    monkeypatch.delitem(core_algos.ADV_ESTIMATOR_REGISTRY, normalise.ESTIMATOR, raising=False)
    with pytest.raises(TrainingGuardStop, match="adv_estimator grpo_per_component does not resolve"):
        resolve_registrations(config)
    normalise.register_for(config)
    assert dict(resolve_registrations(config))["adv_estimator grpo_per_component"] == \
        "src.rewards.normalise.compute_per_component_advantage"
